"""What operators see: per-table status, lineage and epoch listings, as plain data."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from catalog import (
    PIPELINE_DEFAULT,
    Catalog,
    EpochState,
    JobFailureRecord,
    Resolution,
    Revision,
    RevisionState,
)
from etl.errors import UsageError

if TYPE_CHECKING:
    from etl.pipeline import Pipeline
    from etl.runner import RunResult, Undeclared


@dataclass(frozen=True)
class TableStatusRow:
    """One table as an operator sees it. Times are against ``now`` (the report's time)."""

    table: str
    pipeline: str
    kind: str
    writer_job: str | None
    retired: bool
    latest_processed: int | None
    latest_written: int | None
    written_at: datetime | None
    """When the latest WRITTEN epoch was sealed."""
    written_barrier_ts: datetime | None
    """The barrier timestamp of the latest WRITTEN epoch."""
    lag_epochs: int | None
    """How many of its pipeline's epochs the table has not sealed yet."""
    lag_seconds: float | None
    """Age (now - barrier timestamp) of the table's latest WRITTEN epoch."""
    freshness_seconds: float | None
    """End to end: age of the newest source barrier visible at repeatable-read through
    the table and every table upstream of it."""
    freshness_epoch: int | None
    """That repeatable-read epoch."""
    running: bool
    """Its writer job holds a live lease: a run is working on it."""
    lease_owner: str | None
    lease_acquired_at: datetime | None
    lease_expires_at: datetime | None
    owner_alive: str | None
    """alive, dead or unknown (another host): whether the lease owner's process lives."""
    last_failure: dict[str, object] | None
    """The writer job's newest failure: epoch, attempt, error_class, message, failed_at."""
    blocked_epoch: int | None
    blocked: str | None
    """Why the epoch is blocked (the failed expectations)."""
    resolve: str | None
    """The command that resolves the block."""
    stale_job: str | None
    """Set when the writer job was not part of its pipeline's latest run (its file may no
    longer declare it): the command that retires it."""
    orphaned: str | None
    """Set when no job writes the active table any more (its job no longer declares it,
    e.g. a removed gate's quarantine table), which holds its pipeline's COMMIT back: the
    command that retires it."""
    last_commit: int | None
    """The newest COMMIT epoch of the table's pipeline."""


@dataclass(frozen=True)
class PipelineStatus:
    pipeline: str
    tables: int
    latest_epoch: int | None
    latest_epoch_age_seconds: float | None
    last_commit: int | None
    last_commit_age_seconds: float | None
    running: bool
    running_jobs: list[str]
    blocked: int
    failing_jobs: list[str]
    max_lag_epochs: int | None
    freshness_seconds: float | None
    """The worst end-to-end freshness among its tables."""
    summary: str
    expired_epochs: int = 0
    """Epochs retention expired (their cuts are no longer readable)."""
    pins: int = 0
    """Open readers' pins on its cuts."""
    tags: list[str] = field(default_factory=list)
    last_revision: dict[str, object] | None = None
    """Its newest revision (etl recompute): id, state, tables, epochs, why, who, when."""


@dataclass(frozen=True)
class StatusReport:
    generated_at: datetime
    pipelines: list[PipelineStatus]
    tables: list[TableStatusRow]


def _age(now: datetime, ts: datetime | None) -> float | None:
    if ts is None:
        return None
    return round((now - ts).total_seconds(), 3)


def _lineage_order(catalog: Catalog, names: list[str]) -> list[str]:
    """Tables upstream first (sources' tables, then what reads them), name within a level."""
    jobs = catalog.list_jobs(include_retired=True)
    inputs_of: dict[str, set[str]] = {}
    for job in jobs:
        for table in (job.output, *job.side_outputs):
            inputs_of.setdefault(table, set()).update(job.inputs)
    depth: dict[str, int] = {}

    def level(table: str, seen: frozenset[str] = frozenset()) -> int:
        if table in depth:
            return depth[table]
        parents = [t for t in inputs_of.get(table, ()) if t not in seen]
        depth[table] = 1 + max((level(p, seen | {table}) for p in parents), default=-1)
        return depth[table]

    return sorted(names, key=lambda n: (level(n), n))


def _ancestors(catalog: Catalog) -> dict[str, set[str]]:
    inputs_of: dict[str, set[str]] = {}
    for job in catalog.list_jobs():
        for table in (job.output, *job.side_outputs):
            inputs_of.setdefault(table, set()).update(job.inputs)
    closure: dict[str, set[str]] = {}

    def up(table: str) -> set[str]:
        if table not in closure:
            closure[table] = set()
            for parent in inputs_of.get(table, ()):
                closure[table] |= {parent, *up(parent)}
        return closure[table]

    for table in inputs_of:
        up(table)
    return closure


def check_pipeline(catalog: Catalog, pipeline: str | None) -> None:
    """UsageError naming the known pipelines if ``pipeline`` is not one (None: all of them)."""
    known = [p.name for p in catalog.list_pipelines()]
    if pipeline is not None and pipeline not in known:
        raise UsageError(f"unknown pipeline {pipeline!r}; the catalog has {known}")


def status_report(
    catalog: Catalog, *, now: datetime | None = None, pipeline: str | None = None
) -> StatusReport:
    """Every table and pipeline (or only ``pipeline``'s), as ``etl status`` shows them."""
    from etl.leases import owner_state

    check_pipeline(catalog, pipeline)
    only = pipeline  # the loops below name each row's pipeline ``pipeline``
    now = now or datetime.now(UTC)
    statuses = {s.table: s for s in catalog.table_status() if only in (None, s.pipeline)}
    order = _lineage_order(catalog, list(statuses))
    ancestors = _ancestors(catalog)
    leases = {}
    rows: list[TableStatusRow] = []
    barrier_cache: dict[int, datetime] = {}

    def barrier(epoch: int) -> datetime:
        if epoch not in barrier_cache:
            barrier_cache[epoch] = catalog.get_epoch(epoch).barrier_ts
        return barrier_cache[epoch]

    pipeline_epochs: dict[str, list[int]] = {}
    for name in order:
        status = statuses[name]
        written = status.latest_written
        processed = status.latest_processed
        pipeline = status.pipeline
        latest = status.pipeline_latest_epoch
        lag_epochs = None
        if latest is not None and not status.retired:
            done = written.epoch if written else 0
            if pipeline not in pipeline_epochs:
                pipeline_epochs[pipeline] = [e.id for e in catalog.epochs(pipeline=pipeline)]
            lag_epochs = sum(1 for e in pipeline_epochs[pipeline] if e > done)
        written_ts = status.latest_written_barrier_ts
        freshness_epoch = None
        if written is not None:
            upstream = ancestors.get(name, set())
            candidates = [written.epoch]
            if upstream:
                candidates += [
                    s.epoch
                    for s in reversed(
                        catalog.table_epochs(name, after=max(0, written.epoch - 100))[-20:]
                    )
                    if s.state is EpochState.WRITTEN and s.epoch != written.epoch
                ]
            for epoch in candidates:
                states = catalog.states_at(upstream, epoch) if upstream else {}
                if all(
                    (st := states.get(t)) is not None and st.state is EpochState.WRITTEN
                    for t in upstream
                ):
                    freshness_epoch = epoch
                    break
        lease = status.writer_lease
        live = lease is not None and lease.expires_at > now
        if lease is not None:
            leases[status.writer_job] = lease
        failure = status.writer_last_failure
        last_failure: dict[str, object] | None = None
        if failure is not None:
            last_failure = {
                "epoch": failure.epoch,
                "attempt": failure.attempt,
                "error_class": failure.error_class,
                "message": failure.message,
                "failed_at": failure.failed_at,
                "owner": failure.owner,
            }
        blocked = blocked_epoch = resolve = None
        validation = status.latest_validation
        # GateOutcome.summary(): "blocking" lists the failed expectations that keep the
        # epoch from being sealed (empty under `warn`, or when the rest could be sealed).
        blocking = validation.results.get("blocking") if validation is not None else None
        if (
            validation is not None
            and isinstance(blocking, list)
            and blocking
            and processed is not None
            and processed.epoch == validation.epoch
            and processed.state is EpochState.PROCESSED
        ):
            blocked_epoch = validation.epoch
            blocked = f"epoch {validation.epoch} failed validation: {', '.join(map(str, blocking))}"
            resolve = (
                f"etl resolve {name} {validation.epoch} --accept|--skip|--quarantine "
                "(--quarantine with --pipeline FILE and the run's --param KEY=VALUE)"
            )
        stale = None
        if (
            status.writer_job is not None
            and not status.retired
            and latest is not None
            # A run holds every job of its file from before it opens its epoch until it
            # ends: a lease that ended before the newest epoch was opened was not in it.
            and (lease is None or lease.expires_at < latest.created_at)
            and not live
        ):
            stale = f"etl retire job {status.writer_job}"
        orphaned = None
        if status.writer_job is None and not status.retired:
            orphaned = f"etl retire table {name}"
        rows.append(
            TableStatusRow(
                table=name,
                pipeline=pipeline,
                kind=status.kind,
                writer_job=status.writer_job,
                retired=status.retired,
                latest_processed=processed.epoch if processed else None,
                latest_written=written.epoch if written else None,
                written_at=written.updated_at if written else None,
                written_barrier_ts=written_ts,
                lag_epochs=lag_epochs,
                lag_seconds=_age(now, written_ts),
                freshness_seconds=(
                    _age(now, barrier(freshness_epoch)) if freshness_epoch is not None else None
                ),
                freshness_epoch=freshness_epoch,
                running=live,
                lease_owner=lease.owner if live and lease is not None else None,
                lease_acquired_at=lease.acquired_at if live and lease is not None else None,
                lease_expires_at=lease.expires_at if live and lease is not None else None,
                owner_alive=owner_state(lease.owner) if live and lease is not None else None,
                last_failure=last_failure,
                blocked_epoch=blocked_epoch,
                blocked=blocked,
                resolve=resolve,
                stale_job=stale,
                orphaned=orphaned,
                last_commit=(
                    status.pipeline_latest_commit.epoch if status.pipeline_latest_commit else None
                ),
            )
        )
    pipelines = []
    pins = catalog.active_pins()
    tags = catalog.list_tags()
    for info in catalog.list_pipelines():
        mine = [r for r in rows if r.pipeline == info.name and not r.retired]
        if only not in (None, info.name) or (not mine and info.name == PIPELINE_DEFAULT):
            continue
        latest = catalog.latest_epoch(pipeline=info.name)
        commit = catalog.latest_commit(pipeline=info.name)
        running_jobs = sorted({r.writer_job for r in mine if r.running and r.writer_job})
        failing = sorted(
            {
                r.writer_job
                for r in mine
                if r.writer_job
                and r.last_failure is not None
                and (
                    r.written_at is None
                    or (
                        isinstance(r.last_failure["failed_at"], datetime)
                        and r.last_failure["failed_at"] > r.written_at
                    )
                )
            }
        )
        lags = [r.lag_epochs for r in mine if r.lag_epochs is not None]
        fresh = [r.freshness_seconds for r in mine if r.freshness_seconds is not None]
        blocked_count = sum(1 for r in mine if r.blocked)
        latest_age = _age(now, latest.barrier_ts) if latest else None
        commit_age = _age(now, commit.barrier_ts) if commit and commit.barrier_ts else None
        parts = [
            f"pipeline {info.name}: {len(mine)} tables",
            "running" if running_jobs else "not running",
            f"latest epoch {latest.id} ({duration_text(latest_age)} ago)"
            if latest
            else "no epochs",
            f"last COMMIT {commit.epoch} ({duration_text(commit_age)} ago)"
            if commit
            else "no COMMIT yet",
        ]
        if lags:
            parts.append(f"max lag {max(lags)} epoch(s)")
        if blocked_count:
            parts.append(f"{blocked_count} blocked")
        if failing:
            parts.append(f"failing: {', '.join(failing)}")
        expired = len(catalog.expired_epochs(pipeline=info.name))
        pinned = sum(1 for p in pins if p.pipeline in (info.name, None))
        tagged = sorted(t.name for t in tags if t.pipeline in (info.name, None))
        if expired or pinned or tagged:
            parts.append(
                f"retention: {expired} epoch(s) expired, {pinned} pin(s), "
                f"tags {', '.join(tagged) or '-'}"
            )
        revisions = catalog.revisions(pipeline=info.name)
        last_revision = revision_json(revisions[-1]) if revisions else None
        if revisions:
            parts.append(revision_text(revisions[-1], now))
        pipelines.append(
            PipelineStatus(
                pipeline=info.name,
                tables=len(mine),
                latest_epoch=latest.id if latest else None,
                latest_epoch_age_seconds=latest_age,
                last_commit=commit.epoch if commit else None,
                last_commit_age_seconds=commit_age,
                running=bool(running_jobs),
                running_jobs=running_jobs,
                blocked=blocked_count,
                failing_jobs=failing,
                max_lag_epochs=max(lags) if lags else None,
                freshness_seconds=max(fresh) if fresh else None,
                summary=", ".join(parts),
                expired_epochs=expired,
                pins=pinned,
                tags=tagged,
                last_revision=last_revision,
            )
        )
    return StatusReport(generated_at=now, pipelines=pipelines, tables=rows)


@dataclass(frozen=True)
class TableEpochs:
    """A table's newest epochs as ``etl epochs TABLE`` shows them."""

    table: str
    records: list[dict[str, Any]]
    """Per epoch (oldest first): state, Delta version, rows, validation, failed attempts,
    resolution, retention, revision; as ``etl epochs --format json`` prints them."""
    revisions: tuple[Revision, ...]
    has_failures: bool
    """Whether the table's writer has failed attempts on record (of any epoch)."""
    has_resolutions: bool
    """Whether an operator resolved any blocked epoch of the table."""
    has_slices: bool
    """Whether any epoch shown has a recorded source slice (a root table)."""


def table_epochs(
    catalog: Catalog, table: str, *, pipeline: str | None = None, last: int = 50
) -> TableEpochs:
    """The newest ``last`` epochs of ``table`` (a failed epoch with no state of its own
    counts as one). UsageError for an unknown table, or one not of ``pipeline``."""
    tables = {t.name: t.pipeline for t in catalog.list_tables()}
    known = sorted(tables)
    if table not in known:
        raise UsageError(f"unknown table {table!r}; the catalog has {known}")
    if pipeline not in (None, tables[table]):
        raise UsageError(f"table {table!r} belongs to pipeline {tables[table]!r}, not {pipeline!r}")
    states = catalog.table_epochs(table)[-last:]
    checks = {v.epoch: v for v in catalog.validations(table)}
    barrier = (
        {e.id: e.barrier_ts for e in catalog.epochs(after=states[0].epoch - 1)} if states else {}
    )
    source = next((j.source for j in catalog.list_jobs() if j.output == table and j.source), None)
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
    failed: dict[int, list] = {}
    if info.writer_job is not None:
        for failure in catalog.failures(job=info.writer_job, limit=500):
            if failure.epoch is not None:
                failed.setdefault(failure.epoch, []).append(failure)
    if missing := set(failed) - set(barrier):  # failed epochs with no state of their own
        barrier |= {
            e.id: e.barrier_ts for e in catalog.epochs(after=min(missing) - 1) if e.id in missing
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
    return TableEpochs(
        table=table,
        records=records[-last:],
        revisions=tuple(revisions),
        has_failures=bool(failed),
        has_resolutions=bool(resolved),
        has_slices=bool(slices),
    )


def pipeline_epochs(catalog: Catalog, pipeline: str, *, last: int = 50) -> list[dict[str, Any]]:
    """The newest ``last`` epochs of a pipeline: barrier, whether COMMIT, expiry (as ``etl
    epochs --pipeline`` prints them). UsageError for an unknown pipeline."""
    check_pipeline(catalog, pipeline)
    issued = catalog.epochs(pipeline=pipeline)[-last:]
    expired = {e.epoch: e.rule for e in catalog.expired_epochs(pipeline=pipeline)}
    return [
        {
            "epoch": e.id,
            "pipeline": e.pipeline,
            "barrier_ts": e.barrier_ts.isoformat(),
            "commit": catalog.get_commit(e.id) is not None,
            "expired": expired.get(e.id),
        }
        for e in issued
    ]


def _revision_of(revisions: Sequence[Revision], epoch: int) -> int | None:
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


def _resolution_json(resolution: Resolution | None) -> dict[str, Any] | None:
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


def _failure_json(failure: JobFailureRecord) -> dict[str, Any]:
    return {
        "attempt": failure.attempt,
        "error_class": failure.error_class,
        "message": failure.message,
        "failed_at": failure.failed_at.isoformat() if failure.failed_at else None,
        "owner": failure.owner,
    }


def run_result_json(
    result: RunResult, pipeline: Pipeline, pipeline_name: str, undeclared: Undeclared
) -> dict[str, Any]:
    """A run's (or a recovery's) result as ``etl run --format json`` prints it."""
    return {
        "pipeline": pipeline_name,
        "exit_code": result.exit_code,
        "epochs_opened": [
            {
                "epoch": e.id,
                "barrier_ts": e.barrier_ts,
                "pipeline": e.pipeline,
            }
            for e in result.epochs_opened
        ],
        "recovered": [
            {"job": s.job, "table": s.table, "action": str(s.action), "epochs": list(s.epochs)}
            for s in result.recovered
        ],
        "batches": [
            {
                "job": b.job,
                "first_epoch": b.first_epoch,
                "epoch": b.epoch,
                "attempt": b.attempt,
                "outcome": str(b.outcome),
                "rows": b.rows,
                "rejected": b.rejected,
                "quarantined": b.quarantined,
                "versions": dict(b.versions),
                "blocked_reason": b.blocked_reason,
                "commit": b.commit.epoch if b.commit is not None else None,
            }
            for b in result.batches
        ],
        "blocked": [
            {
                "job": b.job,
                "table": pipeline.jobs[b.job].output,
                "epoch": b.epoch,
                "reason": b.blocked_reason,
            }
            for b in result.blocked
        ]
        + [
            {"job": s.job, "table": s.table, "epoch": epoch, "reason": "failed its gate again"}
            for s in result.blocked_in_recovery
            for epoch in s.epochs
        ],
        "failures": [
            {
                "job": f.job,
                "epoch": f.epoch,
                "attempt": f.attempt,
                "error_class": f.error_class,
                "message": f.error,
                "retries_spent": f.retries_spent,
            }
            for f in result.failures
        ],
        "retried": [
            {"job": f.job, "epoch": f.epoch, "attempt": f.attempt, "message": f.error}
            for f in result.retried
        ],
        "left_to_recompute": list(result.left_to_recompute),
        "undeclared_jobs": list(undeclared.jobs),
        "undeclared_tables": list(undeclared.tables),
    }


def revision_json(revision: Revision) -> dict[str, object]:
    """A revision as ``etl status`` and ``etl epochs`` report it."""
    return {
        "id": revision.id,
        "state": revision.state.value,
        "tables": list(revision.tables),
        "from_epoch": revision.from_epoch,
        "through_epoch": revision.through_epoch,
        "reason": revision.reason,
        "actor": revision.actor,
        "started_at": revision.started_at,
        "finished_at": revision.finished_at,
        "note": revision.note,
    }


def revision_text(revision: Revision, now: datetime) -> str:
    """One line: which revision, how far, of what, why and by whom."""
    if revision.state is RevisionState.BUILDING:
        when = f"building since {duration_text(_age(now, revision.started_at))} ago"
    else:
        when = (
            f"{revision.state.value.lower()} {duration_text(_age(now, revision.finished_at))} ago"
        )
    epochs = f"from epoch {revision.from_epoch}" + (
        f" through {revision.through_epoch}" if revision.through_epoch is not None else ""
    )
    why = f"{revision.reason!r} " if revision.reason else ""
    return (
        f"revision {revision.id} {when}: {', '.join(revision.tables)} {epochs} "
        f"({why}by {revision.actor})"
    )


def duration_text(seconds: float | None, *, compact: bool = False) -> str:
    """A duration in the largest unit that keeps it readable: ``90 s``, ``12 min``, ``3.5 h``,
    ``2.0 d`` (``compact``: ``90s``, ``12m``, ``3.5h``, ``2.0d``); ``-`` for none."""
    if seconds is None:
        return "-"
    sep = "" if compact else " "
    if seconds < 120:
        return f"{seconds:.0f}{sep}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}{sep}{'m' if compact else 'min'}"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}{sep}h"
    return f"{seconds / 86400:.1f}{sep}d"


def to_json(rows: object) -> str:
    """Dataclasses (or lists of them) as JSON: datetimes in ISO-8601 with their zone,
    numbers as numbers, states by name."""
    return json.dumps(_plain(rows), default=_json_default, indent=2)


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    if isinstance(value, EpochState):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _plain(value: object) -> object:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)  # type: ignore[call-overload]
    return value


