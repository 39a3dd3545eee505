"""Resolving an epoch a quality gate blocked: an operator's explicit way out.

A ``block`` gate leaves the epoch PROCESSED and the job waits there (docs/design.md,
"Data quality"). An operator resolves it, and the resolution is recorded in the catalog
(:meth:`Catalog.record_resolution`) beside the state history:

- ACCEPT: seal the epoch as written, failing rows included (an override);
- QUARANTINE: the audit path of a ``quarantine`` gate (:func:`etl.engine.audit.audit`),
  whatever the gate's policy: failing rows go to the table's quarantine table, the rest
  is sealed;
- SKIP: RESTORE the job's tables to their last sealed versions (fenced), record the epoch
  ROLLED_BACK, then a new attempt PROCESSED and WRITTEN at the restored versions with no
  rows: downstream sees an empty epoch. An explicit, recorded loss: a source's recorded
  slice of the epoch is never read again.

The caller holds the job's lease (``lease``) and passes the generation it claims the
tables with; nothing here decides whether an epoch may be resolved beyond the checks
that keep the catalog and the Delta logs in agreement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalog import (
    Catalog,
    CommitManifest,
    EpochState,
    Lease,
    Resolution,
    ResolutionAction,
    SealRequest,
)
from consistency import META_JOB, META_ROLLBACK_OF, EpochBatch
from etl.delta import Fence, claim_table, epoch_rows, restore_table, table_version
from etl.engine.commit import BatchWrite
from etl.errors import UsageError

if TYPE_CHECKING:
    from etl.engine.batch import EpochEngine


@dataclass(frozen=True)
class BlockedEpoch:
    """A blocked epoch of a job's output, as the catalog holds it."""

    job: str
    table: str
    first_epoch: int
    """The batch's first epoch (< epoch when a catch-up batch was blocked)."""
    epoch: int
    attempt: int
    tables: tuple[str, ...]
    """The job's output and side outputs."""


@dataclass(frozen=True)
class ResolveResult:
    resolution: Resolution
    versions: dict[str, int]
    commit: CommitManifest | None
    quarantined: int = 0


def chosen_action(
    *, accept: bool, quarantine: bool, skip: bool, with_pipeline: bool
) -> ResolutionAction:
    """The one action asked for (``etl resolve``'s flags); UsageError for none or several,
    or for QUARANTINE without the pipeline (``with_pipeline``: its gate splits the rows)."""
    chosen = [
        action
        for action, flag in (
            (ResolutionAction.ACCEPT, accept),
            (ResolutionAction.QUARANTINE, quarantine),
            (ResolutionAction.SKIP, skip),
        )
        if flag
    ]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --accept, --quarantine or --skip")
    (action,) = chosen
    if action is ResolutionAction.QUARANTINE and not with_pipeline:
        raise UsageError(
            "--quarantine needs --pipeline FILE and the run's --param KEY=VALUE (the gate "
            "that splits the rows is in the pipeline)"
        )
    return action


def resolve_epoch(
    catalog: Catalog,
    table: str,
    epoch: int,
    action: ResolutionAction,
    *,
    actor: str,
    reason: str = "",
    engine_for: Callable[[Catalog], EpochEngine] | None = None,
) -> ResolveResult:
    """Resolve blocked ``epoch`` of ``table`` by ``action``, holding the job's lease
    (PipelineBusyError if a live run holds it). ``engine_for`` gives the engine of the
    pipeline QUARANTINE audits with (it starts Spark), once the lease is held."""
    from etl.leases import holding

    known = sorted(t.name for t in catalog.list_tables(include_retired=True))
    if table not in known:
        raise UsageError(f"unknown table {table!r}; the catalog has {known}")
    blocked = blocked_epoch(catalog, table, epoch)
    with holding(catalog, blocked.job) as lease:
        if action is ResolutionAction.ACCEPT:
            return accept(catalog, blocked, lease, actor=actor, reason=reason)
        if action is ResolutionAction.SKIP:
            return skip(catalog, blocked, lease, actor=actor, reason=reason)
        if engine_for is None:
            raise UsageError("quarantining the failing rows needs the pipeline (--pipeline FILE)")
        return quarantine(engine_for(catalog), blocked, lease, actor=actor, reason=reason)


