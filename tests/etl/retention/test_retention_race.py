"""Processes racing (issue 11): pins taken while maintenance expires, compacts and vacuums
the same epochs, on SQLite and on PostgreSQL. No pinned read ever fails or changes; a pin
that lost the race fails with the clear expired-epoch error, never a storage error.

The history is written once through the engine (Spark) on a synthetic clock; the racing
processes use no Spark (the public reader over delta-rs, and the function behind
``etl maintain``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from catalog import EpochExpiredError
from etl import Retention, snapshot
from etl.errors import PipelineBusyError
from tests.support.retention_env import BASE, Env

pytestmark = [pytest.mark.retention, pytest.mark.spark, pytest.mark.slow]

WORKER = Path(__file__).resolve().parents[2] / "support" / "retention_race_worker.py"
REPO = Path(__file__).resolve().parents[3]
EPOCHS = 10  # one an hour, hours 0..9
READERS = 3
RACE_SECONDS = 20.0
NEW_EPOCHS = 4  # written by the engine during the race, at hours 10..13
# The maintainer's clock moves from hour 9 at 1 hour per wall second. Every epoch is kept for
# 10h, the newest of each 3h bucket for 14h: the first epochs expire one after another from
# the first seconds, the tier's cuts (hours 2, 5, 8) around seconds 7, 10 and 13, and once
# the engine has sealed new epochs on top of the compacted files, vacuum deletes the small
# files that only expired cuts needed, while readers keep pinning those same cuts.
POLICY = Retention(every_epoch_for="10h", tiers=[("3h", "14h")])
HOURS_PER_SECOND = 1.0


def _rows(reader, table: str) -> list[list]:
    arrow = reader.arrow(table, columns=["id", "amount", "_epoch"])
    return sorted(map(list, zip(*(c.to_pylist() for c in arrow.columns), strict=True)))


def _race(tmp_path: Path, spark, catalog_url: str | None) -> None:
    env = Env(tmp_path, spark, POLICY, catalog_url=catalog_url)
    epochs = [env.epoch(hour, rows=3) for hour in range(EPOCHS)]
    expected = {}
    for e in epochs:
        with snapshot(env.catalog, ["orders", "big"], as_of_epoch=e) as r:
            expected[str(e)] = {t: _rows(r, t) for t in ("orders", "big")}
    assert all(expected[str(e)]["big"] for e in epochs)
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    clock = {"start": (BASE + timedelta(hours=EPOCHS - 1)).isoformat()}
    (tmp_path / "clock.json").write_text(json.dumps(clock | {"hours_per_second": HOURS_PER_SECOND}))
    worker_env = os.environ | {"PYTHONPATH": str(REPO)}
    go = tmp_path / "go"
    common = [catalog_url or "", str(env.warehouse)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "reader", *common, str(tmp_path / "expected.json")]
            + [str(go), str(RACE_SECONDS), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=worker_env,
        )
        for seed in range(READERS)
    ]
    procs.append(
        subprocess.Popen(
            [sys.executable, str(WORKER), "maintain", *common, str(tmp_path / "clock.json")]
            + [str(go), str(RACE_SECONDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=worker_env,
        )
    )
    deadline = time.monotonic() + 600
    while len(list(tmp_path.glob("go.ready-*"))) < len(procs):  # all imported, all connected
        dead = [p.communicate() for p in procs if p.poll() is not None]
        assert not dead, dead
        assert time.monotonic() < deadline, "the racing processes did not start"
        time.sleep(0.05)
    start_at = time.time() + 0.5
    go.with_name("go.tmp").write_text(repr(start_at))
    go.with_name("go.tmp").rename(go)
    while time.time() < start_at + 0.5:
        time.sleep(0.05)
    for hour in range(EPOCHS, EPOCHS + NEW_EPOCHS):  # new epochs keep arriving
        while True:
            try:
                env.epoch(hour, rows=3)
                break
            except PipelineBusyError:  # the maintainer holds a job's lease to compact it
                time.sleep(0.1)
        time.sleep(1.0)
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=RACE_SECONDS + 120)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    *readers, maintainer = reports
    assert not maintainer["errors"], maintainer["errors"]
    failures = [f for r in readers for f in r["failures"]]
    assert not failures, failures[:5]
    # the race happened: maintenance ran over and over, compacted, expired epochs and
    # removed files while pins were being taken on the same epochs
    assert maintainer["runs"] >= 5 and maintainer["compacted"] > 0, maintainer
    expired = set(maintainer["expired"])
    # (pins may keep the last few from expiring: readers that lose races pile onto the rest)
    assert len(expired & set(epochs)) >= 6, expired
    assert maintainer["files_removed"] > 0, maintainer
    pinned = {e for r in readers for e in r["pinned"]}
    assert pinned & expired, "no pin was ever taken on an epoch that expired later"
    assert sum(r["ok"] for r in readers) >= 20, readers
    lost = {e for r in readers for e in r["lost_epochs"]}
    assert lost <= expired, (lost, expired)
    print(
        f"race: {maintainer['runs']} maintenance runs, {len(expired)} epochs expired, "
        f"{maintainer['files_removed']} files removed; pinned reads "
        f"{sum(r['ok'] for r in readers)}, lost races {sum(r['lost'] for r in readers)}"
    )
    # afterwards: every retained epoch reads what it read before; expired ones fail clearly
    for e in epochs:
        if e in expired or env.catalog.expiry_of(e) is not None:
            with pytest.raises(EpochExpiredError, match=f"epoch {e} has expired"):
                snapshot(env.catalog, ["orders", "big"], as_of_epoch=e)
            continue
        with snapshot(env.catalog, ["orders", "big"], as_of_epoch=e) as r:
            assert {t: _rows(r, t) for t in ("orders", "big")} == expected[str(e)], e


def test_pins_race_maintenance_on_sqlite(tmp_path, spark):
    _race(tmp_path, spark, None)


@pytest.mark.postgres
def test_pins_race_maintenance_on_postgresql(tmp_path, spark, postgres_url):
    _race(tmp_path, spark, postgres_url)
