"""Repeatable-read across pipelines: each pipeline at its newest cut at or before the
oldest of their latest cuts' barriers (docs/design.md, "Reading across pipelines")."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistency import (
    Level,
    NoAlignedCutError,
    NoCommonEpochError,
    PipelineCut,
    SnapshotRequestError,
    resolve_snapshot,
)
from consistency.errors import UnknownEpochError
from consistency.records import Epoch, EpochState, TableEpoch

T0 = datetime(2024, 1, 1, tzinfo=UTC)
W, P, C = EpochState.WRITTEN, EpochState.PROCESSED, EpochState.COALESCED


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class PipelinesHistory:
    """Epochs of several pipelines (ids one sequence, barrier = id seconds unless given) and
    per-table states; version of a table at an epoch = the epoch * 10."""

    epochs: dict[int, Epoch]
    rows: dict[str, dict[int, TableEpoch]]

    @classmethod
    def of(cls, pipelines: dict[int, str], states: dict[str, dict[int, EpochState]], ts=None):
        ts = ts or {}
        epochs = {
            i: Epoch(id=i, barrier_ts=at(ts.get(i, i)), created_at=at(i), pipeline=p)
            for i, p in pipelines.items()
        }
        rows = {
            table: {
                e: TableEpoch(table, e, s, None if s == C else e * 10) for e, s in by_epoch.items()
            }
            for table, by_epoch in states.items()
        }
        return cls(epochs, rows)

    def latest_written(self, tables, *, at_or_before=None):
        found = {}
        for table in tables:
            written = sorted(e for e, r in self.rows.get(table, {}).items() if r.state == W)
            index = (
                bisect_right(written, at_or_before) if at_or_before is not None else len(written)
            )
            if index:
                found[table] = self.rows[table][written[index - 1]]
        return found

    def states_at(self, tables, epoch):
        return {t: self.rows[t][epoch] for t in tables if epoch in self.rows.get(t, {})}

    def epoch_at_or_before(self, ts, *, pipeline=None):
        fit = [
            e for e in self.epochs.values() if e.barrier_ts <= ts and pipeline in (None, e.pipeline)
        ]
        return max(fit, key=lambda e: (e.barrier_ts, e.id), default=None)  # as the catalog

    def get_epoch(self, epoch):
        if epoch not in self.epochs:
            raise UnknownEpochError(epoch)
        return self.epochs[epoch]


def two_teams(ts=None) -> PipelinesHistory:
    """team_a owns odd epochs (a_words sealed at 1, 3, 5), team_b even ones (b_words sealed
    at 2 and 4, 6 only PROCESSED; b_counts sealed at 2, 4 coalesced into 6 which is not
    sealed yet)."""
    return PipelinesHistory.of(
        {i: "team_a" if i % 2 else "team_b" for i in range(1, 7)},
        {
            "a_words": {1: W, 3: W, 5: W},
            "b_words": {2: W, 4: W, 6: P},
            "b_counts": {2: W, 4: W},
        },
        ts,
    )


PIPELINES = {"a_words": "team_a", "b_words": "team_b", "b_counts": "team_b"}


def test_each_pipeline_is_read_at_its_newest_cut_at_or_before_the_oldest_latest_barrier():
    snap = resolve_snapshot(
        two_teams(), ["b_words", "a_words", "b_counts"], "repeatable-read", pipelines=PIPELINES
    )
    # team_b's latest cut is epoch 4 (at 4 s), team_a's is 5 (at 5 s): T = 4 s, and team_a is
    # read at 3, its newest cut at or before it, not at 5.
    assert snap.level is Level.REPEATABLE_READ and snap.epoch is None
    assert snap.pipelines == (
        PipelineCut("team_a", 3, at(3), ("a_words",)),
        PipelineCut("team_b", 4, at(4), ("b_words", "b_counts")),
    )
    assert (snap.aligned_at, snap.barrier_ts) == (at(4), at(3))
    assert dict(snap.versions) == {"a_words": 30, "b_words": 40, "b_counts": 40}
    assert list(snap.versions) == ["b_words", "a_words", "b_counts"]
    assert dict(snap.epochs) == {"a_words": 3, "b_words": 4, "b_counts": 4}


def test_the_cut_is_aligned_by_barrier_time_not_by_epoch_number():
    # team_a's epoch 5 is sealed at 3.5 s, before team_b's epoch 4 (4 s): team_a is read at
    # its latest cut, and team_b at 2, although 4 < 5.
    snap = resolve_snapshot(two_teams({5: 3.5}), ["a_words", "b_words"], "rr", pipelines=PIPELINES)
    assert [(c.pipeline, c.epoch) for c in snap.pipelines] == [("team_a", 5), ("team_b", 2)]
    assert (snap.aligned_at, snap.barrier_ts) == (at(3.5), at(2))
    assert all(cut.barrier_ts <= snap.aligned_at for cut in snap.pipelines)


def test_as_of_time_aligns_every_pipeline_at_that_time():
    history = two_teams()
    snap = resolve_snapshot(
        history, ["a_words", "b_words"], as_of_time=at(3.5), pipelines=PIPELINES
    )
    assert [(c.pipeline, c.epoch) for c in snap.pipelines] == [("team_a", 3), ("team_b", 2)]
    assert snap.aligned_at == at(3.5)
    with pytest.raises(NoAlignedCutError) as raised:
        resolve_snapshot(history, ["a_words", "b_words"], as_of_time=at(1.5), pipelines=PIPELINES)
    error = raised.value
    assert (error.pipeline, error.tables, error.reference) == ("team_b", ("b_words",), None)
    assert "later --as-of-time" in str(error) and "'team_b'" in str(error)


def test_no_aligned_cut_says_which_pipeline_and_what_helps():
    # team_a sealed only epoch 1; team_b's first cut (epoch 2) is newer than it.
    history = PipelinesHistory.of(
        {1: "team_a", 2: "team_b"}, {"a_words": {1: W}, "b_words": {2: W}}
    )
    with pytest.raises(NoAlignedCutError) as raised:
        resolve_snapshot(history, ["a_words", "b_words"], pipelines=PIPELINES)
    error = raised.value
    assert (error.pipeline, error.reference, error.reference_epoch) == ("team_b", "team_a", 1)
    assert "run pipeline 'team_a' until it seals a newer epoch" in str(error)
    assert "lagging" not in str(error)


def test_a_pipeline_without_any_cut_is_its_own_lag():
    history = PipelinesHistory.of({1: "team_a", 2: "team_b"}, {"a_words": {1: W}, "b_words": {}})
    with pytest.raises(NoCommonEpochError) as raised:
        resolve_snapshot(history, ["a_words", "b_words"], pipelines=PIPELINES)
    assert raised.value.tables == ("b_words",)


def test_as_of_epoch_across_pipelines_is_refused():
    with pytest.raises(SnapshotRequestError) as raised:
        resolve_snapshot(two_teams(), ["a_words", "b_words"], as_of_epoch=3, pipelines=PIPELINES)
    assert "--as-of-time" in str(raised.value) and "team_a: a_words" in str(raised.value)


def test_as_of_another_pipelines_epoch_says_whose_it_is():
    with pytest.raises(SnapshotRequestError) as raised:
        resolve_snapshot(two_teams(), ["b_words"], as_of_epoch=3, pipelines=PIPELINES)
    message = str(raised.value)
    assert "epoch 3 belongs to pipeline 'team_a'" in message
    assert "b_words to pipeline 'team_b'" in message and "--pipeline team_b" in message
    # The pipeline's own epoch reads; an epoch never issued fails as before.
    assert resolve_snapshot(
        two_teams(), ["b_words"], as_of_epoch=4, pipelines=PIPELINES
    ).versions == {"b_words": 40}
    with pytest.raises(UnknownEpochError):
        resolve_snapshot(two_teams(), ["b_words"], as_of_epoch=99, pipelines=PIPELINES)


def test_one_pipeline_and_the_other_levels_resolve_as_without_pipelines():
    history = two_teams()
    for tables, kw in (
        (["b_words", "b_counts"], {}),
        (["b_words", "b_counts"], {"as_of_epoch": 2}),
        (["b_words", "b_counts"], {"as_of_time": at(3)}),
    ):
        assert resolve_snapshot(history, tables, pipelines=PIPELINES, **kw) == resolve_snapshot(
            history, tables, **kw
        )
    tables = ["a_words", "b_words"]
    assert resolve_snapshot(
        history, tables, "read-committed", pipelines=PIPELINES
    ) == resolve_snapshot(history, tables, "read-committed")


@st.composite
def histories(draw):
    """Up to 12 epochs, each of team_a or team_b with a non-decreasing barrier per pipeline;
    each table WRITTEN, PROCESSED or absent at each epoch of its pipeline."""
    n = draw(st.integers(2, 12))
    owners = draw(st.lists(st.sampled_from(["team_a", "team_b"]), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    ts, clock = {}, 0
    for i, gap in enumerate(gaps, start=1):
        clock += gap
        ts[i] = clock
    states = {}
    for table, pipeline in (("a1", "team_a"), ("a2", "team_a"), ("b1", "team_b")):
        states[table] = {
            e: s
            for e in range(1, n + 1)
            if owners[e - 1] == pipeline
            and (s := draw(st.sampled_from([W, W, P, None]))) is not None
        }
    pipelines = dict(enumerate(owners, start=1))
    return PipelinesHistory.of(pipelines, states, ts)


@settings(max_examples=200, deadline=None)
@given(histories())
def test_every_pipeline_is_at_its_newest_common_cut_at_or_before_t(history):
    pipelines = {"a1": "team_a", "a2": "team_a", "b1": "team_b"}
    try:
        snap = resolve_snapshot(history, ["a1", "a2", "b1"], pipelines=pipelines)
    except (NoAlignedCutError, NoCommonEpochError):
        return
    latest = {}
    for cut in snap.pipelines:
        common = set.intersection(
            *({e for e, r in history.rows[t].items() if r.state == W} for t in cut.tables)
        )
        latest[cut.pipeline] = max(history.epochs[e].barrier_ts for e in common)
        fit = [e for e in common if history.epochs[e].barrier_ts <= snap.aligned_at]
        assert cut.epoch == max(fit)
        assert cut.barrier_ts <= snap.aligned_at
    assert snap.aligned_at == min(latest.values())


def test_as_of_time_of_one_pipeline_ignores_another_pipelines_barrier_clock():
    # team_b's epoch 2 (barrier 4.4 s, event time) is issued before team_a's epoch 3
    # (barrier 4 s): at 4.5 s, a_words is at 3, whatever team_b's epochs say.
    history = two_teams({2: 4.4, 3: 4.0})
    snap = resolve_snapshot(history, ["a_words"], as_of_time=at(4.5), pipelines=PIPELINES)
    assert (snap.epoch, snap.barrier_ts, snap.pipelines) == (3, at(4), ())
