"""Consistent SQL reads: DuckDB against Spark, and ``snap.duckdb()`` in a warm process.

Builds the word-count chain (two small epochs) in a temporary warehouse with ``etl run``,
then measures:

- ``etl sql`` of a three-table repeatable-read join, whole-command wall time (process
  start to exit), ``--engine duckdb`` against ``--engine spark`` (RUNS each, median);
  targets: DuckDB under 2 s, at least 10x faster than Spark;
- ``etl sql --engine duckdb`` against the floor: a plain Python + DuckDB script reading
  the same cut (``etl snapshot --format json``, written once to a file) and running the
  query (COMMAND_RUNS rounds of every command, median, wall and CPU); target: at most 2x
  (issue 28). Twice: the query run again (its translation kept from the first run: no
  sqlglot), and the query run for the first time (an empty cache of translations each
  run);
- the library floor: the same script importing first the libraries ``etl sql`` uses
  besides DuckDB (sqlglot and typer; on a SQLite catalog no SQLAlchemy, and no Rich for
  CSV) and translating the query with sqlglot (Spark SQL to DuckDB's dialect); CPU of
  ``etl sql`` over it is what the project's own code costs, its CPU over the floor's
  what those libraries cost;
- ``etl snapshot`` of the three tables (``--format json``), CPU;
- ``etl --version`` alone (wall and CPU): what importing the command costs;
- the same query through ``snapshot(...)`` + ``snap.duckdb()`` in a warm process:
  resolution plus read, median of WARM runs; target under 50 ms.

Run: ``python -m bench sql``. Results also go to ``bench/results/sql.json``.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import load_average

REPO = Path(__file__).resolve().parents[1]
QUERY = (
    "SELECT w.word, c.cnt, n.words FROM words w JOIN word_counts c USING (word) "
    "JOIN cnt_counts n USING (cnt)"
)
TABLES = ("words", "word_counts", "cnt_counts")
RUNS = 3
"""Runs of each command that takes seconds (Spark's)."""
COMMAND_RUNS = 7
"""Runs of each sub-second command and of the floors, in rounds."""
WARM = 50

FLOOR = """
import json, sys
import duckdb
cut = json.load(open(sys.argv[1]))
db = duckdb.connect(config={"allow_unsigned_extensions": "true"})
db.execute(f"LOAD '{sys.argv[2]}'")
db.execute("SET TimeZone = 'UTC'")
for t in cut["tables"]:
    db.execute(f"ATTACH '{t['uri']}' AS \\"d_{t['table']}\\" (TYPE delta)")
    db.execute(
        f"CREATE VIEW \\"{t['table']}\\" AS SELECT * FROM \\"d_{t['table']}\\" "
        f"AT (VERSION => {t['version']})"
    )
rows = db.sql(sys.argv[3]).fetchall()
print("\\n".join(",".join(map(str, row)) for row in rows))
"""
"""The floor of an interactive read: Python, DuckDB and the cut, nothing else."""

LIBRARIES = (
    "sqlglot",
    "sqlglot.optimizer.scope",
    "typer",
)
"""What ``etl sql --engine duckdb --format csv`` imports besides DuckDB when it runs a
query for the first time: the query's sqlglot and the command line's typer (a query run
again reads its translation back, without sqlglot). (No SQLAlchemy: the SQLite catalog is read through
``sqlite3``; no Rich: CSV and the header lines are plain text; no Arrow or delta-rs:
DuckDB's rows are printed as DuckDB gives them, and a local table's Delta log is read as
files.)"""

LIBRARY_FLOOR = (
    "import sys\n"
    + "".join(f"import {name}\n" for name in LIBRARIES)
    + 'sqlglot.parse_one(sys.argv[3], read="spark").sql(dialect="duckdb")\n'
    + FLOOR
)
"""The floor after importing :data:`LIBRARIES` and translating the query from Spark SQL to
DuckDB's dialect with sqlglot: what ``etl sql`` could cost with those libraries and no
code of its own."""


def _timed(command: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of ``command``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def _environment() -> dict[str, str]:
    """The commands' environment: this checkout's code, and Python keeping the modules'
    bytecode (as installed)."""
    return {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
    }


def _etl(*args: str, cwd: Path) -> float:
    return _etl_timed(*args, cwd=cwd)[0]


def _etl_timed(*args: str, cwd: Path, cache: Path | None = None) -> tuple[float, float]:
    # As installed: Python keeps the modules' bytecode (a shell that forbids writing it
    # would have every command compile the project's modules again).
    env = _environment()
    env["DELTA_BARRIER_CACHE_DIR"] = str(cache or cwd / "translations")
    return _timed([str(Path(sys.executable).with_name("etl")), *args], cwd=cwd, env=env)


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="sql-bench-") as tmp:
        root = Path(tmp)
        incoming = root / "incoming"
        incoming.mkdir()
        pipeline = str(REPO / "examples" / "wordcount" / "pipeline.py")
        for name, words in (("a.txt", "apple pear apple"), ("b.txt", "pear fig kiwi")):
            (incoming / name).write_text("\n".join(words.split()) + "\n")
            _etl(
                "run",
                pipeline,
                "--once",
                "--param",
                f"input_dir={incoming}",
                "--master",
                "local[1]",
                cwd=root,
            )
        sql = ("sql", QUERY, "--consistency", "repeatable-read", "--format", "csv")
        _etl_timed(*sql, "--engine", "duckdb", cwd=root)  # keeps the query's translation
        run_floor, run_library_floor = _floors(root)
        # In rounds, so that the host's drift weighs on every command alike.
        duck_timed, first_timed, floor, library_floor = [], [], [], []
        for run in range(COMMAND_RUNS):
            duck_timed.append(_etl_timed(*sql, "--engine", "duckdb", cwd=root))
            first_timed.append(
                _etl_timed(*sql, "--engine", "duckdb", cwd=root, cache=root / f"empty-{run}")
            )
            floor.append(run_floor())
            library_floor.append(run_library_floor())
        duck = [wall for wall, _ in duck_timed]
        snapshot_cpu = [
            _etl_timed("snapshot", *TABLES, "--format", "json", cwd=root)[1] for _ in range(RUNS)
        ]
        version = [_etl_timed("--version", cwd=root) for _ in range(RUNS)]
        spark = [
            _etl(*sql, "--engine", "spark", "--master", "local[1]", cwd=root) for _ in range(RUNS)
        ]

        sys.path.insert(0, str(REPO))
        from catalog import load_catalog
        from etl.reader import snapshot

        catalog = load_catalog(warehouse=root / "warehouse", create=False)
        warm = []
        for _ in range(WARM + 3):
            started = time.perf_counter()
            with snapshot(catalog, QUERY, "repeatable-read") as snap:
                snap.duckdb().execute(QUERY).fetchall()
            warm.append(time.perf_counter() - started)
        warm = warm[3:]
        catalog.close()
    figures: dict[str, Any] = {
        "etl_sql_duckdb_s": statistics.median(duck),
        "etl_sql_duckdb_cpu_s": statistics.median(cpu for _, cpu in duck_timed),
        "etl_sql_duckdb_first_s": statistics.median(wall for wall, _ in first_timed),
        "etl_sql_duckdb_first_cpu_s": statistics.median(cpu for _, cpu in first_timed),
        "floor_s": statistics.median(wall for wall, _ in floor),
        "floor_cpu_s": statistics.median(cpu for _, cpu in floor),
        "library_floor_s": statistics.median(wall for wall, _ in library_floor),
        "library_floor_cpu_s": statistics.median(cpu for _, cpu in library_floor),
        "etl_snapshot_cpu_s": statistics.median(snapshot_cpu),
        "etl_version_s": statistics.median(wall for wall, _ in version),
        "etl_version_cpu_s": statistics.median(cpu for _, cpu in version),
        "etl_sql_spark_s": statistics.median(spark),
        "speedup": statistics.median(spark) / statistics.median(duck),
        "snap_duckdb_warm_median_ms": statistics.median(warm) * 1000,
        "runs": RUNS,
        "command_runs": COMMAND_RUNS,
        "warm_runs": WARM,
        "load_average": load_average(),
    }
    print(
        f"etl sql, 3-table repeatable-read join (whole command, median of {RUNS}): "
        f"duckdb {figures['etl_sql_duckdb_s']:.2f} s, spark {figures['etl_sql_spark_s']:.2f} s "
        f"-> {figures['speedup']:.1f}x (targets: < 2 s, >= 10x)"
    )
    figures["vs_floor_wall"] = figures["etl_sql_duckdb_s"] / figures["floor_s"]
    figures["vs_floor_cpu"] = figures["etl_sql_duckdb_cpu_s"] / figures["floor_cpu_s"]
    print(
        f"etl sql --engine duckdb, the query run again, against the floor (plain Python + "
        f"DuckDB on the cut of "
        f"`etl snapshot --format json`, median of {COMMAND_RUNS}): wall {figures['etl_sql_duckdb_s']:.2f}"
        f" vs {figures['floor_s']:.2f} s -> {figures['vs_floor_wall']:.1f}x, CPU "
        f"{figures['etl_sql_duckdb_cpu_s']:.2f} vs {figures['floor_cpu_s']:.2f} s -> "
        f"{figures['vs_floor_cpu']:.1f}x (target <= 2x)"
    )
    figures["first_vs_floor_wall"] = figures["etl_sql_duckdb_first_s"] / figures["floor_s"]
    figures["first_vs_floor_cpu"] = figures["etl_sql_duckdb_first_cpu_s"] / figures["floor_cpu_s"]
    print(
        f"  the same query run for the first time (translated with sqlglot): wall "
        f"{figures['etl_sql_duckdb_first_s']:.2f} s -> {figures['first_vs_floor_wall']:.1f}x, "
        f"CPU {figures['etl_sql_duckdb_first_cpu_s']:.2f} s -> "
        f"{figures['first_vs_floor_cpu']:.1f}x"
    )
    figures["vs_library_floor_cpu"] = (
        figures["etl_sql_duckdb_first_cpu_s"] / figures["library_floor_cpu_s"]
    )
    figures["library_floor_vs_floor_cpu"] = figures["library_floor_cpu_s"] / figures["floor_cpu_s"]
    print(
        f"the floor importing etl sql's libraries first (median of {COMMAND_RUNS}): CPU "
        f"{figures['library_floor_cpu_s']:.2f} s = {figures['library_floor_vs_floor_cpu']:.1f}x "
        f"the floor; etl sql run for the first time {figures['vs_library_floor_cpu']:.1f}x it "
        "(the project's own code)"
    )
    print(
        f"etl snapshot of the 3 tables, CPU (median of {RUNS}): {figures['etl_snapshot_cpu_s']:.2f} s"
    )
    print(
        f"etl --version (median of {RUNS}): wall {figures['etl_version_s']:.2f} s, CPU "
        f"{figures['etl_version_cpu_s']:.2f} s"
    )
    print(
        f"snapshot + snap.duckdb() warm, resolution + read (median of {WARM}): "
        f"{figures['snap_duckdb_warm_median_ms']:.1f} ms (target < 50 ms)"
    )
    print(figures["load_average"])
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "sql.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def _floors(
    root: Path,
) -> tuple[Callable[[], tuple[float, float]], Callable[[], tuple[float, float]]]:
    """A run of the floor script and one of the library floor (wall and CPU seconds), on
    the cut ``etl snapshot --format json`` gives."""
    cut = subprocess.run(
        [str(Path(sys.executable).with_name("etl")), "snapshot", *TABLES, "--format", "json"],
        cwd=root,
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (root / "cut.json").write_text(cut)
    (root / "floor.py").write_text(FLOOR)
    (root / "library_floor.py").write_text(LIBRARY_FLOOR)
    from etl.reader import delta_extension_path

    arguments = ["cut.json", delta_extension_path(), QUERY]

    def run(script: str) -> Callable[[], tuple[float, float]]:
        return lambda: _timed([sys.executable, script, *arguments], cwd=root, env=_environment())

    return run("floor.py"), run("library_floor.py")


if __name__ == "__main__":
    main()
