"""Recovery: bring the catalog and the Delta logs of a job's tables back into agreement.

A job can die anywhere. Recovery reads back from the Delta log what a crashed run
committed (the commit metadata after the last sealed version), and seals an epoch whose
commits are complete, or rolls back (RESTORE) one that is partial so that a replay reads
the same input and writes the same rows exactly once. The plan itself is pure:
:func:`consistency.plan_recovery`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from catalog import Catalog, EpochState, Lease, TableEpoch
from consistency import (
    META_JOB,
    META_ROLLBACK_OF,
    EpochBatch,
    LogCommit,
    RollbackAction,
    SealAction,
    plan_recovery,
)
from etl.delta import log_commits, remove_staging, restore_table, table_version
from etl.engine.batch import EpochEngine
from etl.engine.commit import BatchWrite
from etl.pipeline import Job


class StepAction(StrEnum):
    """What recovery did to a table's epochs."""

    SEALED = "sealed"
    """A complete but unrecorded commit was sealed (WRITTEN)."""
    BLOCKED = "blocked"
    """A complete commit's quality gate kept it from being sealed."""
    ROLLED_BACK = "rolled back"
    """A partial epoch was undone (RESTORE) and marked ROLLED_BACK; the next run replays it."""


@dataclass(frozen=True)
class RecoveryStep:
    """One thing recovery did to one table."""

    job: str
    table: str
    action: StepAction
    epochs: tuple[int, ...]
    version: int | None


def recover(engine: EpochEngine, job: Job, lease: Lease) -> list[RecoveryStep]:
    """Bring the catalog and the Delta logs of the job's tables back into agreement."""
    steps: list[RecoveryStep] = []
    tables = engine.pipeline.tables_of(job)
    plans = {}
    complete: set[int] = set()
    for table in tables:
        sealed = engine.catalog.latest_written([table]).get(table)
        location = engine.catalog.get_table(table).location
        remove_staging(location)
        commits = log_commits(location, after_version=sealed.delta_version if sealed else None)
        states = [
            s
            for s in engine.catalog.table_epochs(table, after=sealed.epoch if sealed else 0)
            if s.state in (EpochState.PROCESSED, EpochState.ROLLED_BACK)
        ]
        if table != job.output:
            # A side output's epoch is complete only when the output's is: a crash between
            # the side commit and the output commit leaves the side's commit to undo.
            commits = [replace(c, final=c.final and c.epoch in complete) for c in commits]
        plan = plan_recovery(
            table=table,
            job=job.name,
            sealed_version=sealed.delta_version if sealed else None,
            sealed_epoch=sealed.epoch if sealed else None,
            catalog_states=states,
            log=commits,
        )
        plans[table] = (plan, commits, states)
        if table == job.output:
            complete = {a.epoch for a in plan.actions if isinstance(a, SealAction)}

    for table in tables:
        plan, commits, states = plans[table]
        for action in plan.actions:
            if isinstance(action, RollbackAction):
                steps.append(_rollback(engine.catalog, job, table, action, commits, states, lease))

    output_plan = plans[job.output][0]
    for action in output_plan.actions:
        if not isinstance(action, SealAction):
            continue
        versions: dict[str, int] = {}
        for table in tables:
            seal = next(
                (
                    a
                    for a in plans[table][0].actions
                    if isinstance(a, SealAction) and a.epoch == action.epoch
                ),
                None,
            )
            if seal is not None:
                versions[table] = seal.delta_version
        for table, version in versions.items():
            state = engine.catalog.table_epoch(table, action.epoch)
            if state is not None and state.state is EpochState.ROLLED_BACK:
                # A replay committed but was never recorded: WRITTEN may not follow
                # ROLLED_BACK directly.
                engine.catalog.record_processed(
                    table,
                    action.epoch,
                    delta_version=version,
                    job=job.name,
                    attempt=action.attempt,
                    generation=lease.generation,
                )
        batch = EpochBatch(first=action.first_epoch, last=action.epoch)
        writer = engine.writer(job, batch, attempt=action.attempt, lease=lease)
        result = engine.publish(writer, BatchWrite(versions=versions))
        steps.append(
            RecoveryStep(
                job=job.name,
                table=job.output,
                action=StepAction.SEALED if result.sealed else StepAction.BLOCKED,
                epochs=(action.epoch,),
                version=action.delta_version,
            )
        )
    return steps


def _rollback(
    catalog: Catalog,
    job: Job,
    table: str,
    action: RollbackAction,
    commits: Sequence[LogCommit],
    states: Sequence[TableEpoch],
    lease: Lease,
) -> RecoveryStep:
    location = catalog.get_table(table).location
    current = table_version(location)
    if current is not None and action.to_version != current:
        restore_table(
            location,
            to_version=action.to_version,
            metadata={META_ROLLBACK_OF: ",".join(map(str, action.epochs)), META_JOB: job.name},
        )
    by_epoch = {s.epoch: s for s in states}
    for epoch in action.epochs:
        state = by_epoch.get(epoch)
        if state is None or state.state is not EpochState.PROCESSED:
            # Committed to Delta but never recorded: record it so the audit shows the undo.
            undone = [c for c in commits if c.epoch == epoch]
            if state is not None and state.state is EpochState.ROLLED_BACK:
                continue
            catalog.record_processed(
                table,
                epoch,
                delta_version=undone[-1].version if undone else (current or 0),
                job=job.name,
                attempt=max((c.attempt or 1 for c in undone), default=1),
                generation=lease.generation,
            )
        catalog.mark_rolled_back(
            table,
            epoch,
            job=job.name,
            generation=lease.generation,
            reason="partial epoch undone by recovery",
        )
    return RecoveryStep(
        job=job.name,
        table=table,
        action=StepAction.ROLLED_BACK,
        epochs=action.epochs,
        version=action.to_version,
    )


__all__ = [
    "RecoveryStep",
    "StepAction",
    "recover",
]
