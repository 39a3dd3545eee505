"""Tiered retention end to end over a synthetic clock (issue 11): a simulated year of epochs
written through the engine, then ``etl maintain`` at the year's end. Exactly the cuts the
policy keeps remain; each reads what it read before maintenance; the others give the clear
expired-epoch error that names the epoch and the rule."""

from __future__ import annotations

from datetime import timedelta

import pytest

from catalog import EpochExpiredError
from consistency.retention import EpochPoint, retained_epochs
from etl import Retention, snapshot
from etl.delta.log import active_files, open_table
from etl.retention.maintain import maintain
from tests.support.retention_env import BASE, Env

pytestmark = [pytest.mark.retention, pytest.mark.spark, pytest.mark.slow]

# Scaled to ~60 epochs: every epoch for a day, one per week for 30 days, one per 30 days for
# a year. Epochs: every 10 days for 330 days, every 2 days for the next month, every 3 hours
# on the last day.
POLICY = Retention(every_epoch_for="1d", tiers=[("1w", "30d"), ("30d", "1y")])
HOURS = (
    [24 * d for d in range(0, 331, 10)]
    + [24 * d for d in range(332, 363, 2)]
    + [24 * 364 + h for h in range(0, 24, 3)]
)
NOW = BASE + timedelta(days=364, hours=22)
TABLES = ("orders", "big")


def _rows(reader, table: str) -> list[tuple]:
    arrow = reader.arrow(table, columns=["id", "amount", "_epoch"])
    return sorted(zip(*(c.to_pylist() for c in arrow.columns), strict=True))


def test_a_simulated_year_keeps_exactly_the_tiered_cuts(tmp_path, spark):
    env = Env(tmp_path, spark, POLICY)
    epochs = {env.epoch(hour, rows=3): BASE + timedelta(hours=hour) for hour in HOURS}
    before = {}
    for e in epochs:
        with snapshot(env.catalog, list(TABLES), as_of_epoch=e) as r:
            before[e] = {t: _rows(r, t) for t in TABLES}
    kept = retained_epochs([EpochPoint(e, ts) for e, ts in epochs.items()], POLICY, now=NOW)
    last_day = [e for e, ts in epochs.items() if NOW - ts <= timedelta(days=1)]
    assert len(last_day) == 8 and set(last_day) <= set(kept)
    assert 15 < len(kept) < len(epochs) - 20, kept  # every tier contributes, most go

    dry = maintain(env.catalog, now=NOW, dry_run=True)
    assert sorted(dry.epochs_expired) == sorted(set(epochs) - set(kept))
    assert not env.catalog.expired_epochs()  # --dry-run changed nothing

    report = maintain(env.catalog, now=NOW, orphan_age=timedelta(0), min_files=2)
    assert sorted(report.epochs_expired) == sorted(set(epochs) - set(kept))
    assert {x.epoch for x in env.catalog.expired_epochs()} == set(epochs) - set(kept)
    assert sum(t.compacted_files for t in report.tables) > 0
    again = maintain(env.catalog, now=NOW, orphan_age=timedelta(0), min_files=2)
    assert not again.epochs_expired and again.files_removed == 0  # idempotent

    for e in epochs:
        if e in kept:
            with snapshot(env.catalog, list(TABLES), as_of_epoch=e) as r:
                assert {t: _rows(r, t) for t in TABLES} == before[e], (e, kept[e])
        else:
            with pytest.raises(EpochExpiredError) as err:
                snapshot(env.catalog, list(TABLES), as_of_epoch=e)
            assert f"epoch {e} has expired" in str(err.value)
            assert POLICY.rule in str(err.value)
    # the latest state is compacted: fewer files than epochs, same rows
    location = env.location("orders")
    assert len(active_files(open_table(location))) < len(epochs)
    with snapshot(env.catalog, list(TABLES)) as r:
        assert {t: _rows(r, t) for t in TABLES} == before[max(epochs)]
