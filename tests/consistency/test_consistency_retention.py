"""The pure selection of retained cuts (consistency/retention.py) over a synthetic clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistency.retention import (
    EpochPoint,
    Retention,
    RetentionPolicyError,
    expirable,
    expired_epochs,
    retained_epochs,
)

pytestmark = pytest.mark.retention

T0 = datetime(2024, 1, 1, tzinfo=UTC)
POLICY = Retention(every_epoch_for="1d", tiers=[("1h", "7d"), ("1d", "365d")])


def test_a_pin_or_a_tag_keeps_its_epoch_whatever_the_policy_says():
    assert expirable([5, 1, 3, 2, 4], pinned={2}, tagged={4, 9}) == [1, 3, 5]
    assert expirable([], pinned=(), tagged=()) == []


def test_a_bad_policy_is_an_error_of_the_project():
    from consistency.errors import DeltaBarrierError

    with pytest.raises(DeltaBarrierError):
        Retention(every_epoch_for="soon")


def test_policy_round_trips_and_rejects_nonsense():
    assert Retention.from_json(POLICY.to_json()) == POLICY
    assert (
        POLICY.rule == "every epoch for 1d, then one cut per 1h for 1w, then one cut per 1d for 1y"
    )
    with pytest.raises(RetentionPolicyError):
        Retention(every_epoch_for="soon")
    with pytest.raises(RetentionPolicyError):
        Retention(tiers=[("1d", "1h")])
    assert Retention().keeps_everything


def test_a_simulated_year_of_ten_minute_epochs_keeps_exactly_the_tiers():
    points = [EpochPoint(i + 1, T0 + timedelta(minutes=10 * i)) for i in range(6 * 24 * 366)]
    now = points[-1].barrier_ts
    kept = retained_epochs(points, POLICY, now=now)
    expected = {points[-1].id}
    for p in points:
        age = now - p.barrier_ts
        minutes = p.barrier_ts.hour * 60 + p.barrier_ts.minute
        if age <= timedelta(days=1):
            expected.add(p.id)
        if p.barrier_ts.minute == 50 and age <= timedelta(days=7):
            expected.add(p.id)  # the newest epoch of its hour
        if minutes == 23 * 60 + 50 and age <= timedelta(days=365):
            expected.add(p.id)  # the newest epoch of its day
    assert set(kept) == expected
    assert 24 * 6 < len(kept) < 24 * 6 + 24 * 7 + 366
    assert set(expired_epochs(points, POLICY, now=now)) == {p.id for p in points} - expected


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=7200), min_size=1, max_size=200),
    every=st.sampled_from([None, "10m", "1h"]),
    tiers=st.lists(
        st.tuples(st.sampled_from(["5m", "1h"]), st.sampled_from(["2h", "1d"])), max_size=2
    ),
    steps=st.lists(st.integers(min_value=0, max_value=20000), min_size=1, max_size=5),
)
def test_expiry_is_monotone_and_keeps_the_latest(gaps, every, tiers, steps):
    policy = Retention(every_epoch_for=every, tiers=tiers)
    ts, points = T0, []
    for i, gap in enumerate(gaps):
        ts += timedelta(seconds=gap)
        points.append(EpochPoint(i + 1, ts))
    now, expired = ts, set()
    for step in steps:
        now += timedelta(seconds=step)
        kept = retained_epochs(points, policy, now=now)
        assert points[-1].id in kept
        assert not (expired & set(kept)), "an expired epoch came back"
        expired |= {p.id for p in points} - set(kept)
