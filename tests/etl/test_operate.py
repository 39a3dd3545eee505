"""Operating a pipeline unattended, through the real ``etl`` command (issue 12): failures
on record, blocked epochs and their resolution, fast takeover after a crash, SIGTERM, a
status that tells the truth, several pipelines in one warehouse.

Every Spark-using subprocess pays a JVM start-up: one warehouse is shared by the
block/resolve, failure and two-pipeline scenario; the crash scenario has its own.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from catalog import (
    EpochState,
    JobFailureRecord,
    JobSpec,
    SealRequest,
    TableSpec,
    load_catalog,
)
from tests.support.cli_runner import REPO, etl, start

WORDCOUNT = REPO / "examples" / "wordcount" / "pipeline.py"

GATED = """
import great_expectations as gx
from etl import FileSource, Pipeline, param
from etl.quality import QualityGate

pipeline = Pipeline("shop")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="orders")
pipeline.sql("big", output="big_orders", inputs=["orders"],
             query="SELECT id, amount FROM orders WHERE amount > 100")
pipeline.expect(QualityGate("orders", [gx.expectations.ExpectColumnValuesToNotBeNull(column="id")],
                            policy="block"))
"""

BROKEN = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("broken")
pipeline.ingest("b_ingest", source=FileSource("b_drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="b_orders")
pipeline.sql("b_totals", output="b_totals", inputs=["b_orders"],
             query="SELECT sum(amuont) AS total FROM b_orders")
"""


def drop(directory: Path, name: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}.tmp"
    hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(hidden, directory / name)
    time.sleep(0.01)


