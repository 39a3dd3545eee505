"""Operating a pipeline unattended, through the real ``etl`` command (issue 12): failures
on record, blocked epochs and their resolution, fast takeover after a crash, SIGTERM, a
status that tells the truth, several pipelines in one warehouse.

Every Spark-using subprocess pays a JVM start-up: one warehouse is shared by the
block/resolve, failure and two-pipeline scenario; the crash scenario has its own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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
from etl.faults import FAULT_ENV
from tests.support.cli_runner import REPO, etl, start
from tests.support.faults.process import wait_stopped

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
    assert f"etl resolve orders 1 --accept --warehouse {warehouse}\n" in first.stderr
    report = status_json(warehouse, tmp_path)
    orders = next(t for t in report["tables"] if t["table"] == "orders")
    assert orders["pipeline"] == "shop" and orders["blocked_epoch"] == 1
    assert orders["resolve"].startswith("etl resolve orders 1 --accept|--skip|--quarantine ")
    assert "--pipeline FILE" in orders["resolve"]
    assert "expect_column_values_to_not_be_null" in orders["blocked"]
    lineage = [t["table"] for t in report["tables"]][:3]
    assert lineage == ["orders", "orders_quarantine", "big_orders"]

    # 2. Skip it, with the command the run printed: rolled back and sealed empty,
    # recorded; no Spark needed.
    (printed,) = [line for line in first.stderr.splitlines() if " --skip" in line]
    etl_word, *printed_args = shlex.split(printed)
    assert etl_word == "etl", printed
    skipped = etl(*printed_args, "--reason", "bad export", cwd=tmp_path)
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
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", result["epochs_opened"][0]["barrier_ts"])
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

    # The command the blocked run printed works as printed (issue 27).
    (printed,) = [line for line in first.stderr.splitlines() if "--quarantine" in line]
    etl_word, *printed_args = shlex.split(printed)
    assert etl_word == "etl", printed
    done = etl(*printed_args, "--reason", "null ids", cwd=tmp_path)
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
            assert time.monotonic() - killed_at < 300, "the next run sealed no epoch"
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


@pytest.mark.spark
def test_a_second_signal_stops_at_once_and_the_next_run_recovers_exactly_once(tmp_path):
    warehouse, incoming = tmp_path / "wh", tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "a.txt").write_text("apple\npear\napple\n")
    args = ("--warehouse", warehouse, "--param", f"input_dir={incoming}")
    # Frozen mid-epoch: etl1's merge is in word_counts' Delta log, not yet in the catalog.
    # A long lease: the next run gets in by taking over a dead owner's lease, not because
    # the lease expired while its Spark started (which takes long on a loaded machine).
    child = start(
        "run",
        WORDCOUNT,
        "--once",
        "--lease-ttl",
        "600",
        *args,
        cwd=tmp_path,
        env={FAULT_ENV: "pause:after_commit@etl1"},
    )
    assert wait_stopped(child.pid, timeout=300, poll=child.poll), child.communicate()[1]
    # Both signals wait while it is stopped; Python handles SIGINT's first, then SIGTERM's.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCONT):
        child.send_signal(signum)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, stderr
    assert "stopping (Ctrl-C): finishing" in stderr and "stopped at once (" in stderr
    assert "The next `etl run` recovers" in stderr and "Traceback" not in stderr
    with load_catalog(warehouse=warehouse) as catalog:
        # Nothing released: the leases are left for the next run to take over at once.
        assert catalog.get_lease("etl1") is not None
        assert catalog.get_lease("etl1").expires_at > datetime.now(UTC)
        assert catalog.latest_commit() is None

    again = etl("run", WORDCOUNT, "--once", *args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "took over job etl1 from " in again.stderr and "that process is gone" in again.stderr
    rows = etl(
        "sql",
        "SELECT c.word, c.cnt, n.words FROM word_counts c JOIN cnt_counts n USING (cnt) "
        "ORDER BY c.word",
        "--format",
        "json",
        "--consistency",
        "repeatable-read",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert rows.returncode == 0, rows.stderr
    assert json.loads(rows.stdout) == [
        {"word": "apple", "cnt": 2, "words": 1},
        {"word": "pear", "cnt": 1, "words": 1},
    ]
    words = etl(
        "sql",
        "SELECT count(*) AS n FROM words",
        "--format",
        "json",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert json.loads(words.stdout) == [{"n": 3}], words.stderr


SALES = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("sales")
pipeline.ingest("s_ingest", source=FileSource("s_drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="sales")
pipeline.sql("s_totals", output="sales_totals", inputs=["sales"], mode="overwrite",
             query="SELECT count(*) AS n, sum(amount) AS total FROM sales")
"""


