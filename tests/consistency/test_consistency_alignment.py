"""plan_batches / pending_epochs: barrier alignment, forced coalescing and backlog mode;
admission_order: which runnable batch gets a free slot first; inputs_sealed_through: when
a reader is worth planning."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistency import (
    BatchPlanError,
    EpochBatch,
    admission_order,
    inputs_sealed_through,
    pending_epochs,
    plan_batches,
)


def batches(*pairs: tuple[int, int]) -> list[EpochBatch]:
    return [EpochBatch(first, last) for first, last in pairs]


def test_source_job_runs_every_issued_epoch_one_by_one():
    assert plan_batches(done_through=3, issued=range(1, 7), inputs_written=None) == batches(
        (4, 4), (5, 5), (6, 6)
    )
    assert plan_batches(done_through=3, issued=range(1, 6), inputs_written={}) == batches(
        (4, 4), (5, 5)
    )
    assert plan_batches(done_through=6, issued=range(1, 7), inputs_written=None) == []


def test_source_job_in_backlog_mode_coalesces_into_one_batch():
    plan = plan_batches(
        done_through=3, issued=range(1, 7), inputs_written=None, backlog_threshold=3
    )
    assert plan == batches((4, 6))
    assert plan[0].coalesced
    # Below the threshold nothing is coalesced.
    assert plan_batches(
        done_through=3, issued=range(1, 6), inputs_written=None, backlog_threshold=3
    ) == batches((4, 4), (5, 5))


def test_backlog_respects_max_batch():
    assert plan_batches(
        done_through=0, issued=range(1, 8), inputs_written=None, backlog_threshold=2, max_batch=3
    ) == batches((1, 3), (4, 6), (7, 7))


def test_derived_job_waits_for_every_input_and_folds_coalesced_epochs():
    inputs = {"a": [1, 2, 3, 5, 6], "b": {1, 2, 3, 4, 5}}
    # Horizon: min(6, 5) = 5. Epoch 4 was coalesced by a (into 5): folded into 5's batch.
    assert plan_batches(done_through=2, issued=range(1, 11), inputs_written=inputs) == batches(
        (3, 3), (4, 5)
    )
    pending = pending_epochs(done_through=2, issued=range(1, 11), inputs_written=inputs)
    assert (pending.horizon, tuple(pending.runnable), pending.count) == (5, (3, 5), 3)


def test_derived_job_with_an_unwritten_input_has_nothing_to_run():
    assert (
        plan_batches(done_through=0, issued=range(1, 6), inputs_written={"a": [1, 2], "b": []})
        == []
    )
    pending = pending_epochs(done_through=0, issued=range(1, 6), inputs_written={"a": [1], "b": ()})
    assert (pending.count, tuple(pending.runnable)) == (0, ())


def test_epochs_after_the_last_runnable_one_wait():
    # b has 4 WRITTEN but a has not got there yet: 4 waits.
    inputs = {"a": [1, 2, 3], "b": [1, 2, 3, 4]}
    assert plan_batches(done_through=1, issued=range(1, 10), inputs_written=inputs) == batches(
        (2, 2), (3, 3)
    )
    inputs = {"a": [2, 5], "b": [1, 2, 3, 4, 6]}
    # horizon 5, but 5 is not WRITTEN by b: 3..5 wait although pending.
    assert plan_batches(done_through=0, issued=range(1, 10), inputs_written=inputs) == batches(
        (1, 2)
    )


def test_horizon_never_passes_the_newest_issued_epoch():
    pending = pending_epochs(done_through=0, issued=range(1, 3), inputs_written={"a": [1, 2, 3]})
    assert pending.horizon == 2
    assert plan_batches(
        done_through=0, issued=range(1, 3), inputs_written={"a": [1, 2, 3]}
    ) == batches((1, 1), (2, 2))


def test_written_epochs_already_done_are_ignored():
    assert plan_batches(
        done_through=4, issued=range(1, 7), inputs_written={"a": [1, 2, 3, 4, 6]}
    ) == (batches((5, 6)))


def test_backlog_batches_end_on_runnable_epochs_even_beyond_max_batch():
    inputs = {"a": [3, 9, 10]}
    plan = plan_batches(
        done_through=0, issued=range(1, 11), inputs_written=inputs, backlog_threshold=1, max_batch=2
    )
    # 4..9 has no runnable epoch before 9: one batch longer than max_batch is forced.
    assert plan == batches((1, 3), (4, 9), (10, 10))


def test_invalid_arguments_are_refused():
    with pytest.raises(
        BatchPlanError, match="sealed through epoch 5, after the newest issued epoch 4"
    ):
        plan_batches(done_through=5, issued=range(1, 5), inputs_written=None)
    with pytest.raises(BatchPlanError, match="max_batch must be at least 1, got 0"):
        plan_batches(done_through=0, issued=range(1, 5), inputs_written=None, max_batch=0)
    with pytest.raises(BatchPlanError, match="backlog_threshold must be at least 1"):
        plan_batches(done_through=0, issued=range(1, 5), inputs_written=None, backlog_threshold=0)


@st.composite
def situations(draw):
    done = draw(st.integers(0, 8))
    issued = done + draw(st.integers(0, 15))
    source = draw(st.booleans())
    inputs = None
    if not source:
        inputs = {
            f"in{i}": draw(st.sets(st.integers(1, issued + 3), max_size=20))
            for i in range(draw(st.integers(1, 3)))
        }
    threshold = draw(st.none() | st.integers(1, 10))
    max_batch = draw(st.none() | st.integers(1, 5))
    return done, issued, inputs, threshold, max_batch


@settings(max_examples=150, deadline=None)
@given(situations())
def test_batches_are_contiguous_end_on_runnable_epochs_and_stay_under_the_horizon(case):
    done, issued, inputs, threshold, max_batch = case
    plan = plan_batches(
        done_through=done,
        issued=range(1, issued + 1),
        inputs_written=inputs,
        backlog_threshold=threshold,
        max_batch=max_batch,
    )
    if inputs:
        horizon = max(done, min(issued, *(max(s, default=done) for s in inputs.values())))
        runnable = [e for e in range(done + 1, horizon + 1) if all(e in s for s in inputs.values())]
    else:
        horizon = issued
        runnable = list(range(done + 1, issued + 1))
    if not runnable:
        assert plan == []
        return
    # Contiguous from done+1, covering exactly up to the last runnable epoch.
    assert plan[0].first == done + 1
    assert plan[-1].last == runnable[-1] <= horizon
    for previous, batch in zip(plan, plan[1:], strict=False):
        assert batch.first == previous.last + 1
    for batch in plan:
        assert batch.first <= batch.last
        assert batch.last in runnable
    backlog = threshold is not None and horizon - done >= threshold
    if not backlog:
        # One batch per runnable epoch: nothing coalesced that need not be.
        assert [b.last for b in plan] == runnable
    elif max_batch is None:
        assert plan == [EpochBatch(done + 1, runnable[-1])]
    else:
        for batch in plan:
            if batch.last - batch.first + 1 > max_batch:
                # Longer only when no runnable epoch lay within reach.
                assert not [e for e in runnable if batch.first <= e < batch.first + max_batch]
            else:
                # As long as allowed: the next runnable epoch would not have fitted.
                later = [e for e in runnable if e > batch.last]
                assert not later or later[0] - batch.first + 1 > max_batch


def test_a_backlog_batch_ends_at_an_epoch_whose_slice_is_already_recorded():
    # Epoch 5's slice was cut by an attempt that failed: a catch-up batch must not fold
    # it into a later epoch (it would cut a new slice from 5's end and never read 5's).
    plan = plan_batches(
        done_through=3,
        issued=range(1, 10),
        inputs_written=None,
        backlog_threshold=2,
        recorded_slices={5, 7},
    )
    assert plan == batches((4, 5), (6, 7), (8, 9))
    # Without them the whole backlog is one batch: the rule is what splits it.
    assert plan_batches(
        done_through=3, issued=range(1, 10), inputs_written=None, backlog_threshold=2
    ) == batches((4, 9))


@given(
    done=st.integers(0, 20),
    pending=st.integers(1, 30),
    recorded=st.sets(st.integers(1, 60)),
    max_batch=st.none() | st.integers(1, 8),
)
@settings(max_examples=200)
def test_no_batch_spans_a_recorded_slice(done, pending, recorded, max_batch):
    issued = done + pending
    plan = plan_batches(
        done_through=done,
        issued=range(1, issued + 1),
        inputs_written=None,
        backlog_threshold=1,
        max_batch=max_batch,
        recorded_slices=recorded,
    )
    assert plan[0].first == done + 1 and plan[-1].last == issued
    for batch in plan:
        assert not any(batch.first <= e < batch.last for e in recorded)


def test_a_pipeline_plans_over_its_own_epochs_whatever_other_pipelines_issued():
    # Epoch ids are global: this pipeline owns 2, 5, 6 and 9; the rest are another's.
    own = [2, 5, 6, 9]
    assert plan_batches(done_through=0, issued=own, inputs_written=None) == batches(
        (2, 2), (5, 5), (6, 6), (9, 9)
    )
    # An input coalesced 5 into 6: 5 folds into 6's batch, never an id of another pipeline.
    assert plan_batches(done_through=2, issued=own, inputs_written={"a": [2, 6, 9]}) == batches(
        (5, 6), (9, 9)
    )
    # Backlog counts the pipeline's epochs (3 pending, not 7 ids) and max_batch too.
    assert plan_batches(done_through=2, issued=own, inputs_written=None, backlog_threshold=4) == (
        batches((5, 5), (6, 6), (9, 9))
    )
    assert plan_batches(
        done_through=2, issued=own, inputs_written=None, backlog_threshold=3, max_batch=2
    ) == batches((5, 6), (9, 9))
    assert plan_batches(
        done_through=0, issued=own, inputs_written=None, backlog_threshold=2, recorded_slices={5}
    ) == batches((2, 5), (6, 9))
    pending = pending_epochs(done_through=2, issued=own, inputs_written=None)
    assert pending.count == 3 and pending.horizon == 9


CHAIN = ["root", "clean", "latest", "tiers"]


def test_admission_runs_the_oldest_epoch_first():
    ready = {"root": EpochBatch(9, 9), "latest": EpochBatch(7, 7), "clean": EpochBatch(8, 8)}
    assert admission_order(ready, CHAIN) == ["latest", "clean", "root"]


def test_admission_breaks_a_tie_by_running_the_job_furthest_downstream_first():
    ready = {"root": EpochBatch(5, 5), "tiers": EpochBatch(5, 6), "clean": EpochBatch(5, 5)}
    assert admission_order(ready, CHAIN) == ["tiers", "clean", "root"]


def test_admission_of_a_job_outside_the_lineage_is_refused():
    with pytest.raises(BatchPlanError, match="not in the lineage"):
        admission_order({"ghost": EpochBatch(1, 1)}, CHAIN)


@given(
    st.dictionaries(
        st.sampled_from(CHAIN),
        st.tuples(st.integers(1, 20), st.integers(0, 3)).map(
            lambda p: EpochBatch(p[0], p[0] + p[1])
        ),
    )
)
def test_admission_orders_every_ready_job_once_by_epoch_then_depth(ready):
    order = admission_order(ready, CHAIN)
    assert sorted(order) == sorted(ready)
    keys = [(ready[job].first, -CHAIN.index(job)) for job in order]
    assert keys == sorted(keys)


def test_a_reader_is_worth_planning_once_every_followed_input_is_sealed_through_the_epoch():
    inputs = ["a", "b", "c"]
    assert not inputs_sealed_through(inputs, {"a": 5, "b": 4, "c": 5}, 5)  # b lags
    assert inputs_sealed_through(inputs, {"a": 5, "b": 5, "c": 7}, 5)
    assert inputs_sealed_through(inputs, {"a": 5}, 5)  # b and c not followed: the catalog decides
    assert not inputs_sealed_through(inputs, {"a": 5, "c": 3}, 5)
    assert inputs_sealed_through([], {"a": 1}, 5)


@given(
    through=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 9)),
    inputs=st.lists(st.sampled_from("abcde"), max_size=4),
    epoch=st.integers(0, 9),
)
def test_sealed_through_is_monotone_in_what_is_known(through, inputs, epoch):
    """Knowing more of an input's progress never makes a reader runnable that was not,
    and an input sealed further never makes it not runnable."""
    ready = inputs_sealed_through(inputs, through, epoch)
    for table in inputs:
        further = {**through, table: through.get(table, 0) + 1}
        if table in through:
            assert inputs_sealed_through(inputs, further, epoch) >= ready
        fewer = {t: e for t, e in through.items() if t != table}
        assert inputs_sealed_through(inputs, fewer, epoch) >= ready
