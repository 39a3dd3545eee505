"""A process racing others on one warehouse's retention, without Spark.

Usage:
  python retention_race_worker.py reader CATALOG_URL WAREHOUSE EXPECTED_JSON GO SECONDS SEED
  python retention_race_worker.py maintain CATALOG_URL WAREHOUSE CLOCK_JSON GO SECONDS

Once it has imported everything and opened the catalog, a worker creates ``GO.ready-<pid>``
and waits for the file GO, which holds the race's start (a Unix time) START_AT: every worker
races for the same SECONDS however long it took to start.

``reader``: until START_AT + SECONDS, opens pinned repeatable-read snapshots (the public
reader, ``etl.snapshot`` as a context manager) of random epochs of EXPECTED_JSON (epoch ->
table -> rows), reads every table through delta-rs, holds the pin a little, reads again, and
compares with the rows recorded before any maintenance. Opening a snapshot may fail only
with EpochExpiredError (the pin lost the race); anything else, and any read that fails or
differs once the pin is held, is a failure.

``maintain``: until the end, runs the function behind ``etl maintain`` over and over
(expiry, compaction, vacuum, log upkeep), its policy clock moving
on from CLOCK_JSON's ``start`` by ``hours_per_second`` of wall time.

Each prints one JSON object.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from catalog import EpochExpiredError, load_catalog  # noqa: E402
from etl import snapshot  # noqa: E402

ORPHAN_AGE = timedelta(minutes=10)
"""Files no log entry mentions yet (a batch in flight: the engine writes during the race)
are safe only thanks to the orphan safety age; with none, vacuum deletes the files of a
commit that lands between its log replay and its listing of storage."""


def _rows(reader, table: str) -> list[list]:
    arrow = reader.arrow(table, columns=["id", "amount", "_epoch"])
    return sorted(map(list, zip(*(c.to_pylist() for c in arrow.columns), strict=True)))


def _start_at(go: str) -> float:
    """Say this process is ready, then wait for the race's start (see the module)."""
    Path(f"{go}.ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 600
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {go} after 600 s")
        time.sleep(0.01)
    start_at = float(Path(go).read_text())
    while time.time() < start_at:
        time.sleep(0.01)
    return start_at


def reader(url: str, warehouse: str, expected_json: str, go: str, seconds: str, seed: str):
    expected = json.loads(Path(expected_json).read_text())
    catalog = load_catalog(url or None, warehouse=warehouse)
    rng = random.Random(int(seed))
    epochs = sorted(expected)
    report: dict = {"ok": 0, "lost": 0, "failures": [], "pinned": [], "lost_epochs": []}
    deadline = _start_at(go) + float(seconds)
    while time.time() < deadline:
        epoch = rng.choice(epochs)
        try:
            snap = snapshot(catalog, sorted(expected[epoch]), as_of_epoch=int(epoch))
        except EpochExpiredError as exc:
            if f"epoch {epoch} " not in str(exc):
                report["failures"].append(f"epoch {epoch}: unclear error {exc}")
            report["lost"] += 1
            report["lost_epochs"].append(int(epoch))
            continue
        except Exception:  # a storage error or anything else: the bug this test hunts
            report["failures"].append(f"opening epoch {epoch}: {traceback.format_exc()}")
            continue
        try:
            with snap:
                for _ in range(2):
                    for table, rows in expected[epoch].items():
                        got = _rows(snap, table)
                        if got != rows:
                            report["failures"].append(
                                f"epoch {epoch} {table}: read {got}, expected {rows}"
                            )
                    time.sleep(rng.uniform(0.0, 0.3))
            report["ok"] += 1
            report["pinned"].append(int(epoch))
        except Exception:
            report["failures"].append(f"pinned epoch {epoch}: {traceback.format_exc()}")
    print(json.dumps(report))


def maintain(url: str, warehouse: str, clock_json: str, go: str, seconds: str):
    from etl.retention.maintain import maintain as run_maintenance

    clock = json.loads(Path(clock_json).read_text())
    catalog = load_catalog(url or None, warehouse=warehouse)
    start = datetime.fromisoformat(clock["start"])
    report: dict = {"runs": 0, "expired": [], "files_removed": 0, "compacted": 0, "errors": []}
    start_at = _start_at(go)
    deadline = start_at + float(seconds)
    while time.time() < deadline:
        now = start + timedelta(hours=(time.time() - start_at) * clock["hours_per_second"])
        try:
            result = run_maintenance(
                catalog, now=now, orphan_age=ORPHAN_AGE, min_files=2, lease_ttl_seconds=30
            )
        except Exception:
            report["errors"].append(traceback.format_exc())
            continue
        report["runs"] += 1
        report["expired"] += result.epochs_expired
        report["files_removed"] += result.files_removed
        report["compacted"] += sum(t.compacted_files for t in result.tables)
        report["errors"] += [s for t in result.tables for s in t.skipped if "vacuum" in s]
    print(json.dumps(report))


if __name__ == "__main__":
    {"reader": reader, "maintain": maintain}[sys.argv[1]](*sys.argv[2:])
