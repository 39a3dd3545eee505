"""A new user's first day (issue 27): the conventions and messages the README promises,
checked cheaply (no Spark)."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
import typer
from deltalake import write_deltalake
from rich.console import Console

from catalog import (
    CatalogUnavailableError,
    JobFailureRecord,
    JobSpec,
    SealRequest,
    TableSpec,
    load_catalog,
)
from etl import Retention
from etl.cli import app, progress
from etl.cli.app import configure_logging, hoist_global_options
from etl.cli.render import print_query
from etl.reader import QueryRows, parse_query
from etl.retention.maintain import maintain
from tests.support.cli_runner import REPO, etl_here


def test_global_options_are_taken_after_any_command():
    command = typer.main.get_command(app)
    hoist = hoist_global_options
    assert hoist(command, ["status", "-v"]) == ["-v", "status"]
    assert hoist(command, ["tag", "list", "-vv", "--format", "json"]) == [
        "-vv",
        "tag",
        "list",
        "--format",
        "json",
    ]
    assert hoist(command, ["epochs", "t", "--log-level", "debug", "--spark-ui"]) == [
        "--log-level",
        "debug",
        "--spark-ui",
        "epochs",
        "t",
    ]
    assert hoist(command, ["-v", "status"]) == ["-v", "status"]
    # etl run has a -v of its own; after "--" nothing is an option; unknown commands pass
    assert hoist(command, ["run", "p.py", "-v"]) == ["run", "p.py", "-v"]
    assert hoist(command, ["sql", "--", "-v"]) == ["sql", "--", "-v"]
    assert hoist(command, ["nosuch", "-v"]) == ["nosuch", "-v"]


def _sealed_history(tmp_path, epochs: int):
    """Table ``facts`` written by job ``ingest`` with ``epochs`` sealed epochs (catalog only)."""
    warehouse = tmp_path / "warehouse"
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", str(warehouse / "facts"), kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(epochs):
        epoch = catalog.open_epoch().id
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    return warehouse, catalog


def test_epochs_last_counts_failed_epochs_and_shows_a_resolutions_reason(tmp_path):
    warehouse, catalog = _sealed_history(tmp_path, 3)
    failed = catalog.open_epoch().id
    catalog.record_failure(
        JobFailureRecord(
            job="ingest",
            error_class="SourceError",
            message=f"job 'ingest' failed at epoch {failed}: SourceError: source 'feed': gone",
            owner="t",
            epoch=failed,
        )
    )
    catalog.record_resolution("facts", 2, action="ACCEPT", actor="ann", reason="known outlier")
    catalog.close()
    wh = ("--warehouse", warehouse)

    shown = etl_here("epochs", "facts", "--last", "2", "--format", "json", *wh, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    records = json.loads(shown.stdout)
    assert [(r["epoch"], r["state"]) for r in records] == [(3, "WRITTEN"), (failed, "FAILED")]
    assert all(r["barrier_ts"] for r in records)  # a failed epoch's barrier too
    table = etl_here("epochs", "facts", "--last", "3", *wh, cwd=tmp_path, COLUMNS="300")
    assert table.returncode == 0, table.stderr
    assert "ACCEPT by ann: known outlier" in table.stdout, table.stdout
    assert table.stdout.count("SourceError") == 1, table.stdout  # said once


def test_unnamed_columns_are_named_as_spark_names_them():
    query = parse_query(
        "SELECT count(*), max(c.word), c.cnt * 2 + 1, upper(word) AS up, WORD, '-', "
        "cnt IS NULL, sum(a + b) FROM word_counts c"
    )
    assert query.column_names(["?"] * 8) == [
        "count(1)",
        "max(word)",
        "((cnt * 2) + 1)",
        "up",
        "WORD",
        "-",
        "(cnt IS NULL)",
        "sum((a + b))",
    ]
    # star columns keep the engine's names; what follows a star is found from the end
    starred = parse_query("SELECT count(*), *, cnt + 1 FROM t")
    assert starred.column_names(["c", "word", "cnt", "x"]) == [
        "count(1)",
        "word",
        "cnt",
        "(cnt + 1)",
    ]
    union = parse_query("SELECT count(*) FROM a UNION ALL SELECT 1 FROM b")
    assert union.column_names(["count_star()"]) == ["count(1)"]


def test_a_sql_null_is_not_shown_as_a_string_could_be(capsys):
    result = QueryRows(("n",), ((None,), ("-",)))
    print_query(result, "table")
    shown = capsys.readouterr().out
    assert "NULL" in shown and "-" in shown
    print_query(result, "csv")
    assert capsys.readouterr().out.splitlines() == ["n", '""', "-"]


def test_catalog_messages_fit_the_catalog(tmp_path):
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(CatalogUnavailableError) as raised:
        load_catalog(f"sqlite:///{tmp_path / 'dir.sqlite'}", create=False)
    assert "SQLite file" in str(raised.value) and "server" not in str(raised.value)
    warehouse, catalog = _sealed_history(tmp_path, 1)
    catalog.close()
    upgraded = etl_here("catalog", "upgrade", "--warehouse", warehouse, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "already at version" in upgraded.stdout and "->" not in upgraded.stdout


def test_status_says_a_dead_runs_jobs_are_taken_over_at_once(tmp_path):
    warehouse, catalog = _sealed_history(tmp_path, 1)
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names no process
    catalog.release_lease(catalog.get_lease("ingest"))
    catalog.acquire_lease("ingest", f"{socket.gethostname()}:{gone.pid}:-:x", ttl_seconds=600)
    catalog.close()
    shown = etl_here("status", "--warehouse", warehouse, cwd=tmp_path, COLUMNS="300")
    assert shown.returncode == 0, shown.stderr
    assert "dead owner" in shown.stdout
    assert "the next `etl run` or `etl recover` takes it over at once" in shown.stdout


def test_the_tour_leaves_nothing_untracked_and_the_docs_keep_results():
    tour_outputs = [
        "incoming/a.txt",
        "demo-warehouse/_catalog.sqlite",
        "cut.json",
        "cut.sql",
        "warehouse/x",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", *tour_outputs], cwd=REPO, capture_output=True, text=True
    )
    assert ignored.stdout.split() == tour_outputs
    readme = (REPO / "README.md").read_text()
    assert "jupyter execute --inplace notebooks/explore.ipynb" in readme
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert isinstance(project["license"], str)  # SPDX: setuptools warns about a table


def test_snapshot_as_a_duckdb_script_reads_the_cut_offline(tmp_path):
    warehouse = tmp_path / "warehouse"
    location = warehouse / "facts"
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", str(location), kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(3):
        epoch = catalog.open_epoch().id
        write_deltalake(location, pa.table({"id": [epoch]}), mode="append")
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    catalog.close()
    made = etl_here(
        "snapshot", "facts", "--as-of-epoch", "2", "--format", "duckdb",
        "--warehouse", warehouse, cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "INSTALL" not in made.stdout  # nothing to download
    # another process, knowing nothing of Delta Barrier, with no network extension cache
    read = subprocess.run(
        [sys.executable, "-c", READ_SCRIPT, made.stdout],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["1", "2"]


READ_SCRIPT = """
import sys, duckdb
con = duckdb.connect()
con.execute(sys.argv[1])
for (value,) in con.sql("SELECT id FROM facts ORDER BY id").fetchall():
    print(value)
