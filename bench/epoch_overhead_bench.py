"""What an epoch commit costs over a plain Spark Parquet write.

For each size, the same cached DataFrame (long id, string, double, timestamp, ``_epoch``)
is written (a) by ``df.write.mode("overwrite").parquet(...)`` and (b) by Delta Barrier's
``write_files`` + ``commit_files`` as one epoch of a new Delta table. Prints the median of
a few interleaved runs of each and their ratio (target: below 1.25 at one million rows).

Both go through Spark's own Parquet writer; the epoch adds the footer reads for the Delta
statistics, moving the files out of their staging directory, and the delta-rs commit.
(An earlier writer that wrote the files from Python workers through pyarrow measured
1.46 here: handing every row to Python as Arrow batches cost more than the write.)

Run: ``python -m bench.epoch_overhead_bench`` (or through ``python -m bench``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from bench._common import append_epoch, sample_orders

SIZES = (10_000, 1_000_000)
RUNS = 5
TARGET_RATIO = 1.25


def _median_seconds(actions: Mapping[str, Callable[[int], None]], runs: int) -> dict[str, float]:
    """Median wall time of each action; runs interleave so that load drifts hit all alike."""
    for action in actions.values():
        action(-1)  # warm-up: JIT, Python workers, file system caches
    timings: dict[str, list[float]] = {name: [] for name in actions}
    for run in range(runs):
        for name, action in actions.items():
            start = time.perf_counter()
            action(run)
            timings[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in timings.items()}


def main() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from etl.spark import build_spark

    spark = build_spark(app_name="epoch-overhead-bench", conf={"spark.ui.enabled": "false"})
    workdir = Path(tempfile.mkdtemp(prefix="epoch-overhead-"))
    print(f"{'rows':>10} {'parquet s':>10} {'epoch s':>10} {'ratio':>7}")
    try:
        for rows in SIZES:
            df = sample_orders(spark, rows)
            schema = to_arrow_schema(df.schema, timezone="UTC")

            def plain(run: int, df=df, rows=rows) -> None:
                df.write.mode("overwrite").parquet(str(workdir / f"plain-{rows}"))

            def epoch(run: int, df=df, rows=rows, schema=schema) -> None:
                location = workdir / f"delta-{rows}-{run + 1}"
                shutil.rmtree(location, ignore_errors=True)
                append_epoch(df, str(location), schema)

            medians = _median_seconds({"plain": plain, "epoch": epoch}, RUNS)
            plain_s, epoch_s = medians["plain"], medians["epoch"]
            ratio = epoch_s / plain_s
            print(f"{rows:>10} {plain_s:>10.3f} {epoch_s:>10.3f} {ratio:>7.2f}")
            df.unpersist()
        print(f"target ratio at {SIZES[-1]:,} rows: < {TARGET_RATIO}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