@pytest.mark.spark
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_two_pipelines_run_concurrently_in_one_warehouse(tmp_path, backend, request):
    """Two `etl run --continuous` at the same time, one catalog: both make progress, and
    each one's status, COMMIT and time travel are its own."""
    warehouse, incoming, sdrops = tmp_path / "wh", tmp_path / "incoming", tmp_path / "sdrops"
    incoming.mkdir()
    sales = tmp_path / "sales.py"
    sales.write_text(SALES)
    where: tuple[str | Path, ...] = ("--warehouse", warehouse)
    if backend == "postgres":
        where = (*where, "--catalog", request.getfixturevalue("postgres_url"))
    words_sent, sales_sent = 0, 0
    fed_at = datetime.now(UTC)

    def feed(n: int) -> None:
        nonlocal words_sent, sales_sent, fed_at
        hidden = incoming / f".w{n}.tmp"
        hidden.write_text("apple\npear\n")
        os.replace(hidden, incoming / f"w{n}.txt")
        words_sent += 2
        drop(sdrops, f"s{n}.json", [{"id": n, "amount": 1.5}])
        sales_sent += 1
        fed_at = datetime.now(UTC)

    feed(0)
    runs = {
        "wordcount": start(
            "run",
            WORDCOUNT,
            "--continuous",
            "--epoch-interval",
            "1",
            *where,
            "--param",
            f"input_dir={incoming}",
            cwd=tmp_path,
        ),
        "sales": start(
            "run",
            sales,
            "--continuous",
            "--epoch-interval",
            "1",
            *where,
            "--param",
            f"dir={sdrops}",
            cwd=tmp_path,
        ),
    }
    url = where[-1] if backend == "postgres" else None
    deadline = time.monotonic() + 600
    with load_catalog(url, warehouse=warehouse if url is None else None) as catalog:

        def commits() -> dict[str, int]:
            return {
                name: (c.epoch if (c := catalog.latest_commit(pipeline=name)) else 0)
                for name in runs
            }

        while min(commits().values()) == 0:
            for name, child in runs.items():
                assert child.poll() is None, (name, child.communicate()[1])
            assert time.monotonic() < deadline
            time.sleep(0.5)
        # Both are running: each must seal three more epochs while the other runs too.
        start_commits, n = commits(), 1
        while any(commits()[p] < start_commits[p] + 3 for p in runs):
            for name, child in runs.items():
                assert child.poll() is None, (name, child.communicate()[1])
            assert time.monotonic() < deadline
            feed(n)
            n += 1
            time.sleep(1.0)

        def covers_the_last_files(pipeline: str) -> bool:
            """A stopped run opens no new epoch: the last files must be in a committed one
            (a loaded machine may not have opened it within the second after them)."""
            commit = catalog.latest_commit(pipeline=pipeline)
            return commit is not None and catalog.get_epoch(commit.epoch).barrier_ts > fed_at

        while not all(covers_the_last_files(p) for p in runs):
            for name, child in runs.items():
                assert child.poll() is None, (name, child.communicate()[1])
            assert time.monotonic() < deadline
            time.sleep(0.5)
    for child in runs.values():
        child.send_signal(signal.SIGTERM)
    for name, child in runs.items():
        _, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, (name, stderr)
        assert "database is locked" not in stderr and "failed:" not in stderr, (name, stderr)

    with load_catalog(url, warehouse=warehouse if url is None else None) as catalog:
        own = {
            "wordcount": {"words", "word_counts", "cnt_counts"},
            "sales": {"sales", "sales_totals"},
        }
        epochs = {p: [e.id for e in catalog.epochs(pipeline=p)] for p in runs}
        # The epochs interleave: the two runs opened them at the same time.
        assert set(epochs["sales"]) & set(range(epochs["wordcount"][0], epochs["wordcount"][-1]))
        # Each pipeline's first COMMIT (earlier epochs may be coalesced into it).
        first_commit = {p: next(e for e in epochs[p] if catalog.get_commit(e)) for p in runs}
        for p in runs:
            commit = catalog.latest_commit(pipeline=p)
            assert commit.epoch == epochs[p][-1] and set(commit.versions) == own[p]
            assert catalog.get_commit(epochs[p][-1]).pipeline == p
    report = etl("status", "--format", "json", *where, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    status = json.loads(report.stdout)
    for p in status["pipelines"]:
        assert p["max_lag_epochs"] == 0 and p["last_commit"] == epochs[p["pipeline"]][-1], p
    for table in status["tables"]:
        assert table["lag_epochs"] == 0, table

    def query(sql: str, *extra: str) -> list[dict]:
        result = etl("sql", sql, "--format", "json", *extra, *where, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    assert query("SELECT n, total FROM sales_totals") == [
        {"n": sales_sent, "total": 1.5 * sales_sent}
    ]
    assert query("SELECT sum(cnt) AS n FROM word_counts") == [{"n": words_sent}]
    # Time travel to each one's first COMMIT: a consistent cut of that pipeline alone.
    early = str(first_commit["sales"])
    (then,) = query("SELECT count(*) AS n FROM sales", "--as-of-epoch", early)
    assert query("SELECT n FROM sales_totals", "--as-of-epoch", early) == [then]
    assert then["n"] < sales_sent
    early = str(first_commit["wordcount"])
    (then,) = query("SELECT count(*) AS n FROM words", "--as-of-epoch", early)
    assert query("SELECT sum(cnt) AS n FROM word_counts", "--as-of-epoch", early) == [then]
    assert then["n"] < words_sent


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
    # The job and epoch once, as the recorded message says them, then attempt and time.
    assert "failed: job 'roll' failed at epoch 2: boom (attempt 1, " in table.stdout
    assert table.stdout.count("epoch 2:") == 1
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
    assert "param 'colour': unknown param 'colour'" in stray.stderr and "input_dir" in stray.stderr
    both = etl(*base, "--once", "--epoch-interval", "2", cwd=tmp_path, timeout=120)
    assert both.returncode == 2 and "--epoch-interval goes with --continuous" in both.stderr
