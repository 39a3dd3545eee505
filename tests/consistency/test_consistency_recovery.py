"""plan_recovery: every crash point of docs/design.md, "Failure and recovery", then random ones.

In the examples the table's latest WRITTEN epoch is 6, sealed at Delta version 5, so
the next epoch is 7 and the next Delta version 6.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistency import (
    BEFORE_FIRST_VERSION,
    DATA_NEUTRAL_OPERATIONS,
    ForeignCommitError,
    LogCommit,
    RecoveryError,
    RecoveryPlan,
    ReplayAction,
    RestoreBeforeSealError,
    RollbackAction,
    SealAction,
    check_transition,
    plan_recovery,
)
from consistency.records import EpochState, TableEpoch

TABLE, JOB = "orders", "load_orders"
P, W, RB, C = (
    EpochState.PROCESSED,
    EpochState.WRITTEN,
    EpochState.ROLLED_BACK,
    EpochState.COALESCED,
)


def write(version, epoch, *, attempt=1, final=False, first=None, job=JOB, operation="WRITE"):
    return LogCommit(
        version=version,
        operation=operation,
        epoch=epoch,
        first_epoch=epoch if first is None else first,
        job=job,
        attempt=attempt,
        final=final,
    )


def restore(version, to):
    return LogCommit(version=version, operation="RESTORE", job=JOB, restored_to=to)


def state(epoch, st_, version, attempt=1):
    return TableEpoch(
        table=TABLE, epoch=epoch, state=st_, delta_version=version, job=JOB, attempt=attempt
    )


def plan(log=(), states=(), *, sealed_version=5, sealed_epoch=6) -> RecoveryPlan:
    return plan_recovery(
        table=TABLE,
        job=JOB,
        sealed_version=sealed_version,
        sealed_epoch=sealed_epoch,
        catalog_states=list(states),
        log=list(log),
    )


def seal(epoch, version, attempt=1, first=None):
    return SealAction(TABLE, epoch, version, attempt, epoch if first is None else first)


def replay(epoch, attempt, first=None):
    return ReplayAction(TABLE, epoch, attempt, first_epoch=epoch if first is None else first)


# -- the crash points ---------------------------------------------------------------------


def test_crash_before_the_delta_commit_leaves_nothing_to_do():
    result = plan()
    assert not result.actions
    assert result == RecoveryPlan(TABLE, ())
    assert not plan(sealed_version=None, sealed_epoch=None).actions


def test_crash_after_sealing_this_table_but_before_downstream_leaves_nothing_to_do():
    # The table's last epoch is sealed; a downstream job not having run is its own business.
    assert not plan(log=[], states=[]).actions


def test_complete_but_unrecorded_commit_is_sealed():
    assert plan([write(6, 7, final=True)]).actions == (seal(7, 6),)
    # Recorded PROCESSED after an earlier micro-batch: still sealed at the final commit.
    result = plan([write(6, 7), write(7, 7, final=True)], [state(7, P, 6)])
    assert result.actions == (seal(7, 7),)


def test_partial_unrecorded_commit_is_rolled_back_and_replayed():
    assert plan([write(6, 7)]).actions == (
        RollbackAction(TABLE, 5, (7,)),
        replay(7, 2),
    )


def test_crash_between_two_micro_batches_rolls_the_epoch_back():
    result = plan([write(6, 7), write(7, 7)], [state(7, P, 7)])
    assert result.actions == (RollbackAction(TABLE, 5, (7,)), replay(7, 2))


def test_several_complete_epochs_are_sealed_in_order_before_the_partial_one():
    log = [write(6, 7, final=True), write(7, 8), write(8, 8, final=True), write(9, 9)]
    assert plan(log, [state(8, P, 7), state(9, P, 9)]).actions == (
        seal(7, 6),
        seal(8, 8),
        RollbackAction(TABLE, 8, (9,)),
        replay(9, 2),
    )


def test_a_backlog_batch_is_sealed_and_replayed_as_one_batch():
    assert plan([write(6, 9, first=7, final=True)]).actions == (seal(9, 6, first=7),)
    assert plan([write(6, 9, first=7)]).actions == (
        RollbackAction(TABLE, 5, (9,)),
        replay(9, 2, first=7),
    )


def test_crash_after_the_restore_before_marking_only_marks():
    # Recovery restored version 5 (version 7) but crashed before mark_rolled_back.
    log = [write(6, 7), restore(7, 5)]
    assert plan(log, [state(7, P, 6)]).actions == (
        RollbackAction(TABLE, 7, (7,), restore=False),
        replay(7, 2),
    )


def test_crash_after_marking_before_the_replay_only_replays():
    log = [write(6, 7), restore(7, 5)]
    assert plan(log, [state(7, RB, 6)]).actions == (replay(7, 2),)
    # Even when the commit was never recorded (nothing to mark), the attempt moves on.
    assert plan(log).actions == (replay(7, 2),)


def test_crash_during_the_replay_rolls_back_the_replay():
    log = [write(6, 7), restore(7, 5), write(8, 7, attempt=2)]
    assert plan(log, [state(7, P, 8, attempt=2)]).actions == (
        RollbackAction(TABLE, 7, (7,)),
        replay(7, 3),
    )


def test_a_complete_replay_is_sealed_even_if_the_catalog_still_says_rolled_back():
    log = [write(6, 7), restore(7, 5), write(8, 7, attempt=2, final=True)]
    assert plan(log, [state(7, RB, 6)]).actions == (seal(7, 8, attempt=2),)


def test_a_commit_of_an_attempt_the_catalog_superseded_is_rolled_back():
    # The catalog rolled attempt 1 back, yet its commit is effective again (a manual RESTORE).
    log = [write(6, 7, final=True), restore(7, 5), restore(8, 6)]
    assert plan(log, [state(7, RB, 6)]).actions == (
        RollbackAction(TABLE, 5, (7,)),
        replay(7, 2),
    )
    # The catalog saw attempt 2 processing; attempt 1's final commit cannot be sealed.
    log = [write(6, 7, final=True)]
    assert plan(log, [state(7, P, 6, attempt=2)]).actions == (
        RollbackAction(TABLE, 5, (7,)),
        replay(7, 3),
    )


def test_a_table_without_any_version_rolls_back_to_empty():
    result = plan([write(0, 1)], sealed_version=None, sealed_epoch=None)
    assert result.actions == (RollbackAction(TABLE, None, (1,)), replay(1, 2))
    # The executor emptied it (restored_to=BEFORE_FIRST_VERSION) and crashed before marking.
    emptied = LogCommit(1, "WRITE", job=JOB, restored_to=BEFORE_FIRST_VERSION)
    result = plan([write(0, 1), emptied], [state(1, P, 0)], sealed_version=None, sealed_epoch=None)
    assert result.actions == (RollbackAction(TABLE, 1, (1,), restore=False), replay(1, 2))


def test_a_commit_of_this_job_without_an_epoch_holds_no_rows():
    create = LogCommit(0, "CREATE TABLE", job=JOB)
    result = plan([create, write(1, 1)], sealed_version=None, sealed_epoch=None)
    assert result.actions == (RollbackAction(TABLE, 0, (1,)), replay(1, 2))


def test_data_neutral_operations_are_accepted_without_metadata():
    assert {"VACUUM START", "VACUUM END", "OPTIMIZE"} <= DATA_NEUTRAL_OPERATIONS
    vacuum = [LogCommit(6, "VACUUM START"), LogCommit(7, "VACUUM END")]
    assert not plan(vacuum).actions
    result = plan([write(6, 7, final=True), LogCommit(7, "OPTIMIZE")])
    assert result.actions == (seal(7, 6),)
    # Rolling back goes to the version before the partial epoch, undoing compaction too.
    result = plan([*vacuum, write(8, 7), LogCommit(9, "OPTIMIZE")])
    assert result.actions == (RollbackAction(TABLE, 7, (7,)), replay(7, 2))


def test_a_foreign_commit_is_refused_naming_it():
    with pytest.raises(ForeignCommitError) as info:
        plan([write(6, 7, final=True), LogCommit(7, "DELETE")])
    error = info.value
    assert (error.table, error.version, error.operation) == (TABLE, 7, "DELETE")
    assert "remove or roll it back manually" in str(error).lower()
    with pytest.raises(ForeignCommitError, match="by job 'other'") as info:
        plan([write(6, 7, final=True, job="other")])
    assert info.value.job == "other"


def test_recovery_goes_on_once_an_operator_undid_the_foreign_commit():
    # As the error advises: RESTORE to the version before it, then recover again.
    log = [write(6, 7), LogCommit(7, "DELETE"), LogCommit(8, "UPDATE"), restore(9, 6)]
    assert plan(log).actions == (RollbackAction(TABLE, 5, (7,)), replay(7, 2))
    # Restoring to a version that still holds it does not help; the first one is named.
    with pytest.raises(ForeignCommitError) as info:
        plan([*log[:3], restore(9, 8)])
    assert info.value.version == 7


def test_a_stray_write_of_a_sealed_epoch_is_undone_without_replay():
    # A superseded instance committed epoch 6 again after it was sealed.
    assert plan([write(6, 6, final=True)]).actions == (RollbackAction(TABLE, 5, ()),)
    # A batch that does not start right after the sealed epoch is not the next batch either.
    assert plan([write(6, 9, first=8, final=True)]).actions == (
        RollbackAction(TABLE, 5, (9,)),
        replay(9, 2, first=7),
    )


def test_a_restore_that_undid_sealed_rows_is_refused_until_it_is_undone():
    with pytest.raises(RestoreBeforeSealError) as info:
        plan([restore(6, 3)])
    assert (info.value.restored_to, info.value.sealed_version) == (3, 5)
    with pytest.raises(RestoreBeforeSealError):
        plan([write(6, 7), restore(7, 3), restore(8, 7)])
    # As the error advises: RESTORE the sealed version (or later), then recover again.
    assert not plan([restore(6, 3), restore(7, 5)]).actions


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"sealed_version": 5, "sealed_epoch": None}, "give both"),
        ({"log": [write(5, 7)]}, "must ascend after the sealed version 5; got 5"),
        ({"log": [write(7, 7), write(6, 7)]}, "got 6 after 7"),
        ({"states": [state(7, W, 6)]}, "not an unsealed state"),
        ({"states": [state(6, P, 5)]}, "not an unsealed state"),
        ({"states": [TableEpoch("other", 7, P, 6)]}, "catalog state of table 'other'"),
        ({"log": [LogCommit(6, "RESTORE")]}, "target version is unknown"),
        ({"log": [restore(6, 9)]}, "restored version 9, which is not in the log"),
    ],
)
def test_contradictory_inputs_are_refused(kwargs, words):
    with pytest.raises(RecoveryError, match=words) as info:
        plan(**kwargs)
    assert info.value.table == TABLE


# -- random crash points ------------------------------------------------------------------


class Crash(Exception):
    """The job process died here."""


@dataclass
class Budget:
    steps: int | None

    def step(self) -> None:
        if self.steps is not None:
            if self.steps == 0:
                raise Crash
            self.steps -= 1


@dataclass(frozen=True)
class Batch:
    first: int
    last: int
    commits: int


@dataclass
class World:
    """A Delta log with the rows at every version, and one table's catalog states."""

    log: list[LogCommit] = field(default_factory=list)
    contents: list[Counter] = field(default_factory=list)
    catalog: dict[int, TableEpoch] = field(default_factory=dict)

    def content_at(self, version: int | None) -> Counter:
        return Counter() if version in (None, BEFORE_FIRST_VERSION) else self.contents[version]

    def head(self) -> int | None:
        return len(self.log) - 1 if self.log else None

    def commit(self, batch: Batch, attempt: int, index: int) -> int:
        version, before = len(self.log), self.content_at(self.head())
        final = index == batch.commits - 1
        self.log.append(write(version, batch.last, attempt=attempt, final=final, first=batch.first))
        self.contents.append(before + Counter([(batch.last, index)]))
        return version

    def restore(self, to: int | None) -> None:
        target = BEFORE_FIRST_VERSION if to is None else to
        self.log.append(LogCommit(len(self.log), "RESTORE", job=JOB, restored_to=target))
        self.contents.append(Counter(self.content_at(target)))

    def _move(self, epoch, requested, **values) -> None:
        current = self.catalog.get(epoch)
        check_transition(
            TABLE,
            epoch,
            current.state if current else None,
            requested,
            attempt=values.get("attempt"),
            current_attempt=current.attempt if current else None,
        )
        base = current or TableEpoch(TABLE, epoch, requested, None, job=JOB)
        self.catalog[epoch] = TableEpoch(
            TABLE,
            epoch,
            requested,
            values.get("delta_version", base.delta_version),
            job=JOB,
            attempt=values.get("attempt", base.attempt),
            coalesced_into=values.get("coalesced_into"),
        )

    def record_processed(self, epoch, version, attempt) -> None:
        self._move(epoch, P, delta_version=version, attempt=attempt)

    def seal(self, first, epoch, version, attempt) -> None:
        sealed = self.sealed()
        assert sealed is None or epoch > sealed.epoch, "WRITTEN epochs must increase"
        for coalesced in range(first, epoch):
            self._move(coalesced, C, coalesced_into=epoch)
        self._move(epoch, W, delta_version=version, attempt=attempt)

    def mark_rolled_back(self, epoch) -> None:
        self._move(epoch, RB)

    def sealed(self) -> TableEpoch | None:
        written = [row for row in self.catalog.values() if row.state == W]
        return max(written, key=lambda row: row.epoch, default=None)


