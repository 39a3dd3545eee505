"""What a command imports (issue 28, item 5): ``etl --version`` and ``etl --help`` import
no catalog and no engine, ``etl snapshot`` of named tables no sqlglot, DuckDB, Arrow
(pyarrow, numpy), delta-rs or Rich (its output is JSON), ``etl sql`` on DuckDB
(of a local warehouse) no Arrow or delta-rs, and none imports PySpark, Great
Expectations, Kafka, pandas, Polars, pydantic (typer 0.29 coerced every option through
it), (on a SQLite catalog) SQLAlchemy, the PostgreSQL driver or the Delta write path. Pinned by the modules a real run of the command leaves in ``sys.modules``, not
by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from tests.support.cli_runner import REPO

WATCHED = (
    "catalog",
    "deltalake",
    "duckdb",
    "great_expectations",
    "kafka",
    "numpy",
    "pandas",
    "polars",
    "psycopg",
    "pyarrow",
    "pydantic",
    "pyspark",
    "rich.console",
    "rich.table",
    "sqlalchemy",
    "sqlglot",
    "etl.delta.commit",
    "etl.delta.files",
    "etl.delta.maintenance",
    "etl.delta.merge",
)
"""Top-level packages, Rich's tables, and the modules of our Delta write path."""
NEVER_FOR_READS = {
    "great_expectations",
    "kafka",
    "pandas",
    "polars",
    "psycopg",
    "pydantic",
    "pyspark",
    "sqlalchemy",
    "etl.delta.commit",
    "etl.delta.files",
    "etl.delta.maintenance",
    "etl.delta.merge",
}
"""What a read through DuckDB on a SQLite catalog never needs: Spark, the quality gates,
Kafka, the DataFrame libraries, pydantic, SQLAlchemy (catalog.sqlite_reads reads the
file), the PostgreSQL driver, our Delta write path."""

RUN_AND_LIST = """
import json, sys
{prelude}
from etl.cli.app import main
sys.argv = ["etl", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
watched = set(json.loads(sys.stdin.read()))
print("IMPORTED=" + json.dumps(sorted({m.split(".")[0] for m in sys.modules} & watched
                                      | set(sys.modules) & watched)))
"""


def imported_by(*args: str, cwd, env: dict[str, str] | None = None) -> set[str]:
    """The watched top-level packages a run of ``etl ARGS`` imported (it must succeed)."""
    return run_listing(*args, cwd=cwd, env=env)[1]


def run_listing(
    *args: str, cwd, env: dict[str, str] | None = None, prelude: str = ""
) -> tuple[str, set[str]]:
    """What a run of ``etl ARGS`` printed, and the watched packages it imported (with
    ``prelude`` run first in the command's process)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST.replace("{prelude}", prelude), *args],
        input=json.dumps(WATCHED),
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("IMPORTED=")]
    printed = "\n".join(line for line in lines if not line.startswith("IMPORTED="))
    return printed, set(json.loads(line.removeprefix("IMPORTED=")))


def test_version_and_help_import_no_catalog_and_no_engine():
    assert imported_by("--version", cwd=REPO) == set()
    assert imported_by("--help", cwd=REPO) == {"rich.console", "rich.table"}  # the help's panels


@pytest.fixture
def warehouse(tmp_path):
    """A warehouse with one sealed table, written without Spark."""
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    location = str(warehouse / "numbers")
    catalog.register_table(TableSpec("numbers", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="numbers", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    write_deltalake(location, pa.table({"n": [1, 2, 3]}))
    catalog.seal("ingest", lease.generation, [SealRequest("numbers", epoch, 0, rows=3)])
    catalog.close()
    return warehouse


def test_a_snapshot_of_named_tables_imports_no_sqlglot_no_arrow_and_no_engine(warehouse, tmp_path):
    """The cut of named tables is the catalog's: it needs no Delta log, no file system."""
    imported = imported_by(
        "snapshot", "numbers", "--warehouse", str(warehouse), "--format", "json", cwd=tmp_path
    )
    assert imported.isdisjoint({"sqlglot", "duckdb", "pyarrow", "numpy", "deltalake"})
    assert imported.isdisjoint({"rich.console", "rich.table"})  # JSON and plain lines
    assert imported.isdisjoint(NEVER_FOR_READS)
    assert "catalog" in imported  # the command did resolve the cut


def test_sql_on_duckdb_imports_no_spark_no_quality_gates_and_no_dataframes(warehouse, tmp_path):
    query = "SELECT sum(n) AS total FROM numbers"
    imported = imported_by(
        "sql", query, "--warehouse", str(warehouse), "--consistency", "read-committed",
        "--format", "csv", cwd=tmp_path,
    )  # fmt: skip
    assert imported.isdisjoint(NEVER_FOR_READS)
    assert imported.isdisjoint({"rich.console", "rich.table"})  # CSV and plain lines
    # DuckDB's rows are printed as DuckDB gives them, the Delta log read as files.
    assert imported.isdisjoint({"pyarrow", "numpy", "deltalake"})
    assert "duckdb" in imported  # the command did read through DuckDB


