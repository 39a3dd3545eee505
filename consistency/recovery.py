"""Bringing a table's Delta log and the catalog back into agreement after a crash.

docs/design.md, "Failure and recovery". :func:`plan_recovery` compares what the Delta log
holds after the table's last sealed version with what the catalog recorded, and returns
the actions that make them agree: seal complete but unrecorded epochs, roll back partial
ones, then replay them. It decides only; the etl layer executes the plan.

How the log is read. Delta Barrier writes its commit metadata (``META_*`` in
consistency.models) into every commit's ``commitInfo``; a commit carries the epoch, the
batch's first epoch, the job, the attempt, and ``final`` on the last commit of a batch.
A RESTORE to version v makes the table's content that of version v again (Delta
protocol: RESTORE adds back the files of v and removes the others), so it undoes every
commit that was effective after v. The *effective* commits are those whose rows the
current table holds. Recovery groups them into consecutive runs of one (epoch, attempt):

- a group whose last commit is final is complete and is sealed at that commit's version;
- the first group that is not complete, not the next batch after the last sealed one,
  or belongs to an attempt the catalog has superseded, starts the part of the log to
  roll back: everything from its first commit on is undone by restoring the version
  just before it, and every unsealed epoch seen is replayed.

A commit without Delta Barrier metadata (other than a data-neutral operation such as
VACUUM), a commit of another job, or a RESTORE to before the sealed version makes the
table hold rows recovery cannot account for: it refuses while the table still holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import NamedTuple

from consistency.errors import ForeignCommitError, RecoveryError, RestoreBeforeSealError
from consistency.models import (
    BEFORE_FIRST_VERSION,
    LogCommit,
    RecoveryAction,
    RecoveryPlan,
    ReplayAction,
    RollbackAction,
    SealAction,
)
from consistency.records import EpochState, TableEpoch

DATA_NEUTRAL_OPERATIONS: frozenset[str] = frozenset(
    {
        "VACUUM START",
        "VACUUM END",
        "OPTIMIZE",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "UPGRADE PROTOCOL",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
    }
)
"""Delta operations that never change a table's rows (file compaction, cleanup, table
properties). Recovery accepts them in the log without Delta Barrier metadata: retention
runs VACUUM between jobs, and VACUUM writes commits of its own."""


def plan_recovery(
    *,
    table: str,
    job: str,
    sealed_version: int | None,
    sealed_epoch: int | None,
    catalog_states: Sequence[TableEpoch],
    log: Sequence[LogCommit],
) -> RecoveryPlan:
    """The actions that bring ``table`` (written by ``job``) back into agreement.

    ``sealed_version`` / ``sealed_epoch``: the table's latest WRITTEN epoch and its Delta
    version (both None if it has none). ``catalog_states``: the catalog's rows for epochs
    after ``sealed_epoch`` (PROCESSED or ROLLED_BACK). ``log``: the Delta commits after
    ``sealed_version``, ascending.

    The plan is, in order: one :class:`SealAction` per complete unrecorded batch; at
    most one :class:`RollbackAction`; one :class:`ReplayAction` per unsealed epoch that
    has left a trace in the log or the catalog. Executing it:

    - seal: record the epoch PROCESSED at (``delta_version``, ``attempt``), then seal it
      with ``first_epoch``. Recording PROCESSED first is legal from every state the epoch
      can be in here and needed when an earlier attempt left it ROLLED_BACK.
    - rollback: if ``restore``, RESTORE the table to ``to_version`` (None: empty it, and
      record ``restored_to = BEFORE_FIRST_VERSION``) with META_ROLLBACK_OF; then mark
      ROLLED_BACK the ``epochs`` the catalog holds as PROCESSED. ``restore`` is False when
      the table already has the content of ``to_version``, its current version (an
      earlier rollback crashed before marking).
    - replay: process ``first_epoch..epoch`` again with ``attempt``; Delta's app
      transaction version must grow with the attempt, since a RESTORE does not reset it.

    Each step is safe to crash in: planning again from the new log and catalog resumes.
    An empty plan means the table and the catalog agree. Raises ForeignCommitError for a
    commit that Delta Barrier's ``job`` did not write (other than a data-neutral
    operation), RestoreBeforeSealError for a RESTORE that undid sealed rows, and
    RecoveryError for inputs that contradict each other.
    """
    _check_inputs(table, sealed_version, sealed_epoch, catalog_states, log)
    effective, head_version, seen_attempts = _replay_log(table, job, sealed_version, log)
    for row in catalog_states:
        seen_attempts[row.epoch] = max(seen_attempts.get(row.epoch, 0), row.attempt)
    cataloged = {row.epoch: row for row in catalog_states}

    seals: list[SealAction] = []
    last_sealed = sealed_epoch
    bad: list[LogCommit] = []
    groups = [list(g) for _, g in groupby(effective, key=lambda c: (c.epoch, _attempt(c)))]
    for index, group in enumerate(groups):
        tail = group[-1]
        assert tail.epoch is not None  # only commits with an epoch are effective rows
        first = tail.first_epoch if tail.first_epoch is not None else tail.epoch
        recorded = cataloged.get(tail.epoch)
        superseded = recorded is not None and (
            recorded.attempt > _attempt(tail)
            or (recorded.state == EpochState.ROLLED_BACK and recorded.attempt >= _attempt(tail))
        )
        if not tail.final or superseded or not _continues(first, tail.epoch, last_sealed):
            bad = [c for g in groups[index:] for c in g]
            break
        seals.append(
            SealAction(
                table=table,
                epoch=tail.epoch,
                delta_version=tail.version,
                attempt=_attempt(tail),
                first_epoch=first,
            )
        )
        last_sealed = tail.epoch

    def unsealed(epoch: int) -> bool:
        return last_sealed is None or epoch > last_sealed

    actions: list[RecoveryAction] = list(seals)
    undone = sorted(
        {c.epoch for c in bad if c.epoch is not None and unsealed(c.epoch)}
        | {
            row.epoch
            for row in catalog_states
            if row.state == EpochState.PROCESSED and unsealed(row.epoch)
        }
    )
    if bad:
        before = bad[0].version - 1
        actions.append(
            RollbackAction(
                table=table,
                to_version=before if before > BEFORE_FIRST_VERSION else None,
                epochs=tuple(undone),
            )
        )
    elif undone:
        actions.append(
            RollbackAction(
                table=table, to_version=head_version, epochs=tuple(undone), restore=False
            )
        )

    previous = last_sealed
    for epoch in sorted(e for e in seen_attempts if unsealed(e)):
        batch_start = previous + 1 if previous is not None else _first_epoch_in_log(log, epoch)
        actions.append(
            ReplayAction(
                table=table,
                epoch=epoch,
                attempt=seen_attempts[epoch] + 1,
                first_epoch=batch_start,
            )
        )
        previous = epoch
    return RecoveryPlan(table=table, actions=tuple(actions))


def _attempt(commit: LogCommit) -> int:
    return commit.attempt if commit.attempt is not None else 1


def _continues(first: int, epoch: int, last_sealed: int | None) -> bool:
    """Whether a batch first..epoch is the next one after ``last_sealed``.

    Batches are contiguous (consistency.alignment), so anything else is a stray write,
    e.g. of a superseded instance, or of an epoch already sealed.
    """
    if first > epoch:
        return False
    return last_sealed is None or first == last_sealed + 1


def _first_epoch_in_log(log: Sequence[LogCommit], epoch: int) -> int | None:
    firsts = [c.first_epoch for c in log if c.epoch == epoch and c.first_epoch is not None]
    return min(firsts) if firsts else None


class _Content(NamedTuple):
    """What a version of the table holds, as far as recovery is concerned."""

    epoch_commits: tuple[LogCommit, ...]
    """This job's epoch commits after the sealed version whose rows it holds, in order."""
    damage: LogCommit | None
    """The first commit whose effect recovery cannot account for: a foreign commit, or a
    RESTORE that went back before the sealed version."""