def lineage_graph(
    catalog: Catalog, *, pipeline: str | None = None
) -> dict[str, list[dict[str, str]]]:
    """Nodes (sources, jobs, tables; each with its pipeline) and edges of the lineage, of
    every pipeline or only ``pipeline``'s."""
    check_pipeline(catalog, pipeline)
    nodes: dict[str, tuple[str, str]] = {}
    edges = []
    for job in catalog.list_jobs(pipeline=pipeline):
        nodes[job.name] = ("job", job.pipeline)
        if job.source:
            nodes[job.source] = ("source", job.pipeline)
            edges.append({"from": job.source, "to": job.name})
        for table in job.inputs:
            nodes.setdefault(table, ("table", job.pipeline))
            edges.append({"from": table, "to": job.name})
        for table in (job.output, *job.side_outputs):
            nodes.setdefault(table, ("table", job.pipeline))
            edges.append({"from": job.name, "to": table})
    for info in catalog.list_tables(pipeline=pipeline):
        nodes[info.name] = ("table", info.pipeline)
    return {
        "nodes": [
            {"name": n, "kind": kind, "pipeline": owner}
            for n, (kind, owner) in sorted(nodes.items())
        ],
        "edges": edges,
    }


def lineage_text(graph: dict, *, fmt: str) -> str:
    kinds = {n["name"]: n["kind"] for n in graph["nodes"]}
    if fmt == "json":
        return json.dumps(graph, indent=2)
    if fmt == "dot":
        shapes = {"source": "cylinder", "job": "box", "table": "folder"}
        lines = ["digraph lineage {", "  rankdir=LR;"]
        lines += [f'  "{n}" [shape={shapes[k]}];' for n, k in kinds.items()]
        lines += [f'  "{e["from"]}" -> "{e["to"]}";' for e in graph["edges"]]
        return "\n".join([*lines, "}"])
    if fmt == "mermaid":
        shape = {"source": ("[(", ")]"), "job": ("[", "]"), "table": ("[/", "/]")}
        lines = ["flowchart LR"]
        lines += [f"  {n}{shape[k][0]}{n}{shape[k][1]}" for n, k in kinds.items()]
        lines += [f"  {e['from']} --> {e['to']}" for e in graph["edges"]]
        return "\n".join(lines)
    outgoing: dict[str, list[str]] = {}
    for edge in graph["edges"]:
        outgoing.setdefault(edge["from"], []).append(edge["to"])
    targets = {e["to"] for e in graph["edges"]}
    lines = []

    def walk(node: str, depth: int, path: tuple[str, ...]) -> None:
        lines.append(f"{'  ' * depth}{node} ({kinds.get(node, '?')})")
        for child in outgoing.get(node, []):
            if child not in path:
                walk(child, depth + 1, (*path, child))

    for root in sorted(n for n in kinds if n not in targets):
        walk(root, 0, (root,))
    return "\n".join(lines)


__all__ = [
    "duration_text",
    "PipelineStatus",
    "StatusReport",
    "TableEpochs",
    "TableStatusRow",
    "check_pipeline",
    "lineage_graph",
    "lineage_text",
    "pipeline_epochs",
    "revision_json",
    "revision_text",
    "run_result_json",
    "status_report",
    "table_epochs",
    "to_json",
]
