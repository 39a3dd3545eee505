"""One append epoch on an S3-compatible warehouse against the same epoch on local disk.

The same cached DataFrame (long id, string, double, timestamp, ``_epoch``) is written as
one epoch of a new Delta table (``write_files`` + ``commit_files``) (a) into a local
directory, through Spark's Parquet writer, and (b) into ``s3://`` on moto's S3 server on
127.0.0.1, through Arrow's S3 file system in Spark tasks (pyspark's Hadoop has no S3A),
committed by delta-rs with a conditional PUT. Prints the median of interleaved runs of
each and their ratio (target: at most 1.5 at one million rows). moto keeps objects in
the memory of one Python process: a real store's throughput is another matter; what the
ratio measures is the engine's cost on top of the transfers.

Run: ``python -m bench.object_store_bench`` (or through ``python -m bench``);
``DB_BENCH_ROWS=1000000`` and ``DB_BENCH_RUNS=3`` by default.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench._common import (
    append_epoch,
    env_int,
    load_average,
    median,
    sample_orders,
    start_s3_server,
)

TARGET_RATIO = 1.5


def main() -> None:
    rows = env_int("DB_BENCH_ROWS", 1_000_000)
    runs = env_int("DB_BENCH_RUNS", 3)
    moto = start_s3_server("bench-warehouse")
    from pyspark.sql.pandas.types import to_arrow_schema

    from etl.spark import build_spark

    spark = build_spark(app_name="object-store-bench", conf={"spark.ui.enabled": "false"})
    workdir = Path(tempfile.mkdtemp(prefix="object-store-bench-"))
    try:
        df = sample_orders(spark, rows)
        schema = to_arrow_schema(df.schema, timezone="UTC")

        def epoch(location: str) -> float:
            start = time.perf_counter()
            append_epoch(df, location, schema)
            return time.perf_counter() - start

        epoch(str(workdir / "warm-local"))
        epoch("s3://bench-warehouse/warm")
        local, s3 = [], []
        for run in range(runs):  # interleaved, so load drifts hit both alike
            local.append(epoch(str(workdir / f"local-{run}")))
            s3.append(epoch(f"s3://bench-warehouse/run-{run}"))
        ratio = median(s3) / median(local)
        print(load_average())
        print(f"{'rows':>10} {'local s':>9} {'s3 s':>9} {'ratio':>7}")
        print(f"{rows:>10} {median(local):>9.3f} {median(s3):>9.3f} {ratio:>7.2f}")
        print(f"target ratio: <= {TARGET_RATIO}")
        df.unpersist()
        spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        moto.terminate()


if __name__ == "__main__":
    main()