def _replay_log(
    table: str, job: str, sealed_version: int | None, log: Sequence[LogCommit]
) -> tuple[tuple[LogCommit, ...], int | None, dict[int, int]]:
    """Walk the log: the effective epoch commits, the current version, attempts seen per epoch.

    A foreign commit or a pre-seal RESTORE is an error only while the current table still
    holds its effect: once an operator restored the table past it, recovery goes on.
    """
    base = sealed_version if sealed_version is not None else BEFORE_FIRST_VERSION
    content_at: dict[int, _Content] = {base: _Content((), None)}
    content = content_at[base]
    attempts: dict[int, int] = {}
    for commit in log:
        if commit.restored_to is not None or commit.operation == "RESTORE":
            target = commit.restored_to
            if target is None:
                raise RecoveryError(
                    table=table,
                    reason=(
                        f"Delta version {commit.version} is a RESTORE whose target version "
                        "is unknown; pass LogCommit.restored_to"
                    ),
                )
            if sealed_version is not None and target < sealed_version:
                content = _Content((), commit)
            elif target in content_at:
                content = content_at[target]
            else:
                raise RecoveryError(
                    table=table,
                    reason=(
                        f"Delta version {commit.version} restored version {target}, which is "
                        "not in the log given to recovery"
                    ),
                )
        elif commit.job != job and (
            commit.job is not None or commit.operation not in DATA_NEUTRAL_OPERATIONS
        ):
            content = content._replace(damage=content.damage or commit)
        elif commit.epoch is not None:
            content = content._replace(epoch_commits=(*content.epoch_commits, commit))
            attempts[commit.epoch] = max(attempts.get(commit.epoch, 0), _attempt(commit))
        # Otherwise the commit holds no rows: a data-neutral operation, or a commit of this
        # job without an epoch (e.g. creating the table).
        content_at[commit.version] = content
    damage = content.damage
    if damage is not None and damage.restored_to is not None and sealed_version is not None:
        raise RestoreBeforeSealError(
            table=table,
            version=damage.version,
            restored_to=damage.restored_to,
            sealed_version=sealed_version,
        )
    if damage is not None:
        raise ForeignCommitError(table, damage.version, damage.operation, job=damage.job)
    head = log[-1].version if log else sealed_version
    return content.epoch_commits, head, attempts