SUM = "SELECT sum(n) AS total, count(*) FROM numbers"
AVERAGE = "SELECT avg(CAST(n AS DECIMAL(10, 2))), * FROM numbers GROUP BY n ORDER BY n"


def _sql(query: str, warehouse) -> tuple[str, ...]:
    return (
        "sql", query, "--warehouse", str(warehouse), "--consistency", "read-committed",
        "--format", "csv",
    )  # fmt: skip


@pytest.mark.parametrize("query", [SUM, AVERAGE])
def test_a_query_run_again_needs_no_sqlglot_and_prints_the_same(warehouse, tmp_path, query):
    """The first run translates the query with sqlglot and keeps the translation; the same
    query again reads it back (etl/reader/translation.py); a cache turned off always
    translates. Every run prints the same rows under the same names.

    The command's own process imports sqlglot only for a query whose DuckDB text depends
    on its tables' types (an average): a first translation is made by a child
    (``translate_ahead``) while the command opens DuckDB."""
    cached = {"DELTA_BARRIER_CACHE_DIR": str(tmp_path / "cache")}
    args = _sql(query, warehouse)
    first, imported_first = run_listing(*args, cwd=tmp_path, env=cached)
    again, imported_again = run_listing(*args, cwd=tmp_path, env=cached)
    off, imported_off = run_listing(*args, cwd=tmp_path, env={"DELTA_BARRIER_CACHE_DIR": ""})
    typed = query == AVERAGE
    assert ("sqlglot" in imported_first) is typed
    assert ("sqlglot" in imported_off) is typed
    assert "sqlglot" not in imported_again
    assert first == again == off
    assert "count(1)" in first or "avg(" in first  # Spark's names, not DuckDB's


CHILD_DIES = """
import os
_fork = os.fork
def _dying_fork():
    pid = _fork()
    if pid == 0:
        os._exit(1)
    return pid
os.fork = _dying_fork
"""
"""A child translating ahead that dies before it gives anything."""

NO_FORK = """
import errno, os
def _no_fork():
    raise OSError(errno.EAGAIN, "no process to spare")
os.fork = _no_fork
"""
"""A process that cannot start a child (the system has no process to spare)."""

FORK_FAILS_TEST = """
import os
def _not_asked():
    raise AssertionError("a child was started")
os.fork = _not_asked
"""
"""A process in which starting a child fails the command."""


def test_without_the_childs_translation_the_command_translates_it_itself(warehouse, tmp_path):
    args = _sql(SUM, warehouse)
    ahead, imported_ahead = run_listing(*args, cwd=tmp_path, env={"DELTA_BARRIER_CACHE_DIR": ""})
    died, imported_died = run_listing(
        *args, cwd=tmp_path, env={"DELTA_BARRIER_CACHE_DIR": ""}, prelude=CHILD_DIES
    )
    assert "sqlglot" not in imported_ahead and "sqlglot" in imported_died
    assert died == ahead and "count(1)" in died


def test_a_kept_translation_forks_no_child(warehouse, tmp_path):
    cached = {"DELTA_BARRIER_CACHE_DIR": str(tmp_path / "cache")}
    args = _sql(SUM, warehouse)
    first, _ = run_listing(*args, cwd=tmp_path, env=cached)
    again, imported = run_listing(*args, cwd=tmp_path, env=cached, prelude=FORK_FAILS_TEST)
    assert again == first and "sqlglot" not in imported


def test_a_process_that_cannot_start_a_child_translates_the_query_itself(warehouse, tmp_path):
    args = _sql(SUM, warehouse)
    off = {"DELTA_BARRIER_CACHE_DIR": ""}
    ahead, _ = run_listing(*args, cwd=tmp_path, env=off)
    alone, imported = run_listing(*args, cwd=tmp_path, env=off, prelude=NO_FORK)
    assert alone == ahead and "sqlglot" in imported


def test_a_query_that_does_not_parse_is_reported_as_without_a_child(warehouse, tmp_path):
    """The child gives nothing for a query that does not parse: the command translates it
    and reports where it fails, before it opens anything."""
    env = {**os.environ, "DELTA_BARRIER_CACHE_DIR": ""}
    command = [sys.executable, "-m", "etl.cli", *_sql("SELECT n FROM numbers WHERE", warehouse)]
    ahead = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    alone = subprocess.run(
        [sys.executable, "-c", f"{NO_FORK}\nfrom etl.cli.app import main\nmain()", *command[3:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ahead.returncode == alone.returncode != 0
    assert ahead.stderr == alone.stderr
    assert "parse" in ahead.stderr and "Traceback" not in ahead.stderr
