"""resolve_snapshot at each level, time travel, and properties over random epoch histories.

The epoch history is an in-memory implementation of the EpochHistory protocol written
here (the catalog's own implementations are tested in tests/catalog): it answers
latest_written by binary search, as the catalog must.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistency import (
    EpochNotReadableError,
    Level,
    NoCommonEpochError,
    NoEpochAtTimeError,
    Snapshot,
    SnapshotRequestError,
    UnknownLevelError,
    resolve_snapshot,
)
from consistency.errors import UnknownEpochError
from consistency.records import Epoch, EpochState, TableEpoch

T0 = datetime(2024, 1, 1, tzinfo=UTC)
W, P, C, RB = (
    EpochState.WRITTEN,
    EpochState.PROCESSED,
    EpochState.COALESCED,
    EpochState.ROLLED_BACK,
)


@dataclass
class MemoryHistory:
    """Epochs and per-table epoch states in memory."""

    epochs: list[Epoch]
    rows: dict[str, dict[int, TableEpoch]]
    calls: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._written = {
            table: sorted(e for e, row in rows.items() if row.state == W)
            for table, rows in self.rows.items()
        }

    def latest_written(self, tables, *, at_or_before=None):
        self.calls["latest_written"] += 1
        found = {}
        for table in tables:
            written = self._written.get(table, [])
            index = (
                bisect_right(written, at_or_before) if at_or_before is not None else len(written)
            )
            if index:
                found[table] = self.rows[table][written[index - 1]]
        return found

    def states_at(self, tables, epoch):
        return {t: self.rows[t][epoch] for t in tables if epoch in self.rows.get(t, {})}

    def epoch_at_or_before(self, ts, *, pipeline=None):
        assert pipeline is None  # the epochs here belong to no named pipeline
        index = bisect_right([e.barrier_ts for e in self.epochs], ts)
        return self.epochs[index - 1] if index else None

    def get_epoch(self, epoch):
        if not 1 <= epoch <= len(self.epochs):
            raise UnknownEpochError(epoch)
        return self.epochs[epoch - 1]

    # -- brute force, for the properties ---------------------------------------------

    def written(self, table: str) -> set[int]:
        return set(self._written.get(table, []))

    def max_version(self, table: str) -> int | None:
        versions = [
            r.delta_version for r in self.rows[table].values() if r.delta_version is not None
        ]
        return max(versions, default=None)


def make_history(n_epochs: int, tables: dict[str, dict[int, EpochState]], *, seconds=None):
    """Epochs 1..n_epochs one second apart (or ``seconds`` apart); versions grow per table."""
    gaps = seconds or [1] * n_epochs
    epochs, ts = [], T0
    for i in range(n_epochs):
        ts += timedelta(seconds=gaps[i])
        epochs.append(Epoch(id=i + 1, barrier_ts=ts, created_at=ts))
    rows: dict[str, dict[int, TableEpoch]] = {}
    for table, states in tables.items():
        rows[table] = {}
        version = -1
        written_after = sorted(e for e, s in states.items() if s == W)
        for epoch in sorted(states):
            state = states[epoch]
            into = None
            if state == C:
                into = next(e for e in written_after if e > epoch)
            else:
                version += 1
            rows[table][epoch] = TableEpoch(
                table=table,
                epoch=epoch,
                state=state,
                delta_version=None if state == C else version,
                coalesced_into=into,
            )
    return MemoryHistory(epochs=epochs, rows=rows)


# -- examples ----------------------------------------------------------------------------


def chain() -> MemoryHistory:
    """raw is ahead of cleaned, which coalesced 2..3 into 4; agg lags at epoch 2."""
    return make_history(
        6,
        {
            "raw": {1: W, 2: W, 3: W, 4: W, 5: W, 6: P},
            "cleaned": {1: W, 2: C, 3: C, 4: W, 5: P},
            "agg": {1: W, 2: W},
        },
    )


def test_read_committed_reads_each_table_at_its_own_latest_written_epoch():
    history = chain()
    snap = resolve_snapshot(history, ["raw", "cleaned", "agg", "empty"], "read committed")
    assert snap.level is Level.READ_COMMITTED
    assert snap.epoch is None
    assert snap.epochs == {"raw": 5, "cleaned": 4, "agg": 2, "empty": None}
    assert snap.versions == {
        "raw": history.rows["raw"][5].delta_version,
        "cleaned": history.rows["cleaned"][4].delta_version,
        "agg": history.rows["agg"][2].delta_version,
        "empty": None,
    }


def test_repeatable_read_picks_the_newest_epoch_every_table_has_written():
    history = chain()
    snap = resolve_snapshot(history, ["raw", "cleaned"], Level.REPEATABLE_READ)
    assert snap.epoch == 4
    assert snap.barrier_ts == T0 + timedelta(seconds=4)
    assert snap.epochs == {"raw": 4, "cleaned": 4}
    assert snap.versions == {"raw": 3, "cleaned": 1}
    # agg has 2 WRITTEN, cleaned coalesced 2: the only common epoch is 1.
    assert resolve_snapshot(history, ["raw", "cleaned", "agg"]).epoch == 1


def test_repeatable_read_steps_down_until_every_table_agrees():
    history = make_history(
        6, {"a": {1: W, 2: C, 3: C, 4: W, 5: C, 6: W}, "b": {1: W, 2: C, 3: W, 4: C, 5: W}}
    )
    snap = resolve_snapshot(history, ["a", "b"], "RR")
    # 6/5 -> bound 5: a=4, b=5 -> bound 4: a=4, b=3 -> bound 3: a=1, b=3 -> bound 1: agree.
    assert snap.epoch == 1
    assert history.calls["latest_written"] == 5


def test_repeatable_read_without_a_common_epoch_says_where_each_table_stands():
    history = make_history(4, {"a": {1: P, 2: W, 3: W}, "b": {1: W, 2: RB, 3: P}, "c": {}})
    with pytest.raises(NoCommonEpochError) as info:
        resolve_snapshot(history, ["a", "b"])
    assert str(info.value).startswith("tables share no WRITTEN epoch: a at 3, b at 1")
    with pytest.raises(NoCommonEpochError, match="a at 3, c never written"):
        resolve_snapshot(history, ["a", "c"])


def test_read_uncommitted_uses_the_latest_versions_given():
    history = chain()
    snap = resolve_snapshot(
        history, ["raw", "agg"], "ru", latest_versions={"raw": 9, "agg": None, "x": 1}
    )
    assert snap == Snapshot(
        level=Level.READ_UNCOMMITTED,
        versions={"raw": 9, "agg": None},
        epochs={"raw": None, "agg": None},
    )
    assert history.calls["latest_written"] == 0


def test_read_uncommitted_needs_a_version_for_every_table():
    with pytest.raises(SnapshotRequestError, match="missing for agg") as info:
        resolve_snapshot(chain(), ["raw", "agg"], "RU", latest_versions={"raw": 3})
    assert info.value.tables == ("agg",)
    with pytest.raises(SnapshotRequestError, match="missing for raw"):
        resolve_snapshot(chain(), ["raw"], "RU")


def test_as_of_epoch_reads_exactly_that_epoch():
    history = chain()
    snap = resolve_snapshot(history, ["raw", "cleaned"], as_of_epoch=1)
    assert (snap.level, snap.epoch, snap.barrier_ts) == (
        Level.REPEATABLE_READ,
        1,
        T0 + timedelta(seconds=1),
    )
    assert snap.versions == {"raw": 0, "cleaned": 0}
    assert resolve_snapshot(history, ["raw"], "repeatable-read", as_of_epoch=3).versions == {
        "raw": 2
    }


@pytest.mark.parametrize(
    ("tables", "epoch", "table", "state", "words"),
    [
        (["raw", "cleaned"], 3, "cleaned", "COALESCED", "COALESCED into epoch 4"),
        (["cleaned", "raw"], 5, "cleaned", "PROCESSED", "only PROCESSED"),
        (["raw", "agg"], 4, "agg", None, "no state"),
    ],
)
def test_as_of_epoch_refuses_an_epoch_a_table_cannot_be_read_at(tables, epoch, table, state, words):
    with pytest.raises(EpochNotReadableError) as info:
        resolve_snapshot(chain(), tables, as_of_epoch=epoch)
    error = info.value
    assert (error.table, error.epoch, error.state) == (table, epoch, state)
    assert words in str(error)


def test_an_unreadable_epoch_names_the_nearest_readable_ones():
    with pytest.raises(EpochNotReadableError) as coalesced:
        resolve_snapshot(chain(), ["raw", "cleaned"], as_of_epoch=3)
    assert (coalesced.value.readable_before, coalesced.value.readable_after) == (1, 4)
    assert "the nearest readable: the earlier epoch 1 and the later epoch 4" in str(coalesced.value)
    with pytest.raises(EpochNotReadableError) as processed:
        resolve_snapshot(chain(), ["raw", "cleaned"], as_of_epoch=5)
    assert (processed.value.readable_before, processed.value.readable_after) == (4, None)
    with pytest.raises(EpochNotReadableError) as first:
        resolve_snapshot(make_history(2, {"raw": {1: C, 2: W}}), ["raw"], as_of_epoch=1)
    assert (first.value.readable_before, first.value.readable_after) == (None, 2)


def test_as_of_epoch_not_issued_raises_the_catalog_error():
    with pytest.raises(UnknownEpochError):
        resolve_snapshot(chain(), ["raw"], as_of_epoch=99)


def test_as_of_time_reads_the_newest_common_epoch_at_or_before_it():
    history = chain()
    at = T0 + timedelta(seconds=4, milliseconds=500)
    assert resolve_snapshot(history, ["raw", "cleaned"], as_of_time=at).epoch == 4
    at = T0 + timedelta(seconds=3)
    snap = resolve_snapshot(history, ["raw", "cleaned"], as_of_time=at)
    assert snap.epoch == 1
    assert snap.barrier_ts <= at
    with pytest.raises(NoEpochAtTimeError) as info:
        resolve_snapshot(history, ["raw"], as_of_time=T0)
    assert info.value.ts == T0
    with pytest.raises(NoCommonEpochError, match="at or before epoch 1: raw at 1, agg never"):
        resolve_snapshot(
            make_history(3, {"raw": {1: W, 2: W}, "agg": {2: W}}),
            ["raw", "agg"],
            as_of_time=T0 + timedelta(seconds=1),
        )


@pytest.mark.parametrize("level", ["read-committed", "RU", Level.READ_UNCOMMITTED])
def test_time_travel_is_repeatable_read_only(level):
    for option in ({"as_of_epoch": 1}, {"as_of_time": T0 + timedelta(seconds=9)}):
        with pytest.raises(SnapshotRequestError, match="cannot be combined with read-"):
            resolve_snapshot(chain(), ["raw"], level, latest_versions={"raw": 1}, **option)


def test_both_time_travel_options_are_refused():
    with pytest.raises(SnapshotRequestError, match="not both"):
        resolve_snapshot(chain(), ["raw"], as_of_epoch=1, as_of_time=T0 + timedelta(seconds=9))


def test_table_list_must_be_non_empty_and_without_duplicates():
    with pytest.raises(SnapshotRequestError, match="no tables given"):
        resolve_snapshot(chain(), [])
    with pytest.raises(SnapshotRequestError, match="more than once: raw") as info:
        resolve_snapshot(chain(), ["raw", "agg", "raw"])
    assert info.value.tables == ("raw",)
    # A bare string is one table, not a list of letters.
    assert resolve_snapshot(chain(), "raw", "RC").versions == {"raw": 4}


def test_unknown_level_is_refused():
    with pytest.raises(UnknownLevelError):
        resolve_snapshot(chain(), ["raw"], "serializable")


# -- properties over random histories ------------------------------------------------------

STATE_CHOICES = [None, W, W, W, C, P, RB]


@st.composite
def histories(draw):
    n_epochs = draw(st.integers(1, 10))
    seconds = draw(st.lists(st.integers(0, 3), min_size=n_epochs, max_size=n_epochs))
    names = ["t0", "t1", "t2", "t3"][: draw(st.integers(1, 4))]
    tables = {}
    for name in names:
        drawn = draw(st.lists(st.sampled_from(STATE_CHOICES), min_size=n_epochs, max_size=n_epochs))
        states = {i + 1: s for i, s in enumerate(drawn) if s is not None}
        last_written = max((e for e, s in states.items() if s == W), default=0)
        # A coalesced epoch is folded into a later WRITTEN one; a tail has none to fold into.
        tables[name] = {e: s for e, s in states.items() if s != C or e < last_written}
    history = make_history(n_epochs, tables, seconds=seconds)
    requested = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    return history, requested


def common_written(history: MemoryHistory, tables, *, up_to=None) -> set[int]:
    common = set.intersection(*(history.written(t) for t in tables))
    return {e for e in common if up_to is None or e <= up_to}


def resolve_or_none(*args, **kwargs) -> Snapshot | None:
    try:
        return resolve_snapshot(*args, **kwargs)
    except NoCommonEpochError:
        return None


@settings(max_examples=100, deadline=None)
@given(histories())
def test_repeatable_read_is_the_newest_common_written_epoch(case):
    history, tables = case
    common = common_written(history, tables)
    snap = resolve_or_none(history, tables, "RR")
    if not common:
        assert snap is None
        return
    assert snap is not None
    assert snap.epoch == max(common)
    assert set(snap.epochs.values()) == {snap.epoch}
    assert snap.barrier_ts == history.get_epoch(snap.epoch).barrier_ts
    for table in tables:
        row = history.rows[table][snap.epoch]
        assert row.state == W
        assert snap.versions[table] == row.delta_version


@settings(max_examples=100, deadline=None)
@given(histories(), st.data())
def test_levels_are_ordered_per_table_rr_rc_ru(case, data):
    history, tables = case
    rr = resolve_or_none(history, tables, "RR")
    rc = resolve_snapshot(history, tables, "RC")
    latest = {}
    for table in tables:
        top = history.max_version(table)
        latest[table] = None if top is None else top + data.draw(st.integers(0, 2))
    ru = resolve_snapshot(history, tables, "RU", latest_versions=latest)
    for table in tables:
        written = history.written(table)
        assert rc.epochs[table] == (max(written) if written else None)
        if rr is not None:
            assert rc.epochs[table] >= rr.epochs[table]
            assert rc.versions[table] >= rr.versions[table]
        if rc.versions[table] is not None:
            assert ru.versions[table] >= rc.versions[table]


@settings(max_examples=100, deadline=None)
@given(histories(), st.integers(0, 35), st.integers(0, 35))
def test_as_of_time_is_monotone_and_never_after_the_time(case, a, b):
    history, tables = case
    early, late = sorted((T0 + timedelta(seconds=a), T0 + timedelta(seconds=b)))
    snaps = []
    for at in (early, late):
        bound = history.epoch_at_or_before(at)
        try:
            snap = resolve_snapshot(history, tables, as_of_time=at)
        except NoEpochAtTimeError:
            assert bound is None
            snap = None
        except NoCommonEpochError:
            assert not common_written(history, tables, up_to=bound.id)
            snap = None
        else:
            assert snap.barrier_ts <= at
            assert snap.epoch == max(common_written(history, tables, up_to=bound.id))
        snaps.append(snap)
    if snaps[0] is not None:
        assert snaps[1] is not None
        assert snaps[1].epoch >= snaps[0].epoch


@settings(max_examples=100, deadline=None)
@given(histories(), st.integers(1, 10))
def test_as_of_epoch_succeeds_exactly_when_every_table_has_it_written(case, epoch):
    history, tables = case
    if epoch > len(history.epochs):
        epoch = len(history.epochs)
    readable = all(epoch in history.written(t) for t in tables)
    try:
        snap = resolve_snapshot(history, tables, as_of_epoch=epoch)
    except EpochNotReadableError as error:
        assert not readable
        row = history.rows[error.table].get(epoch)
        assert error.state == (row.state if row else None)
        assert error.state != W
    else:
        assert readable
        assert snap.versions == {t: history.rows[t][epoch].delta_version for t in tables}
