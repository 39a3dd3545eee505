"""Epoch issuance and source slices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from catalog import JobSpec, SliceConflictError, StaleLeaseError, TableSpec, UnknownEpochError

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def reader(catalog):
    """A job ``ingest`` reading sources, with its lease: slices are recorded by a job."""
    catalog.register_table(TableSpec("raw", "/w/raw", kind="root"))
    catalog.register_job(JobSpec("ingest", "raw", source="words"))
    lease = catalog.acquire_lease("ingest", "me", ttl_seconds=60)
    return {"job": "ingest", "generation": lease.generation}


def test_epochs_start_at_one_and_strictly_increase(catalog):
    assert catalog.latest_epoch() is None
    before = datetime.now(UTC) - timedelta(seconds=5)
    epochs = [catalog.open_epoch() for _ in range(5)]
    assert [e.id for e in epochs] == [1, 2, 3, 4, 5]
    assert all(
        e.barrier_ts.tzinfo is not None and e.barrier_ts.utcoffset() == timedelta(0) for e in epochs
    )
    assert all(a.barrier_ts <= b.barrier_ts for a, b in zip(epochs, epochs[1:], strict=False))
    assert before <= epochs[0].barrier_ts <= datetime.now(UTC) + timedelta(seconds=5)
    assert catalog.latest_epoch() == epochs[-1]
    assert catalog.get_epoch(3) == epochs[2]


def test_an_earlier_barrier_timestamp_is_raised_to_the_previous_one(catalog):
    first = catalog.open_epoch(T0)
    second = catalog.open_epoch(T0 - timedelta(hours=1))
    third = catalog.open_epoch(T0 + timedelta(minutes=5))
    assert first.barrier_ts == T0
    assert second.barrier_ts == T0
    assert third.barrier_ts == T0 + timedelta(minutes=5)


def test_barrier_timestamps_are_stored_in_utc(catalog):
    paris = timezone(timedelta(hours=1))
    opened = catalog.open_epoch(datetime(2030, 1, 1, 13, 0, tzinfo=paris))
    assert opened.barrier_ts == T0 and opened.barrier_ts.tzinfo == UTC
    assert catalog.get_epoch(opened.id).barrier_ts == T0
    # A naive timestamp is taken to be UTC.
    naive = catalog.open_epoch(datetime(2030, 1, 1, 14, 0))
    assert catalog.get_epoch(naive.id).barrier_ts == T0 + timedelta(hours=2)


def test_unknown_epoch_raises(catalog):
    catalog.open_epoch()
    with pytest.raises(UnknownEpochError) as raised:
        catalog.get_epoch(2)
    assert raised.value.epoch == 2


def test_epoch_ranges(catalog):
    for i in range(6):
        catalog.open_epoch(T0 + timedelta(minutes=i))
    assert [e.id for e in catalog.epochs()] == [1, 2, 3, 4, 5, 6]
    assert [e.id for e in catalog.epochs(after=2, up_to=4)] == [3, 4]
    assert [e.id for e in catalog.epochs(after=5)] == [6]
    assert catalog.epochs(after=6) == []


def test_epoch_at_or_before_a_time(catalog):
    catalog.open_epoch(T0)
    catalog.open_epoch(T0 + timedelta(minutes=1))
    catalog.open_epoch(T0 + timedelta(minutes=1))  # same barrier: the newer epoch wins
    catalog.open_epoch(T0 + timedelta(minutes=2))
    assert catalog.epoch_at_or_before(T0 - timedelta(seconds=1)) is None
    assert catalog.epoch_at_or_before(T0).id == 1
    assert catalog.epoch_at_or_before(T0 + timedelta(seconds=90)).id == 3
    assert catalog.epoch_at_or_before(T0 + timedelta(hours=1)).id == 4
    paris = timezone(timedelta(hours=1))
    assert catalog.epoch_at_or_before((T0 + timedelta(minutes=1)).astimezone(paris)).id == 3


def test_a_slice_is_recorded_once(catalog, reader):
    epoch = catalog.open_epoch()
    bounds = {"topic": "words", "partitions": {"0": [0, 10], "1": [5, 7]}}
    recorded = catalog.record_slice("words", epoch.id, bounds, **reader)
    assert recorded.bounds == bounds and recorded.epoch == epoch.id and not recorded.catch_up
    assert recorded.recorded_at is not None
    assert catalog.record_slice("words", epoch.id, dict(bounds), **reader) == recorded
    with pytest.raises(SliceConflictError) as raised:
        catalog.record_slice(
            "words", epoch.id, {"topic": "words", "partitions": {"0": [0, 11]}}, **reader
        )
    error = raised.value
    assert (error.source, error.epoch) == ("words", epoch.id)
    assert error.recorded == bounds
    assert catalog.get_slice("words", epoch.id) == recorded


def test_slices_per_source_and_latest(catalog, reader):
    e1, e2, e3 = (catalog.open_epoch() for _ in range(3))
    catalog.record_slice("a", e1.id, {"to": 1}, **reader)
    catalog.record_slice("a", e3.id, {"to": 3}, catch_up=True, **reader)
    catalog.record_slice("b", e2.id, {"to": 2}, **reader)
    assert catalog.latest_slice("a").epoch == 3
    assert catalog.latest_slice("a").catch_up
    assert catalog.latest_slice("b").bounds == {"to": 2}
    assert catalog.latest_slice("c") is None
    assert catalog.get_slice("a", e2.id) is None
    assert [s.epoch for s in catalog.slices("a")] == [e1.id, e3.id]
    assert [s.epoch for s in catalog.slices("a", after=e1.id)] == [e3.id]
    assert [s.epoch for s in catalog.slices("a", after=0, up_to=e2.id)] == [e1.id]
    assert catalog.slices("c") == []


def test_a_slice_of_an_unissued_epoch_is_refused(catalog, reader):
    with pytest.raises(UnknownEpochError):
        catalog.record_slice("words", 1, {"to": 1}, **reader)
    assert catalog.latest_slice("words") is None


def test_a_slice_is_fenced_by_the_lease_generation(catalog, reader):
    epoch = catalog.open_epoch().id
    lease = catalog.get_lease("ingest")
    catalog.release_lease(lease)
    taken = catalog.acquire_lease("ingest", "successor", ttl_seconds=60)
    with pytest.raises(StaleLeaseError) as raised:
        catalog.record_slice("words", epoch, {"to": 1}, job="ingest", generation=lease.generation)
    assert (raised.value.generation, raised.value.current_generation) == (1, 2)
    assert catalog.get_slice("words", epoch) is None
    catalog.record_slice("words", epoch, {"to": 1}, job="ingest", generation=taken.generation)
    assert catalog.get_slice("words", epoch).bounds == {"to": 1}