def process(world: World, budget: Budget, batch: Batch, attempt: int) -> None:
    for index in range(batch.commits):
        budget.step()
        version = world.commit(batch, attempt, index)
        budget.step()
        world.record_processed(batch.last, version, attempt)
    budget.step()
    world.seal(batch.first, batch.last, version, attempt)


def run_job(world: World, batches: list[Batch], budget: Budget) -> None:
    """Recover, then process the batches not sealed yet (a deterministic transform)."""
    sealed = world.sealed()
    sealed_version = sealed.delta_version if sealed else None
    result = plan_recovery(
        table=TABLE,
        job=JOB,
        sealed_version=sealed_version,
        sealed_epoch=sealed.epoch if sealed else None,
        catalog_states=[
            row
            for row in world.catalog.values()
            if row.state in (P, RB) and (sealed is None or row.epoch > sealed.epoch)
        ],
        log=[c for c in world.log if sealed_version is None or c.version > sealed_version],
    )
    by_last = {batch.last: batch for batch in batches}
    for action in result.actions:
        if isinstance(action, SealAction):
            budget.step()
            world.record_processed(action.epoch, action.delta_version, action.attempt)
            budget.step()
            world.seal(action.first_epoch, action.epoch, action.delta_version, action.attempt)
        elif isinstance(action, RollbackAction):
            if action.restore:
                assert action.to_version != world.head()
                budget.step()
                world.restore(action.to_version)
            else:
                assert action.to_version == world.head()
            for epoch in action.epochs:
                if world.catalog.get(epoch) and world.catalog[epoch].state == P:
                    budget.step()
                    world.mark_rolled_back(epoch)
        else:
            batch = by_last[action.epoch]
            assert action.first_epoch in (None, batch.first)
            process(world, budget, batch, action.attempt)
    for batch in batches:
        sealed = world.sealed()
        if sealed is None or batch.last > sealed.epoch:
            # Recovery replays every epoch that was started: the rest were never touched.
            assert batch.last not in world.catalog
            assert all(c.epoch != batch.last for c in world.log)
            process(world, budget, batch, 1)


