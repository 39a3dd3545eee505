"""Consistent SQL reads: DuckDB against Spark, and ``snap.duckdb()`` in a warm process.

Builds the word-count chain (two small epochs) in a temporary warehouse with ``etl run``,
then measures:

- ``etl sql`` of a three-table repeatable-read join, whole-command wall time (process
  start to exit), ``--engine duckdb`` against ``--engine spark`` (RUNS each, median);
  targets: DuckDB under 2 s, at least 10x faster than Spark;
- the same query through ``snapshot(...)`` + ``snap.duckdb()`` in a warm process:
  resolution plus read, median of WARM runs; target under 50 ms.

Run: ``python -m bench sql``. Results also go to ``bench/results/sql.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERY = (
    "SELECT w.word, c.cnt, n.words FROM words w JOIN word_counts c USING (word) "
    "JOIN cnt_counts n USING (cnt)"
)
RUNS = 3
WARM = 50


def _etl(*args: str, cwd: Path) -> float:
    # As installed: Python keeps the modules' bytecode (a shell that forbids writing it
    # would have every command compile the project's modules again).
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
    }
    started = time.perf_counter()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("etl")), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"etl {' '.join(args)} failed: {result.stderr[-2000:]}")
    return elapsed


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
        duck = [_etl(*sql, "--engine", "duckdb", cwd=root) for _ in range(RUNS)]
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
    figures = {
        "etl_sql_duckdb_s": statistics.median(duck),
        "etl_sql_spark_s": statistics.median(spark),
        "speedup": statistics.median(spark) / statistics.median(duck),
        "snap_duckdb_warm_median_ms": statistics.median(warm) * 1000,
        "runs": RUNS,
        "warm_runs": WARM,
    }
    print(
        f"etl sql, 3-table repeatable-read join (whole command, median of {RUNS}): "
        f"duckdb {figures['etl_sql_duckdb_s']:.2f} s, spark {figures['etl_sql_spark_s']:.2f} s "
        f"-> {figures['speedup']:.1f}x (targets: < 2 s, >= 10x)"
    )
    print(
        f"snapshot + snap.duckdb() warm, resolution + read (median of {WARM}): "
        f"{figures['snap_duckdb_warm_median_ms']:.1f} ms (target < 50 ms)"
    )
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "sql.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
