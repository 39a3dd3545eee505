"""delta-rs gives the fenced commit path the atomicity it relies on: processes racing on
one table never overwrite each other's commits, every commit lands at the version it
reports, and once a new generation claimed the table no commit of the old one lands."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

pytestmark = [pytest.mark.recovery, pytest.mark.slow]

WORKER = Path(__file__).parents[2] / "support" / "delta_race_worker.py"


def _race(location: str, workers: list[list[str]]) -> list[dict]:
    start_at = str(time.time() + 3.0)  # every worker is up and imported by then
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), location, *args[:4], start_at, *args[4:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in workers
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out))
    return reports


def test_racing_writers_never_overwrite_and_a_claim_stops_the_old_generation(tmp_path):
    location = str(tmp_path / "table")
    write_deltalake(location, pa.table({"id": pa.array([], pa.int64())}))
    reports = _race(
        location,
        [
            # The superseded runner, committing as fast as it can until it is fenced, without
            # even a checkpoint's pause: however the processes are scheduled, the claim
            # lands while it is still committing.
            ["job", "1", "old", "1000000", "--for", "120", "--no-checkpoints"],
            ["job", "2", "new", "30", "--claim", "old"],  # the new owner claims, then commits
            ["other", "1", "other", "30"],  # another job of the table's log, for contention
        ],
    )
    old, new, other = reports
    history = {int(e["version"]): e for e in DeltaTable(location).history()}
    for report in reports:
        versions = report["versions"]
        assert len(set(versions)) == len(versions)
        for index, version in enumerate(versions):
            entry = history[version]  # each commit is where its writer says, and only there
            assert (entry["race.worker"], entry["race.index"]) == (report["name"], index)
    landed = [v for v, e in history.items() if "race.worker" in e]
    assert len(landed) == sum(len(r["versions"]) for r in reports)
    # The old generation stopped at the claim and never committed after it.
    assert old["stop"].startswith("fenced at 2"), old
    assert new["claimed_at"] is not None and old["versions"]
    assert all(v < new["claimed_at"] for v in old["versions"])
    assert len(new["versions"]) == 30 and len(other["versions"]) == 30
