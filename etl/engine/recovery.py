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
    RecoveryAction,
    RollbackAction,
    SealAction,
    plan_recovery,
)
from etl.delta import Fence, claim_table, log_commits, remove_staging, restore_table
from etl.engine.batch import EpochEngine
from etl.engine.commit import BatchWrite, LeaseCheck
from etl.errors import CommitConflictError
from etl.faults import maybe_crash
from etl.pipeline import Job, Pipeline


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


def recover(
    engine: EpochEngine, job: Job, lease: Lease, *, check_lease: LeaseCheck | None = None
) -> list[RecoveryStep]:
    """Bring the catalog and the Delta logs of the job's tables back into agreement.

    First every table of the job is claimed for ``lease``'s generation (its fence), so no
    earlier runner of the job can change it any more; only then is the log read and the
    plan made. A plan is executed only against the log version it was made from: if the
    table moved on meanwhile (maintenance committed), or a table that did not exist when
    it was claimed appeared (an earlier runner created it late: UnclaimedTableError),
    recovery claims and plans again.
    """
    fence = Fence(job.name, lease.generation)
    rounds_left = _PLANNING_ROUNDS
    while True:
        for table in engine.pipeline.tables_of(job):
            claim_table(engine.catalog.get_table(table).location, fence=fence)
        maybe_crash("after_claim", job=job.name, epoch=0)
        try:
            return _recover(engine, job, lease, check_lease)
        except CommitConflictError:
            rounds_left -= 1
            if not rounds_left:
                raise


def needs_recovery(catalog: Catalog, pipeline: Pipeline, job: Job) -> bool:
    """Whether :func:`recover` would seal or roll back anything of ``job`` now: the same
    plan, made without claiming the tables (it changes nothing and needs no Spark)."""
    return any(plan.actions for plan in _plan(catalog, pipeline, job).values())


def _recover(
    engine: EpochEngine, job: Job, lease: Lease, check_lease: LeaseCheck | None
) -> list[RecoveryStep]:
    steps: list[RecoveryStep] = []
    tables = engine.pipeline.tables_of(job)
    for table in tables:
        remove_staging(engine.catalog.get_table(table).location)
    plans = _plan(engine.catalog, engine.pipeline, job)

    for table in tables:
        table_plan = plans[table]
        for action in table_plan.actions:
            if isinstance(action, RollbackAction):
                steps.append(_rollback(engine.catalog, job, table, action, table_plan, lease))

    for action in plans[job.output].actions:
        if not isinstance(action, SealAction):
            continue
        versions: dict[str, int] = {}
        for table in tables:
            seal = next(
                (
                    a
                    for a in plans[table].actions
                    if isinstance(a, SealAction) and a.epoch == action.epoch
                ),
                None,
            )
            if seal is not None:
                versions[table] = seal.delta_version
        batch = EpochBatch(first=action.first_epoch, last=action.epoch)
        writer = engine.writer(
            job, batch, attempt=action.attempt, lease=lease, check_lease=check_lease, resumed=True
        )
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


def _plan(catalog: Catalog, pipeline: Pipeline, job: Job) -> dict[str, _TablePlan]:
    """Per table of the job, what recovery would do (the output's plan first: side
    outputs follow it)."""
    plans: dict[str, _TablePlan] = {}
    complete: set[tuple[int, int]] = set()
    for table in pipeline.tables_of(job):
        sealed = catalog.latest_written([table]).get(table)
        location = catalog.get_table(table).location
        commits = log_commits(location, after_version=sealed.delta_version if sealed else None)
        states = [
            s
            for s in catalog.table_epochs(table, after=sealed.epoch if sealed else 0)
            if s.state in (EpochState.PROCESSED, EpochState.ROLLED_BACK)
        ]
        if table != job.output:
            commits = _follow_output(commits, complete)
        plan = plan_recovery(
            table=table,
            job=job.name,
            sealed_version=sealed.delta_version if sealed else None,
            sealed_epoch=sealed.epoch if sealed else None,
            catalog_states=states,
            log=commits,
        )
        planned_at = commits[-1].version if commits else (sealed.delta_version if sealed else None)
        plans[table] = _TablePlan(plan.actions, tuple(commits), tuple(states), planned_at)
        if table == job.output:
            complete = {(a.epoch, a.attempt) for a in plan.actions if isinstance(a, SealAction)}
    return plans


# Planning again after the table moved on under a rollback; past this, give up loudly.
_PLANNING_ROUNDS = 3


@dataclass(frozen=True)
class _TablePlan:
    actions: tuple[RecoveryAction, ...]
    commits: tuple[LogCommit, ...]
    states: tuple[TableEpoch, ...]
    planned_at: int | None
    """The newest log version the plan saw (None: the table has no version)."""


def _follow_output(commits: Sequence[LogCommit], complete: set[tuple[int, int]]) -> list[LogCommit]:
    """A side output's commits as recovery must see them: an (epoch, attempt) is complete
    exactly when the output's is, and then at the side's last commit of it (a micro-batch
    with no rejects commits nothing to the rejects table, so its own ``final`` flag may be
    on no commit at all)."""
    last: dict[tuple[int, int], int] = {}
    for index, commit in enumerate(commits):
        if commit.epoch is not None:
            last[(commit.epoch, commit.attempt or 1)] = index
    return [
        replace(
            c,
            final=c.epoch is not None
            and last.get(key := (c.epoch, c.attempt or 1)) == i
            and key in complete,
        )
        for i, c in enumerate(commits)
    ]


def _rollback(
    catalog: Catalog,
    job: Job,
    table: str,
    action: RollbackAction,
    plan: _TablePlan,
    lease: Lease,
) -> RecoveryStep:
    location = catalog.get_table(table).location
    if plan.planned_at is not None and action.restore and action.to_version != plan.planned_at:
        restore_table(
            location,
            to_version=action.to_version,
            planned_at=plan.planned_at,
            fence=Fence(job.name, lease.generation),
            metadata={META_ROLLBACK_OF: ",".join(map(str, action.epochs)), META_JOB: job.name},
        )
    maybe_crash("after_restore", job=job.name, epoch=action.epochs[0] if action.epochs else 0)
    by_epoch = {s.epoch: s for s in plan.states}
    for epoch in action.epochs:
        state = by_epoch.get(epoch)
        undone = [c for c in plan.commits if c.epoch == epoch]
        # Every attempt the log saw stays on record, so a replay numbers itself above it.
        attempt = max([*(c.attempt or 1 for c in undone), state.attempt if state else 1])
        if state is None or state.attempt < attempt or state.state is not EpochState.PROCESSED:
            if (
                state is not None
                and state.state is EpochState.ROLLED_BACK
                and state.attempt >= attempt
            ):
                continue
            catalog.record_processed(
                table,
                epoch,
                delta_version=undone[-1].version if undone else (plan.planned_at or 0),
                job=job.name,
                attempt=attempt,
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
    "needs_recovery",
    "recover",
]
