"""``etl status``, ``etl lineage`` and ``etl epochs``: what operators look at. No Spark."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from catalog import RevisionState
from etl.cli.app import CatalogUrl, PipelineName, Warehouse, app, guard, open_catalog
from etl.cli.render import fitted_columns, out, rows_table
from etl.errors import UsageError


class LineageFormat(StrEnum):
    """``table`` (the human one, as on every command): the graph drawn as an indented tree."""

    TABLE = "table"
    DOT = "dot"
    MERMAID = "mermaid"
    JSON = "json"


@app.command()
@guard
def status(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
    watch: Annotated[bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between refreshes with --watch.", min=0.2)
    ] = 2.0,
    pipeline: PipelineName = None,
) -> None:
    """Per pipeline a summary; per table in lineage order: writer job, latest PROCESSED and
    WRITTEN epochs, lag (epochs, seconds against now), end-to-end freshness, whether its
    job is running, last failure, blocks and the command that resolves them.

    Example: etl status --format json
    """
    from etl.report import status_report, to_json

    with open_catalog(warehouse, catalog_url) as catalog:

        def report():
            return status_report(catalog, pipeline=pipeline)

        if format == "json":
            typer.echo(to_json(report()))
            return
        if not watch:
            out.print(status_view(report()), soft_wrap=False)
            return
        from rich.console import Console
        from rich.live import Live

        try:
            # Not `out`, which soft-wraps: a frame's lines must wrap at the terminal's width.
            with Live(status_view(report()), console=Console(), auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(status_view(report()), refresh=True)
        except KeyboardInterrupt:
            return


def _short(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def status_view(report):
    """The report as Rich renderables that fit the terminal: one line per pipeline, a
    table of the tables, then what needs an operator (blocks, failures, stale jobs).
    Lines wrap (never cut) and the table drops its less important columns when narrow."""
    from rich.console import Group
    from rich.text import Text

    lines = [Text(p.summary) for p in report.pipelines]
    several = len({r.pipeline for r in report.tables}) > 1
    columns = [
        *(["pipeline"] if several else []),
        "table",
        "writer",
        "processed",
        "written",
        "lag",
        "age",
        "fresh",
        "running",
        "commit",
        "problem",
    ]
    cells = []
    for r in report.tables:
        problem = ""
        if r.retired:
            problem = "retired"
        elif r.blocked_epoch is not None:
            problem = f"blocked at {r.blocked_epoch}"
        elif r.last_failure is not None and (
            r.written_at is None or r.last_failure["failed_at"] > r.written_at
        ):
            problem = f"failed at {r.last_failure['epoch']}: {r.last_failure['error_class']}"
        elif r.orphaned:
            problem = "no writer"
        elif r.stale_job:
            problem = "not in the last run"
        running = None
        if r.running:
            running = "yes" if r.owner_alive != "dead" else "dead owner"
        cells.append(
            [
                *([r.pipeline] if several else []),
                r.table,
                r.writer_job,
                r.latest_processed,
                r.latest_written,
                r.lag_epochs,
                _short(r.lag_seconds),
                _short(r.freshness_seconds),
                running,
                r.last_commit,
                problem,
            ]
        )
    notes = []
    runs: dict[tuple[str, str, str], list[str]] = {}  # one note per run: its jobs
    for r in report.tables:
        if r.blocked and r.resolve:
            notes.append(Text(f"blocked: {r.table}: {r.blocked}. Resolve: {r.resolve}"))
        failure = r.last_failure
        if (
            failure is not None
            and not r.retired
            and (r.written_at is None or failure["failed_at"] > r.written_at)
        ):
            # The recorded message names the job and the epoch (or recovery) already.
            notes.append(
                Text(
                    f"failed: {failure['message']} (attempt {failure['attempt']}, "
                    f"{failure['failed_at']:%Y-%m-%d %H:%M:%S})",
                )
            )
        if r.running and r.lease_owner:
            until = f"{r.lease_expires_at:%H:%M:%S}" if r.lease_expires_at else "-"
            jobs = runs.setdefault((r.lease_owner, r.owner_alive or "", until), [])
            if r.writer_job not in jobs:
                jobs.append(r.writer_job)
        if r.orphaned:
            notes.append(
                Text(
                    f"stale: table {r.table} has no writer: no job of its pipeline file writes "
                    f"it any more, and it holds the pipeline's COMMIT back: {r.orphaned}",
                )
            )
        if r.stale_job and r.kind in ("root", "derived"):
            notes.append(
                Text(
                    f"stale: job {r.writer_job} was not part of its pipeline's latest run; "
                    f"if the pipeline file no longer declares it: {r.stale_job}",
                )
            )
    for (owner, alive, until), jobs in runs.items():
        takeover = {
            "dead": "; its process is gone: the next `etl run` or `etl recover` takes it over "
            "at once",
            "unknown": "; on another host: if that run died, the next `etl run` takes it over "
            f"when the lease lapses at {until}",
        }.get(alive, "")
        notes.append(
            Text(
                f"running: job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)} by {owner} "
                f"({alive or 'unknown'}), lease until {until}{takeover}"
            )
        )
    seen = set()
    unique_notes = []
    for note in notes:
        if note.plain not in seen:
            seen.add(note.plain)
            unique_notes.append(note)
    columns, cells = fitted_columns(
        columns,
        cells,
        width=out.width,
        drop_first=("commit", "processed", "running", "fresh", "writer", "age", "pipeline"),
    )
    table = rows_table(columns, cells, title="tables (lineage order)")
    return Group(*lines, table, *unique_notes)


@app.command()
@guard
def lineage(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[
        LineageFormat, typer.Option("--format", case_sensitive=False)
    ] = LineageFormat.TABLE,
    pipeline: PipelineName = None,
) -> None:
    """The graph of sources, jobs and tables (json: each node's kind and pipeline).

    Example: etl lineage --format mermaid
    """
    from etl.report import lineage_graph, lineage_text

    with open_catalog(warehouse, catalog_url) as catalog:
        graph = lineage_graph(catalog, pipeline=pipeline)
    typer.echo(lineage_text(graph, fmt=format.value))


@app.command()
@guard
def epochs(
    table: Annotated[
        str | None, typer.Argument(help="Table name (omit it with --pipeline).")
    ] = None,
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
    last: Annotated[int, typer.Option(help="Show the newest N epochs.", min=1)] = 50,
    pipeline: PipelineName = None,
) -> None:
    """A table's epochs: state, Delta version, rows, validation, times, catch-up slices.
    With --pipeline and no table: the pipeline's epochs (barrier, COMMIT, expiry).

    Example: etl epochs word_counts --last 10
    """
    if table is None:
        if pipeline is None:
            raise UsageError("give a TABLE, or --pipeline NAME for a pipeline's epochs")
        _pipeline_epochs(warehouse, catalog_url, pipeline, format=format, last=last)
        return
    with open_catalog(warehouse, catalog_url) as catalog:
        tables = {t.name: t.pipeline for t in catalog.list_tables()}
        known = sorted(tables)
        if table not in known:
            raise UsageError(f"unknown table {table!r}; the catalog has {known}")
        if pipeline not in (None, tables[table]):
            raise UsageError(
                f"table {table!r} belongs to pipeline {tables[table]!r}, not {pipeline!r}"
            )
        states = catalog.table_epochs(table)[-last:]
        checks = {v.epoch: v for v in catalog.validations(table)}
        barrier = (
            {e.id: e.barrier_ts for e in catalog.epochs(after=states[0].epoch - 1)}
            if states
            else {}
        )
        source = next(
            (j.source for j in catalog.list_jobs() if j.output == table and j.source), None
        )
        slices = {
            s.epoch: recorded
            for s in states
            if source and (recorded := catalog.get_slice(source, s.epoch)) is not None
        }
        info = catalog.get_table(table)
        expired = {e.epoch: e for e in catalog.expired_epochs(pipeline=info.pipeline)}
        pinned = {p.epoch for p in catalog.active_pins() if p.epoch is not None}
        pinned_versions = {p.versions.get(table) for p in catalog.active_pins()}
        tagged: dict[int, list[str]] = {}
        for tag in catalog.list_tags():
            tagged.setdefault(tag.epoch, []).append(tag.name)
        resolved = {r.epoch: r for r in catalog.resolutions(table)}
        revisions = catalog.revisions(table=table)
        writer = info.writer_job
        failed: dict[int, list] = {}
        if writer is not None:
            for failure in catalog.failures(job=writer, limit=500):
                if failure.epoch is not None:
                    failed.setdefault(failure.epoch, []).append(failure)
        if missing := set(failed) - set(barrier):  # failed epochs with no state of their own
            barrier |= {
                e.id: e.barrier_ts
                for e in catalog.epochs(after=min(missing) - 1)
                if e.id in missing
            }
    records: list[dict[str, Any]] = [
        {
            "epoch": s.epoch,
            "state": s.state.value,
            "delta_version": s.delta_version,
            "rows": s.rows,
            "attempt": s.attempt,
            "coalesced_into": s.coalesced_into,
            "catch_up": slices[s.epoch].catch_up if s.epoch in slices else None,
            "failed_expectations": (
                checks[s.epoch].results.get("failed_expectations") if s.epoch in checks else None
            ),
            "validation": (
                None
                if s.epoch not in checks
                else ("passed" if checks[s.epoch].success else "failed")
                + f" ({checks[s.epoch].policy})"
            ),
            "barrier_ts": ts.isoformat() if (ts := barrier.get(s.epoch)) else None,
            "updated_at": s.updated_at.isoformat() if s.updated_at else None,
            "failures": [_failure_json(f) for f in failed.get(s.epoch, [])],
            "resolution": _resolution_json(resolved.get(s.epoch)),
            "retention": _retention(
                s, expired=expired, pinned=pinned, pinned_versions=pinned_versions, tagged=tagged
            ),
            "revision": _revision_of(revisions, s.epoch),
        }
        for s in states
    ]
    known_epochs = {s.epoch for s in states}
    oldest = states[0].epoch if len(states) >= last else 0
    for epoch, items in failed.items():
        if epoch not in known_epochs and epoch > oldest:
            records.append(
                {
                    "epoch": epoch,
                    "state": "FAILED",
                    "delta_version": None,
                    "rows": None,
                    "attempt": max((f.attempt or 0) for f in items) or None,
                    "coalesced_into": None,
                    "catch_up": None,
                    "failed_expectations": None,
                    "validation": None,
                    "barrier_ts": ts.isoformat() if (ts := barrier.get(epoch)) else None,
                    "updated_at": items[0].failed_at.isoformat() if items[0].failed_at else None,
                    "failures": [_failure_json(f) for f in items],
                    "resolution": None,
                    "retention": None,
                    "revision": None,
                }
            )
    records.sort(key=lambda r: r["epoch"])
    records = records[-last:]  # a failed epoch with no state of its own counts as one
    if format == "json":
        typer.echo(json.dumps(records, indent=2))
        return
    columns = [
        "epoch",
        "state",
        "delta_version",
        "rows",
        "attempt",
        "validation",
        "barrier_ts",
        "retention",
    ]
    cells = [[record[c] for c in columns] for record in records]
    if failed:
        columns.append("failed attempts")
        for row, record in zip(cells, records, strict=True):
            row.append(
                "; ".join(f"#{f['attempt']} {_failure_text(f)[:160]}" for f in record["failures"])
            )
    if resolved:
        columns.append("resolution")
        for row, record in zip(cells, records, strict=True):
            done = record["resolution"]
            row.append(f"{done['action']} by {done['actor']}: {done['reason']}" if done else "")
    if slices:
        columns.append("slice")
        for row, record in zip(cells, records, strict=True):
            row.append("catch-up" if record["catch_up"] else "")
    if any(record["revision"] for record in records):
        columns.append("revision")
        for row, record in zip(cells, records, strict=True):
            row.append(record["revision"])
    out.print(rows_table(columns, cells, title=f"epochs of {table}"))
    if revisions:
        from etl.report import revision_text

        now = datetime.now(UTC)
        for revision in revisions:
            out.print(revision_text(revision, now), highlight=False, soft_wrap=True)


def _revision_of(revisions, epoch: int) -> int | None:
    """The switched revision whose versions the table's ``epoch`` is recorded at, if any."""
    return max(
        (
            r.id
            for r in revisions
            if r.state is RevisionState.SWITCHED
            and r.from_epoch <= epoch <= (r.through_epoch or r.from_epoch)
        ),
        default=None,
    )


def _pipeline_epochs(
    warehouse: Path, catalog_url: str | None, pipeline: str, *, format: str, last: int
) -> None:
    """The newest ``last`` epochs of a pipeline: barrier, whether COMMIT, expiry."""
    from etl.report import check_pipeline

    with open_catalog(warehouse, catalog_url) as catalog:
        check_pipeline(catalog, pipeline)
        issued = catalog.epochs(pipeline=pipeline)[-last:]
        expired = {e.epoch: e.rule for e in catalog.expired_epochs(pipeline=pipeline)}
        records = [
            {
                "epoch": e.id,
                "pipeline": e.pipeline,
                "barrier_ts": e.barrier_ts.isoformat(),
                "commit": catalog.get_commit(e.id) is not None,
                "expired": expired.get(e.id),
            }
            for e in issued
        ]
    if format == "json":
        typer.echo(json.dumps(records, indent=2))
        return
    columns = ["epoch", "barrier_ts", "commit", "expired"]
    out.print(
        rows_table(
            columns,
            [[r[c] for c in columns] for r in records],
            title=f"epochs of pipeline {pipeline}",
        )
    )


def _resolution_json(resolution) -> dict[str, Any] | None:
    """How an operator resolved a blocked epoch (etl resolve), as recorded."""
    if resolution is None:
        return None
    return {
        "action": resolution.action.value,
        "actor": resolution.actor,
        "reason": resolution.reason,
        "at": resolution.at.isoformat() if resolution.at else None,
    }


def _retention(state, *, expired, pinned, pinned_versions, tagged) -> str | None:
    """Whether a sealed epoch's cut is still readable, and what holds it."""
    if state.state.value != "WRITTEN":
        return None
    if state.epoch in expired:
        return f"expired ({expired[state.epoch].rule})"
    held = []
    if state.epoch in pinned or state.delta_version in pinned_versions:
        held.append("pinned")
    if state.epoch in tagged:
        held.append("tagged " + ", ".join(sorted(tagged[state.epoch])))
    return "retained" + (f": {'; '.join(held)}" if held else "")


def _failure_text(failure: dict) -> str:
    """A failure's message, its error class in front unless the message names it already."""
    if failure["error_class"] in failure["message"]:
        return failure["message"]
    return f"{failure['error_class']}: {failure['message']}"


def _failure_json(failure) -> dict:
    return {
        "attempt": failure.attempt,
        "error_class": failure.error_class,
        "message": failure.message,
        "failed_at": failure.failed_at.isoformat() if failure.failed_at else None,
        "owner": failure.owner,
    }


__all__ = [
    "epochs",
    "lineage",
    "status",
    "status_view",
]