def blocked_epoch(catalog: Catalog, table: str, epoch: int) -> BlockedEpoch:
    """The blocked epoch ``epoch`` of ``table``; UsageError saying why if it is not one."""
    info = catalog.get_table(table)
    if info.writer_job is None:
        raise UsageError(f"table {table!r} has no writer job: nothing of it can be blocked")
    job = catalog.get_job(info.writer_job)
    if table != job.output:
        raise UsageError(
            f"table {table!r} is a side output of job {job.name!r}: resolve its output "
            f"{job.output!r} instead"
        )
    state = catalog.table_epoch(table, epoch)
    if state is None or state.state is not EpochState.PROCESSED:
        now = state.state.value if state is not None else "no state"
        raise UsageError(
            f"epoch {epoch} of table {table!r} is not blocked (it has {now}); "
            "`etl status` lists the blocked epochs"
        )
    sealed = catalog.latest_written([table]).get(table)
    done = sealed.epoch if sealed is not None else info.first_epoch - 1
    own = [e.id for e in catalog.epochs(after=done, up_to=epoch, pipeline=info.pipeline)]
    return BlockedEpoch(
        job=job.name,
        table=table,
        first_epoch=own[0] if own else epoch,
        epoch=epoch,
        attempt=state.attempt,
        tables=(job.output, *job.side_outputs),
    )


def _claim(catalog: Catalog, blocked: BlockedEpoch, lease: Lease) -> Fence:
    fence = Fence(blocked.job, lease.generation)
    for table in blocked.tables:
        claim_table(catalog.get_table(table).location, fence=fence)
    return fence


def _version(catalog: Catalog, table: str) -> int:
    version = table_version(catalog.get_table(table).location)
    if version is None:
        raise _not_created(table)
    return version


def _require_created(catalog: Catalog, blocked: BlockedEpoch) -> None:
    """Check, before anything changes, that every table of the blocked job has a Delta
    table: a resolution is all or nothing."""
    for table in blocked.tables:
        _version(catalog, table)


def _not_created(table: str) -> UsageError:
    # A side output is created by its job's first audit: a run stopped between registering
    # it and that audit leaves it without a Delta table, and nothing to seal or restore.
    return UsageError(
        f"table {table!r} has no Delta table yet: the run that registered it stopped before "
        "creating it. Run the pipeline once (`etl run ... --once`; it audits the blocked "
        "epoch again and creates the table), then resolve"
    )


def _seal(
    catalog: Catalog,
    blocked: BlockedEpoch,
    lease: Lease,
    *,
    versions: dict[str, int],
    attempt: int,
) -> CommitManifest | None:
    """Seal the epoch at ``versions``, with the rows each table holds there: what a
    resolution seals is counted in the table, whatever was recorded before it."""
    requests = [
        SealRequest(
            table=table,
            epoch=blocked.epoch,
            delta_version=versions[table],
            attempt=attempt,
            rows=epoch_rows(
                catalog.get_table(table).location, version=versions[table], epoch=blocked.epoch
            ),
            first_epoch=blocked.first_epoch,
        )
        for table in blocked.tables
    ]
    return catalog.seal(blocked.job, lease.generation, requests)


def accept(
    catalog: Catalog, blocked: BlockedEpoch, lease: Lease, *, actor: str, reason: str
) -> ResolveResult:
    """Seal the blocked epoch as written (its recorded PROCESSED versions)."""
    _require_created(catalog, blocked)
    _claim(catalog, blocked, lease)
    states = catalog.states_at(blocked.tables, blocked.epoch)
    versions: dict[str, int] = {}
    for table in blocked.tables:
        state = states.get(table)
        if (
            state is not None
            and state.state is EpochState.PROCESSED
            and state.delta_version is not None
        ):
            versions[table] = state.delta_version
        else:
            versions[table] = _version(catalog, table)
    resolution = catalog.record_resolution(
        blocked.table, blocked.epoch, action=ResolutionAction.ACCEPT, actor=actor, reason=reason
    )
    commit = _seal(catalog, blocked, lease, versions=versions, attempt=blocked.attempt)
    return ResolveResult(resolution, versions, commit)