def _check_inputs(
    table: str,
    sealed_version: int | None,
    sealed_epoch: int | None,
    catalog_states: Sequence[TableEpoch],
    log: Sequence[LogCommit],
) -> None:
    if (sealed_version is None) != (sealed_epoch is None):
        raise RecoveryError(
            table=table,
            reason=(
                f"sealed_version={sealed_version} and sealed_epoch={sealed_epoch}: give both "
                "(the latest WRITTEN epoch and its version) or neither"
            ),
        )
    previous = sealed_version if sealed_version is not None else BEFORE_FIRST_VERSION
    for commit in log:
        if commit.version <= previous:
            raise RecoveryError(
                table=table,
                reason=(
                    f"log versions must ascend after the sealed version {sealed_version}; "
                    f"got {commit.version} after {previous}"
                ),
            )
        previous = commit.version
    for row in catalog_states:
        if row.table != table:
            raise RecoveryError(
                table=table, reason=f"catalog state of table {row.table!r} passed for it"
            )
        if row.state not in (EpochState.PROCESSED, EpochState.ROLLED_BACK) or (
            sealed_epoch is not None and row.epoch <= sealed_epoch
        ):
            raise RecoveryError(
                table=table,
                reason=(
                    f"catalog state {row.state} of epoch {row.epoch} is not an unsealed state "
                    f"after the sealed epoch {sealed_epoch}; pass only the PROCESSED and "
                    "ROLLED_BACK rows after it"
                ),
            )
