"""``etl status``, ``etl lineage`` and ``etl epochs``: what operators look at. No Spark."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import typer

from etl.cli.app import CatalogUrl, PipelineName, Warehouse, app, guard, open_catalog
from etl.cli.render import fitted_columns, out, rows_table


class LineageFormat(StrEnum):
    """``table`` (the human one, as on every command): the graph drawn as an indented tree."""

    TABLE = "table"
    DOT = "dot"
    MERMAID = "mermaid"
    JSON = "json"


@app.command()
@guard
def status(
    warehouse: Warehouse = "warehouse",
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


def status_view(report):
    """The report as Rich renderables that fit the terminal: one line per pipeline, a
    table of the tables, then what needs an operator (blocks, failures, stale jobs).
    Lines wrap (never cut) and the table drops its less important columns when narrow."""
    from rich.console import Group
    from rich.text import Text

    from etl.report import duration_text

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
                duration_text(r.lag_seconds, compact=True),
                duration_text(r.freshness_seconds, compact=True),
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
    warehouse: Warehouse = "warehouse",
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
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
    last: Annotated[int, typer.Option(help="Show the newest N epochs.", min=1)] = 50,
    pipeline: PipelineName = None,
) -> None:
    """A table's epochs: state, Delta version, rows, validation, times, catch-up slices.
    With --pipeline and no table: the pipeline's epochs (barrier, COMMIT, expiry).

    Example: etl epochs word_counts --last 10
    """
    from etl.errors import UsageError
    from etl.report import pipeline_epochs, table_epochs

    if table is None:
        if pipeline is None:
            raise UsageError("give a TABLE, or --pipeline NAME for a pipeline's epochs")
        with open_catalog(warehouse, catalog_url) as catalog:
            issued = pipeline_epochs(catalog, pipeline, last=last)
        _print_pipeline_epochs(issued, pipeline, format=format)
        return
    with open_catalog(warehouse, catalog_url) as catalog:
        report = table_epochs(catalog, table, pipeline=pipeline, last=last)
    records = report.records
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
    if report.has_failures:
        columns.append("failed attempts")
        for row, record in zip(cells, records, strict=True):
            row.append(
                "; ".join(f"#{f['attempt']} {_failure_text(f)[:160]}" for f in record["failures"])
            )
    if report.has_resolutions:
        columns.append("resolution")
        for row, record in zip(cells, records, strict=True):
            done = record["resolution"]
            row.append(f"{done['action']} by {done['actor']}: {done['reason']}" if done else "")
    if report.has_slices:
        columns.append("slice")
        for row, record in zip(cells, records, strict=True):
            row.append("catch-up" if record["catch_up"] else "")
    if any(record["revision"] for record in records):
        columns.append("revision")
        for row, record in zip(cells, records, strict=True):
            row.append(record["revision"])
    out.print(rows_table(columns, cells, title=f"epochs of {table}"))
    if report.revisions:
        from etl.report import revision_text

        now = datetime.now(UTC)
        for revision in report.revisions:
            out.print(revision_text(revision, now), highlight=False, soft_wrap=True)


def _print_pipeline_epochs(records: list[dict[str, Any]], pipeline: str, *, format: str) -> None:
    """A pipeline's epochs (barrier, whether COMMIT, expiry) as JSON or a table."""
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


def _failure_text(failure: dict) -> str:
    """A failure's message, its error class in front unless the message names it already."""
    if failure["error_class"] in failure["message"]:
        return failure["message"]
    return f"{failure['error_class']}: {failure['message']}"


__all__ = [
    "epochs",
    "lineage",
    "status",
    "status_view",
]
