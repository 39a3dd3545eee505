"""Issue 22: fencing holds for the commit that creates a table, through the real CLI.

A runner (A) pauses just before the first commit to a table that does not exist yet (the
output, or the gate's quarantine table created at its first audit). Its lease lapses and
a second runner (B) takes over: there is no table to claim. B pauses just before its own
first commit. Then either A wakes first and creates the table late, or B does. Whatever
the order, the sealed epoch holds every input row once, the zombie changes nothing after
the new owner's create, and the catalog's numbers for every sealed epoch are the table's.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from catalog import EpochState, load_catalog
from etl.delta import epoch_rows, read_arrow, table_version
from etl.faults import FAULT_ENV
from tests.support.cli_runner import start
from tests.support.faults.process import wait_stopped

pytestmark = [pytest.mark.spark, pytest.mark.recovery, pytest.mark.slow]

PIPELINE = """
import great_expectations as gx
from etl import FileSource, Pipeline, param
from etl.quality import QualityGate

pipeline = Pipeline("fenced")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="orders")
pipeline.expect(QualityGate("orders", [gx.expectations.ExpectColumnValuesToNotBeNull(column="id")],
                            policy="warn"))
"""
LEASE_TTL = 2.0
# The job's commits in epoch 1 (the first run): the output's create, then the quarantine
# table's (a warn gate's quarantine table is created empty at the first audit).
FIRST_COMMIT = {"output": "before_commit@ingest:1#1", "side output": "before_commit@ingest:1#2"}
TABLES = ("orders", "orders_quarantine")


def _run(tmp_path: Path, where: tuple, fault: str):
    return start(
        "run",
        tmp_path / "pipeline.py",
        "--once",
        "--lease-ttl",
        str(LEASE_TTL),
        *where,
        cwd=tmp_path,
        env={FAULT_ENV: f"pause:{fault}"},
    )


class FrozenHolder(Exception):
    """The frozen zombie was inside a SQLite catalog transaction (its lease keeper renewing)
    when it stopped: a SQLite file stays locked until such a process wakes or dies (README,
    "On a Spark cluster"), so the new owner cannot start. Not what this test is about."""


def _paused(proc) -> None:
    if not wait_stopped(proc.pid, timeout=300, poll=proc.poll):
        _, err = proc.communicate(timeout=60)
        if "database is locked" in err:
            raise FrozenHolder(err)
        pytest.fail(f"the run never reached its pause (exit {proc.returncode}): {err[-2000:]}")


def _wake(proc) -> tuple[int, str]:
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _fingerprint(catalog, warehouse: Path) -> dict:
    return {
        t: (
            table_version(str(warehouse / t)),
            [(s.epoch, s.state.value, s.delta_version, s.rows) for s in catalog.table_epochs(t)],
        )
        for t in TABLES
    }


@pytest.mark.parametrize(
    ("table", "backend", "first"),
    [
        ("output", "sqlite", "zombie"),
        ("side output", "postgres", "zombie"),
        ("output", "postgres", "owner"),
        ("side output", "sqlite", "owner"),
    ],
)
def test_a_superseded_runner_never_lands_a_create_under_the_new_owner(
    tmp_path, request, table, backend, first
):
    catalog_url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    for attempt in range(3):
        try:
            return _race(tmp_path / f"try{attempt}", catalog_url, table, first)
        except FrozenHolder:
            if catalog_url is not None:
                raise
    pytest.fail("the frozen zombie held the SQLite catalog's lock three times in a row")


def _race(tmp_path: Path, catalog_url: str | None, table: str, first: str) -> None:
    tmp_path.mkdir()
    warehouse, drops = tmp_path / "wh", tmp_path / "drops"
    drops.mkdir()
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    (drops / "1.json").write_text(
        "\n".join(json.dumps({"id": i, "amount": 10.0 * i}) for i in (1, 2, 3)) + "\n"
    )
    where: tuple = ("--warehouse", warehouse, "--param", f"dir={drops}")
    if catalog_url:
        where = (*where, "--catalog", catalog_url)

    zombie = _run(tmp_path, where, FIRST_COMMIT[table])
    owner = None
    try:
        _paused(zombie)
        time.sleep(LEASE_TTL + 1.0)  # the paused run's lease lapses (it is alive: no takeover)
        # The new owner recovers (nothing to claim where there is no table yet) and pauses
        # before its own first commit: the output's create, or (the output's epoch 1 being
        # complete) recovery sealing it, which creates the quarantine table.
        owner = _run(tmp_path, where, "before_commit@ingest:1#1")
        _paused(owner)
        with load_catalog(catalog_url, warehouse=warehouse) as catalog:
            if first == "zombie":
                code, err = _wake(zombie)
                assert code != 0, err  # its catalog writes are refused: it stops
                code, err = _wake(owner)
                assert code == 0, err[-3000:]
            else:
                code, err = _wake(owner)
                assert code == 0, err[-3000:]
                before = _fingerprint(catalog, warehouse)
                code, err = _wake(zombie)
                assert code != 0, err
                assert "Traceback" not in err, err[-3000:]
                assert _fingerprint(catalog, warehouse) == before  # it changed nothing

            location = str(warehouse / "orders")
            assert catalog.table_epoch("orders", 1).state is EpochState.WRITTEN
            assert catalog.get_commit(1) is not None
            sealed = catalog.latest_written(["orders"])["orders"]  # the new owner's run: epoch 2
            rows = read_arrow(location, version=sealed.delta_version).to_pylist()
            assert sorted(r["id"] for r in rows) == [1, 2, 3], rows  # once each, not twice
            # Every number the catalog shows for a sealed epoch is the table's.
            for name in TABLES:
                for state in catalog.table_epochs(name):
                    if state.state is EpochState.WRITTEN and state.delta_version is not None:
                        counted = epoch_rows(
                            str(warehouse / name), version=state.delta_version, epoch=state.epoch
                        )
                        assert state.rows == counted, (name, state)
    finally:
        for proc in (zombie, owner):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)