def skip(
    catalog: Catalog, blocked: BlockedEpoch, lease: Lease, *, actor: str, reason: str
) -> ResolveResult:
    """Roll the blocked epoch back (RESTORE) and seal it empty: a recorded loss."""
    _require_created(catalog, blocked)
    fence = _claim(catalog, blocked, lease)
    resolution = catalog.record_resolution(
        blocked.table, blocked.epoch, action=ResolutionAction.SKIP, actor=actor, reason=reason
    )
    attempt = catalog.max_attempt(blocked.tables, blocked.epoch) + 1
    versions: dict[str, int] = {}
    for table in blocked.tables:
        location = catalog.get_table(table).location
        sealed = catalog.latest_written([table]).get(table)
        current = _version(catalog, table)
        base = sealed.delta_version if sealed is not None else None
        versions[table] = restore_table(
            location,
            to_version=base,
            planned_at=current,
            fence=fence,
            metadata={META_JOB: blocked.job, META_ROLLBACK_OF: str(blocked.epoch)},
        )
        state = catalog.table_epoch(table, blocked.epoch)
        if state is not None and state.state is EpochState.PROCESSED:
            catalog.mark_rolled_back(
                table,
                blocked.epoch,
                job=blocked.job,
                generation=lease.generation,
                reason=f"skipped by {actor}: {reason}",
            )
        catalog.record_processed(
            table,
            blocked.epoch,
            delta_version=versions[table],
            job=blocked.job,
            attempt=attempt,
            generation=lease.generation,
            rows=0,
        )
    commit = _seal(catalog, blocked, lease, versions=versions, attempt=attempt)
    return ResolveResult(resolution, versions, commit)


def quarantine(
    engine: EpochEngine,
    blocked: BlockedEpoch,
    lease: Lease,
    *,
    actor: str,
    reason: str,
) -> ResolveResult:
    """Quarantine the failing rows of the blocked epoch and seal the rest.

    The epoch is audited again under the gate's expectations with policy ``quarantine``:
    rows failing a row-level expectation go to the gate's quarantine table (a ``block``
    gate has one too), the rest is sealed. A failing table-level expectation judges the
    epoch as a whole, so no split of rows can satisfy it: UsageError, nothing is changed
    (accept or skip the epoch instead), as for a row-level expectation that cannot be
    split (``mostly``, ``row_condition``, an unsupported type).
    """
    from etl.engine.audit import audit
    from etl.quality import GateDefinitionError, QualityGate

    catalog = engine.catalog
    gate = engine.pipeline.gates.get(blocked.table)
    if gate is None:
        raise UsageError(f"the pipeline declares no quality gate for table {blocked.table!r}")
    others = "resolve it with --accept (seal it as written) or --skip (a recorded loss)"
    if gate.quarantine_table not in blocked.tables:
        raise UsageError(
            f"the catalog does not know table {gate.quarantine_table!r} as a side output of "
            f"job {blocked.job!r} yet: run the pipeline once (`etl run FILE --once` registers "
            "it and audits the epoch again), then resolve"
        )
    try:
        splitting = QualityGate(
            gate.table, gate.expectations, policy="quarantine", quarantine=gate.quarantine_table
        )
    except GateDefinitionError as exc:
        raise UsageError(f"the failing rows cannot be split off: {exc}; {others}") from None
    job = engine.pipeline.jobs[blocked.job]
    _claim(catalog, blocked, lease)
    states = catalog.states_at(blocked.tables, blocked.epoch)
    written = BatchWrite(
        versions={
            t: s.delta_version
            for t, s in states.items()
            if s.state is EpochState.PROCESSED and s.delta_version is not None
        },
        rows={t: s.rows or 0 for t, s in states.items() if s.state is EpochState.PROCESSED},
    )
    writer = engine.writer(
        job,
        EpochBatch(blocked.first_epoch, blocked.epoch),
        attempt=blocked.attempt,
        lease=lease,
    )
    verdict = audit(writer, splitting, written)
    if verdict.blocked_reason is not None:
        raise UsageError(
            f"{verdict.blocked_reason}. A table-level expectation judges the epoch as a "
            f"whole: no rows can be quarantined to satisfy it; {others}"
        )
    resolution = catalog.record_resolution(
        blocked.table,
        blocked.epoch,
        action=ResolutionAction.QUARANTINE,
        actor=actor,
        reason=reason,
    )
    written = verdict.written
    versions = {
        t: written.versions[t] if t in written.versions else _version(catalog, t)
        for t in blocked.tables
    }
    commit = _seal(
        catalog,
        blocked,
        lease,
        versions=versions,
        attempt=blocked.attempt,
    )
    return ResolveResult(resolution, versions, commit, quarantined=verdict.quarantined)


__all__ = [
    "BlockedEpoch",
    "ResolveResult",
    "accept",
    "blocked_epoch",
    "chosen_action",
    "quarantine",
    "resolve_epoch",
    "skip",
]