def expected_rows(batches: list[Batch], through: int) -> Counter:
    return Counter((b.last, i) for b in batches if b.last <= through for i in range(b.commits))


def check_sealed_epochs_are_whole(world: World, batches: list[Batch]) -> None:
    for row in world.catalog.values():
        if row.state == W:
            assert world.content_at(row.delta_version) == expected_rows(batches, row.epoch)


@st.composite
def job_runs(draw):
    batches, epoch = [], 0
    for _ in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 3))
        batches.append(Batch(epoch + 1, epoch + size, draw(st.integers(1, 3))))
        epoch += size
    crashes = draw(st.lists(st.integers(0, 12), max_size=8))
    return batches, crashes


@settings(max_examples=150, deadline=None)
@given(job_runs())
def test_any_sequence_of_crashes_ends_with_every_epoch_exactly_once(case):
    batches, crashes = case
    world = World()
    for steps in crashes:
        with contextlib.suppress(Crash):
            run_job(world, batches, Budget(steps))
        # A crash never leaves a sealed epoch torn.
        check_sealed_epochs_are_whole(world, batches)
    run_job(world, batches, Budget(None))

    check_sealed_epochs_are_whole(world, batches)
    assert world.content_at(world.head()) == expected_rows(batches, batches[-1].last)
    for batch in batches:
        assert world.catalog[batch.last].state == W
        for epoch in range(batch.first, batch.last):
            assert world.catalog[epoch].state == C
            assert world.catalog[epoch].coalesced_into == batch.last
    # Nothing is left to recover.
    sealed = world.sealed()
    assert (
        plan_recovery(
            table=TABLE,
            job=JOB,
            sealed_version=sealed.delta_version,
            sealed_epoch=sealed.epoch,
            catalog_states=[],
            log=[c for c in world.log if c.version > sealed.delta_version],
        ).actions
        == ()
    )