"""


def test_maintain_dry_run_says_what_the_run_does_and_what_it_holds_back(tmp_path):
    """Expired epochs, a tag, a young orphan, a killed write's temporary files and log
    entries within their grace: the dry run reports exactly what the run then does."""
    warehouse = tmp_path / "warehouse"
    location = warehouse / "facts"
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.set_retention_policy(None, Retention(every_epoch_for="1h").to_json())
    catalog.register_table(TableSpec("facts", str(location), kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(12):
        epoch = catalog.open_epoch().id
        write_deltalake(location, pa.table({"id": [epoch]}), mode="overwrite")
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    catalog.release_lease(lease)
    catalog.create_tag("keep-me", epoch=3, versions={"facts": 2}, pipeline="default")
    (location / "part-crashed.parquet").write_bytes(b"x")  # a batch's file, not committed
    (location / f".deletion_vector_{'0' * 36}.bin.77.tmp").write_bytes(b"x")  # a killed DV write
    later = datetime.now(UTC) + timedelta(hours=10)

    def run(dry_run: bool):
        return maintain(
            catalog, dry_run=dry_run, now=later, orphan_age=timedelta(hours=1), compaction=False
        )

    dry, done = run(True), run(False)
    assert dry.epochs_expired == done.epochs_expired == [e for e in range(1, 12) if e != 3]
    assert dry.epochs_held == done.epochs_held == {3: "held by tag 'keep-me'"}
    assert (dry.files_removed, dry.log_entries_removed) == (
        done.files_removed,
        done.log_entries_removed,
    )
    assert dry.held_back == done.held_back, (dry.held_back, done.held_back)
    held = "\n".join(done.held_back)
    assert "1 file(s) no kept cut needs, younger than --orphan-age (1 h)" in held
    assert "1 temporary file(s) of a write, younger than --orphan-age (1 h)" in held
    assert "log entries no kept cut needs, until a checkpoint" in held and "5 min" in held
    # the killed deletion-vector write goes once it is older than --orphan-age
    old = time.time() - 7200
    for leftover in location.glob(".deletion_vector_*.tmp"):
        os.utime(leftover, (old, old))
    assert run(False).tables[0].orphans_removed == 1
    assert not list(location.glob(".deletion_vector_*.tmp"))
    catalog.close()


def test_libraries_log_nothing_below_warning_whatever_their_own_levels(capsys):
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO")
        chatty = logging.getLogger("great_expectations.data_context.types.base")
        chatty.setLevel(logging.INFO)  # as Great Expectations does
        chatty.info("Created temporary directory '/tmp/x' for ephemeral docs site")
        chatty.warning("a warning shows")
        logging.getLogger("etl.mine").info("ours shows")
        shown = capsys.readouterr().err
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert "Created temporary directory" not in shown
    assert "a warning shows" in shown and "ours shows" in shown


def test_the_progress_display_keeps_each_job_on_one_line(monkeypatch):
    console = Console(file=io.StringIO(), width=30, force_terminal=True)
    monkeypatch.setattr(progress, "err", console)
    with progress.BatchProgress(["a_job_with_a_long_name", "b"]) as shown:
        assert shown._display is not None
        lines = console.render_lines(shown._display.get_renderable(), console.options)
    assert len(lines) == 2  # a wrapped row leaves stale frames behind (tmux)