def status_json(warehouse: Path, cwd: Path) -> dict:
    result = etl("status", "--format", "json", "--warehouse", warehouse, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def no_java(stderr: str) -> None:
    assert "JVM stacktrace" not in stderr and "\tat org.apache" not in stderr, stderr[-3000:]
    assert "at org.apache.spark" not in stderr, stderr[-3000:]


@pytest.mark.spark
def test_block_resolve_failures_and_two_pipelines_in_one_warehouse(tmp_path):
    warehouse = tmp_path / "wh"
    shop, broken = tmp_path / "shop.py", tmp_path / "broken.py"
    shop.write_text(GATED)
    broken.write_text(BROKEN)
    drops, bdrops = tmp_path / "drops", tmp_path / "bdrops"
    drop(bdrops, "b1.json", [{"id": 1, "amount": 5.0}])
    run_shop = ("run", shop, "--once", "--warehouse", warehouse, "--param", f"dir={drops}")

    # 1. A row with a null id: the gate blocks; exit 4, the message says how to resolve.
    drop(drops, "a.json", [{"id": 1, "amount": 150.0}, {"id": None, "amount": 200.0}])
    first = etl(*run_shop, cwd=tmp_path)
    assert first.returncode == 4, first.stderr
    assert "etl resolve orders 1 --accept|--skip|--quarantine" in first.stderr
    report = status_json(warehouse, tmp_path)
    orders = next(t for t in report["tables"] if t["table"] == "orders")
    assert orders["pipeline"] == "shop" and orders["blocked_epoch"] == 1
    assert orders["resolve"] == "etl resolve orders 1 --accept|--quarantine|--skip"
    assert "expect_column_values_to_not_be_null" in orders["blocked"]
    assert [t["table"] for t in report["tables"]][:2] == ["orders", "big_orders"]  # lineage

    # 2. Skip it: rolled back and sealed empty, recorded; no Spark needed.
    skipped = etl(
        "resolve",
        "orders",
        "1",
        "--skip",
        "--reason",
        "bad export",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert "skipped" in skipped.stdout and "SKIP" in skipped.stdout

    # 3. The other pipeline in the same warehouse: its SQL job fails. Exit 1, one line
    # naming job, epoch and cause, no Java stack; on record in status and epochs.
    bad = etl(
        "run", broken, "--once", "--warehouse", warehouse, "--param", f"dir={bdrops}", cwd=tmp_path
    )
    assert bad.returncode == 1, bad.stderr
    no_java(bad.stderr)
    failed_lines = [line for line in bad.stderr.splitlines() if line.startswith("failed:")]
    assert len(failed_lines) == 1 and "b_totals" in failed_lines[0]
    assert "epoch 2" in failed_lines[0] and "amuont" in failed_lines[0]

    # 4. Next shop run: a new blocked epoch, accepted this time; then downstream catches up.
    drop(drops, "b.json", [{"id": None, "amount": 500.0}, {"id": 2, "amount": 101.0}])
    second = etl(*run_shop, "--format", "json", cwd=tmp_path)
    assert second.returncode == 4, second.stderr
    result = json.loads(second.stdout)
    assert result["exit_code"] == 4 and result["pipeline"] == "shop"
    (blocked,) = result["blocked"]
    epoch = blocked["epoch"]
    assert blocked["table"] == "orders" and epoch == 3  # epoch 2 is the other pipeline's
    accepted = etl(
        "resolve",
        "orders",
        str(epoch),
        "--accept",
        "--reason",
        "known nulls",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert accepted.returncode == 0, accepted.stderr
    third = etl(*run_shop, cwd=tmp_path)
    assert third.returncode == 0, third.stderr

    with load_catalog(warehouse=warehouse) as catalog:
        actions = [(r.epoch, r.action.value) for r in catalog.resolutions("orders")]
        assert actions == [(1, "SKIP"), (3, "ACCEPT")]
        assert catalog.table_epoch("orders", 1).rows == 0
        assert catalog.table_epoch("big_orders", 1).state is EpochState.WRITTEN
        assert catalog.table_epoch("big_orders", 3).state is EpochState.WRITTEN
        # COMMIT per pipeline: the broken pipeline's failure does not hold shop back.
        assert catalog.latest_commit(pipeline="shop").epoch == 4
        assert catalog.latest_commit(pipeline="broken") is None
        (failure,) = catalog.failures(job="b_totals")
        assert failure.epoch == 2 and failure.attempt == 1
        assert failure.error_class == "AnalysisException"
    # Rows: epoch 1 was skipped (a recorded loss), epoch 3 accepted with its null id.
    rows = etl(
        "sql",
        "SELECT id FROM big_orders ORDER BY amount",
        "--format",
        "json",
        "--consistency",
        "repeatable-read",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert rows.returncode == 0, rows.stderr
    assert [r["id"] for r in json.loads(rows.stdout)] == [2, None]

    report = status_json(warehouse, tmp_path)
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["b_totals"]["last_failure"]["error_class"] == "AnalysisException"
    assert tables["b_totals"]["last_failure"]["epoch"] == 2
    assert tables["orders"]["blocked"] is None and tables["big_orders"]["lag_epochs"] == 0
    assert tables["big_orders"]["last_commit"] == 4
    pipelines = {p["pipeline"]: p for p in report["pipelines"]}
    assert pipelines["broken"]["failing_jobs"] == ["b_totals"]
    assert pipelines["shop"]["latest_epoch"] == 4 and pipelines["shop"]["max_lag_epochs"] == 0
    epochs = etl("epochs", "b_totals", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    (record,) = json.loads(epochs.stdout)
    assert record["state"] == "FAILED" and record["failures"][0]["error_class"] == (
        "AnalysisException"
    )
    # --as-of-epoch of one pipeline is unaffected by the other's epochs.
    past = etl(
        "sql",
        "SELECT count(*) AS n FROM orders",
        "--as-of-epoch",
        "3",
        "--format",
        "json",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert past.returncode == 0 and json.loads(past.stdout) == [{"n": 2}], past.stderr

    # Retiring the failing job unfreezes nothing of shop, and lets broken's COMMIT go on.
    retired = etl("retire", "job", "b_totals", "--warehouse", warehouse, cwd=tmp_path)
    assert retired.returncode == 0, retired.stderr
    with load_catalog(warehouse=warehouse) as catalog:
        assert catalog.get_table("b_totals").retired_at is not None
        assert catalog.failures(job="b_totals")  # history stays readable


STRICT = GATED.replace(
    'column="id")]',
    'column="id"), gx.expectations.ExpectTableRowCountToBeBetween(max_value=1)]',
)
"""The shop pipeline whose gate also has a table-level expectation epoch 1 fails."""


def sql_json(warehouse: Path, cwd: Path, query: str) -> list[dict]:
    result = etl("sql", query, "--format", "json", "--warehouse", warehouse, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.spark
def test_block_gate_resolved_by_quarantining_its_failing_rows(tmp_path):
    """A block gate's epoch, quarantined: failing rows to `orders_quarantine`, the rest
    sealed, downstream catches up; a table-level failure cannot be split (exit 2)."""
    warehouse, drops = tmp_path / "wh", tmp_path / "drops"
    shop, strict = tmp_path / "shop.py", tmp_path / "strict.py"
    shop.write_text(GATED)
    strict.write_text(STRICT)
    run_shop = ("run", shop, "--once", "--warehouse", warehouse, "--param", f"dir={drops}")
    drop(drops, "a.json", [{"id": 1, "amount": 150.0}, {"id": None, "amount": 200.0}])
    first = etl(*run_shop, cwd=tmp_path)
    assert first.returncode == 4, first.stderr
    with load_catalog(warehouse=warehouse) as catalog:
        assert catalog.get_job("ingest").side_outputs == ("orders_quarantine",)
        assert catalog.table_epoch("orders", 1).state is EpochState.PROCESSED
    resolve = ("resolve", "orders", "1", "--quarantine", "--warehouse", warehouse)

    # A gate whose table-level expectation fails: no split satisfies it; nothing changes.
    refused = etl(
        *resolve, "--pipeline", strict, "--param", f"dir={drops}", cwd=tmp_path, COLUMNS="200"
    )
    assert refused.returncode == 2, refused.stderr
    assert "expect_table_row_count_to_be_between" in refused.stderr
    assert "table-level" in refused.stderr and "--accept" in refused.stderr
    with load_catalog(warehouse=warehouse) as catalog:
        assert catalog.table_epoch("orders", 1).state is EpochState.PROCESSED
        assert catalog.resolutions("orders") == []

    done = etl(
        *resolve,
        "--pipeline",
        shop,
        "--param",
        f"dir={drops}",
        "--reason",
        "null ids",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "sealed without its 1 failing row(s)" in done.stdout and "QUARANTINE" in done.stdout
    no_java(done.stderr)
    again = etl(*run_shop, cwd=tmp_path)
    assert again.returncode == 0, again.stderr

    assert sql_json(warehouse, tmp_path, "SELECT id, amount FROM orders") == [
        {"id": 1, "amount": 150.0}
    ]
    (held,) = sql_json(
        warehouse,
        tmp_path,
        "SELECT id, amount, _failed_expectations, _epoch FROM orders_quarantine",
    )
    assert held["id"] is None and held["amount"] == 200.0 and held["_epoch"] == 1
    assert held["_failed_expectations"] == ['expect_column_values_to_not_be_null(column="id")']
    assert sql_json(warehouse, tmp_path, "SELECT id FROM big_orders") == [{"id": 1}]
    with load_catalog(warehouse=warehouse) as catalog:
        assert catalog.latest_commit(pipeline="shop").epoch == 2
        for table in ("orders", "orders_quarantine", "big_orders"):
            assert catalog.table_epoch(table, 1).state is EpochState.WRITTEN, table
        assert catalog.table_epoch("orders_quarantine", 1).rows == 1
    epochs = etl("epochs", "orders", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    first_epoch = json.loads(epochs.stdout)[0]
    assert first_epoch["state"] == "WRITTEN" and first_epoch["rows"] == 1
    assert first_epoch["resolution"]["action"] == "QUARANTINE"
    assert first_epoch["resolution"]["reason"] == "null ids"
    report = status_json(warehouse, tmp_path)
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["orders"]["blocked"] is None and tables["big_orders"]["lag_epochs"] == 0
    assert tables["orders_quarantine"]["lag_epochs"] == 0


@pytest.mark.spark
def test_kill_9_then_run_takes_over_at_once_and_sigterm_releases(tmp_path):
    warehouse, incoming = tmp_path / "wh", tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "a.txt").write_text("apple\npear\n")
    args = ("--warehouse", warehouse, "--param", f"input_dir={incoming}")
    # A long lease: only the dead-owner takeover lets the next run in before it expires.
    child = start(
        "run",
        WORDCOUNT,
        "--continuous",
        "--epoch-interval",
        "1",
        "--lease-ttl",
        "600",
        *args,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 300
    while True:
        assert child.poll() is None, child.stderr.read()
        if (warehouse / "_catalog.sqlite").exists():
            with load_catalog(warehouse=warehouse) as catalog:
                if catalog.latest_commit() is not None:
                    break
        assert time.monotonic() < deadline
        time.sleep(0.5)
    child.kill()  # kill -9: no lease is released
    child.wait()
    killed_at = time.monotonic()
    second = start("run", WORDCOUNT, "--continuous", "--epoch-interval", "1", *args, cwd=tmp_path)
    with load_catalog(warehouse=warehouse) as catalog:
        sealed_before = catalog.latest_commit().epoch
        while True:
            assert second.poll() is None, second.stderr.read()
            commit = catalog.latest_commit()
            if commit is not None and commit.epoch > sealed_before:
                break
            assert time.monotonic() - killed_at < 120
            time.sleep(0.2)
    took = time.monotonic() - killed_at
    print(f"kill -9 -> next run's first sealed epoch: {took:.1f} s")
    # SIGTERM: finishes the epochs left, exits cleanly, releases the leases.
    second.send_signal(signal.SIGTERM)
    _, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    assert "stopping (SIGTERM): finishing" in stderr and "Traceback" not in stderr
    # The dead run's lease was taken over at once, not waited for.
    assert "took over job ingest_words from " in stderr and "that process is gone" in stderr
    with load_catalog(warehouse=warehouse) as catalog:
        now = datetime.now(UTC)
        for job in catalog.list_jobs():
            lease = catalog.get_lease(job.name)
            assert lease is None or lease.expires_at <= now + timedelta(seconds=1)
    assert took < 300  # mostly Spark start-up, which depends on the machine's load


def test_status_json_against_a_scripted_history(tmp_path):
    """A pipeline stopped a day ago shows its real age; every field typed."""
    warehouse = tmp_path / "wh"
    day_ago = datetime.now(UTC) - timedelta(days=1)
    with load_catalog(warehouse=warehouse) as catalog:
        catalog.register_table(TableSpec("raw", str(warehouse / "raw"), kind="root", pipeline="p"))
        catalog.register_table(TableSpec("agg", str(warehouse / "agg"), pipeline="p"))
        catalog.register_job(JobSpec("load", "raw", source="src", pipeline="p"))
        catalog.register_job(JobSpec("roll", "agg", inputs=("raw",), pipeline="p"))
        # A job the pipeline file no longer declares: it never ran since.
        catalog.register_table(TableSpec("old_t", str(warehouse / "old_t"), pipeline="p"))
        catalog.register_job(JobSpec("old", "old_t", inputs=("raw",), pipeline="p"))
        e1 = catalog.open_epoch(day_ago, pipeline="p")
        e2 = catalog.open_epoch(day_ago + timedelta(seconds=10), pipeline="p")
        load = catalog.acquire_lease("load", "host:1:1:x", ttl_seconds=60)
        roll = catalog.acquire_lease("roll", "host:1:1:x", ttl_seconds=60)
        for epoch, version in ((e1.id, 0), (e2.id, 1)):
            catalog.record_processed(
                "raw",
                epoch,
                delta_version=version,
                job="load",
                attempt=1,
                generation=load.generation,
                rows=3,
            )
            catalog.seal("load", load.generation, [SealRequest("raw", epoch, version, rows=3)])
        catalog.record_processed(
            "agg", e1.id, delta_version=0, job="roll", attempt=1, generation=roll.generation, rows=1
        )
        catalog.seal("roll", roll.generation, [SealRequest("agg", e1.id, 0, rows=1)])
        catalog.record_failure(
            JobFailureRecord(
                job="roll",
                error_class="AnalysisException",
                message="job 'roll' failed at epoch 2: boom",
                owner="host:1:1:x",
                epoch=e2.id,
                attempt=1,
            )
        )
        catalog.release_lease(load)
        catalog.release_lease(roll)
    report = status_json(warehouse, tmp_path)
    assert datetime.fromisoformat(report["generated_at"]).tzinfo is not None
    (pipeline,) = report["pipelines"]
    assert pipeline["pipeline"] == "p" and pipeline["latest_epoch"] == e2.id
    # The job no file declares holds the pipeline's COMMIT back until it is retired.
    assert pipeline["last_commit"] is None and pipeline["running"] is False
    assert pipeline["failing_jobs"] == ["roll"]
    assert 86000 < pipeline["latest_epoch_age_seconds"] < 87000
    raw, agg, old = report["tables"]  # lineage order
    assert (raw["table"], agg["table"], old["table"]) == ("raw", "agg", "old_t")
    assert old["stale_job"] == "etl retire job old" and agg["stale_job"] is None
    assert raw["lag_epochs"] == 0 and agg["lag_epochs"] == 1
    assert isinstance(raw["lag_seconds"], float) and 86000 < raw["lag_seconds"] < 87000
    assert 86000 < agg["freshness_seconds"] < 87000 and agg["freshness_epoch"] == e1.id
    assert raw["running"] is False and raw["lease_owner"] is None
    failure = agg["last_failure"]
    assert failure["epoch"] == e2.id and failure["error_class"] == "AnalysisException"
    assert datetime.fromisoformat(failure["failed_at"]).tzinfo is not None
    assert datetime.fromisoformat(raw["written_barrier_ts"]).tzinfo is not None
    table = etl("status", "--warehouse", warehouse, cwd=tmp_path, COLUMNS="100")
    assert table.returncode == 0, table.stderr
    assert "pipeline p: 3 tables, not running" in table.stdout
    assert "failed: job roll epoch 2 attempt 1" in table.stdout
    assert "etl retire job old" in table.stdout
    retired = etl("retire", "job", "old", "--warehouse", warehouse, cwd=tmp_path)
    assert retired.returncode == 0, retired.stderr
    assert "retired job old and its table(s) old_t" in retired.stdout


def test_run_refuses_bad_options_before_spark_starts(tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    base = ("run", WORDCOUNT, "--warehouse", tmp_path / "wh", "--param", f"input_dir={incoming}")
    stray = etl(*base, "--once", "--param", "colour=blue", cwd=tmp_path, timeout=120)
    assert stray.returncode == 2
    assert "--param colour: " in stray.stderr and "input_dir" in stray.stderr
    both = etl(*base, "--once", "--epoch-interval", "2", cwd=tmp_path, timeout=120)
    assert both.returncode == 2 and "--epoch-interval goes with --continuous" in both.stderr
