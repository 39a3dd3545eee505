"""The ten-job chain and ``etl sql`` on an S3 warehouse against the same on local disk.

1. Freshness: the freshness chain (``bench/freshness_bench.py``: ten tables, 1 s epochs,
   ``DB_BENCH_ROWS_PER_SECOND`` rows/s from local files) runs continuously on a local
   warehouse, then on ``s3://`` (moto's S3 server on 127.0.0.1, catalog in a local SQLite
   file), each for a warm-up and a measured window; a probe resolves repeatable-read
   cuts of all ten tables every 0.1 s. Reported: p50 / p95 of (cut reached the epoch) -
   (its barrier), per store, and their ratio.
2. ``etl sql``: the whole command (a new process: imports, catalog, DuckDB over the
   store) reading a repeatable-read join of two of the chain's tables, median of
   ``DB_BENCH_RUNS`` runs, per store, and their ratio.

Both stores run in the same process, one after the other; moto (a Python process)
shares the machine's cores with the run.

Run: python -m bench object_store_chain
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from bench._common import (
    cpu_between,
    env_float,
    env_int,
    load_average,
    median,
    percentile,
    start_s3_server,
    tree_cpu,
)
from bench.freshness_bench import (
    ContinuousRun,
    Probe,
    build_pipeline,
    finish,
    freshness_line,
    source_and_feeder,
    visible_after_barrier,
)

BUCKET = "bench-chain"
SQL = (
    "SELECT t.tier, count(*) AS customers FROM customer_tiers t "
    "JOIN customer_latest c ON c.customer = t.customer GROUP BY t.tier"
)


def _chain(spark, warehouse: str, catalog_url: str | None, *, warmup: float, seconds: float):
    """Run the chain on ``warehouse``: (freshness seconds of the window's epochs, CPU
    seconds per process name in the window)."""
    from catalog import load_catalog
    from etl import Runner

    with tempfile.TemporaryDirectory(prefix="chain-") as tmp, ExitStack() as stack:
        source, feeder = source_and_feeder(
            "file",
            Path(tmp),
            stack,
            rows_per_second=env_int("DB_BENCH_ROWS_PER_SECOND", 1000),
            ticks_per_second=5.0,
        )
        pipeline, names = build_pipeline(source, 10)
        catalog = load_catalog(catalog_url, warehouse=warehouse)
        runner = Runner(pipeline, catalog=catalog, warehouse=warehouse, spark=spark)
        probe = Probe(warehouse, names, interval=0.1, catalog_url=catalog_url)
        driver = ContinuousRun(runner, interval=1.0)
        feeder.start()
        driver.start()
        probe.start()
        time.sleep(warmup)
        window = (time.time(), time.time() + seconds)
        cpu_before = tree_cpu()
        time.sleep(seconds)
        cpu = cpu_between(cpu_before, tree_cpu())
        finish(feeder, driver, probe)
        seconds_seen = visible_after_barrier(catalog, probe, window)
        catalog.close()
        return seconds_seen, cpu


def _etl_sql(warehouse: str, catalog_url: str | None, runs: int) -> float:
    """Median wall seconds of the whole ``etl sql`` command."""
    command = [str(Path(sys.executable).with_name("etl")), "sql", SQL, "--warehouse", warehouse]
    if catalog_url:
        command += ["--catalog", catalog_url]
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"etl sql failed: {done.stderr[-2000:]}")
    return median(times[1:])  # the first run warms the file system caches


def main() -> None:
    from etl import build_spark

    warmup = env_float("DB_BENCH_WARMUP", 60.0)
    seconds = env_float("DB_BENCH_SECONDS", 60.0)
    runs = env_int("DB_BENCH_RUNS", 5)
    moto = start_s3_server(BUCKET)
    try:
        spark = build_spark(app_name="bench-object-store-chain", conf={"spark.ui.enabled": "false"})
        print(
            f"ten-table chain, 1 s epochs, warm-up {warmup:g} s, window {seconds:g} s per "
            f"store; {load_average()}"
        )
        with tempfile.TemporaryDirectory(prefix="object-store-chain-") as tmp:
            stores = {
                "local": (str(Path(tmp) / "warehouse"), None),
                "s3": (
                    f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}",
                    f"sqlite:///{Path(tmp) / 's3-catalog.sqlite'}",
                ),
            }
            measured = {
                name: _chain(spark, warehouse, url, warmup=warmup, seconds=seconds)
                for name, (warehouse, url) in stores.items()
            }
            fresh = {name: values for name, (values, _) in measured.items()}
            print("freshness (repeatable read, all ten tables):")
            for name, values in fresh.items():
                print(freshness_line(name, values))
            if fresh["local"] and fresh["s3"]:
                print(
                    f"  {'s3 / local':<22}: p50 "
                    f"{median(fresh['s3']) / median(fresh['local']):.2f}x  p95 "
                    f"{percentile(fresh['s3'], 95) / percentile(fresh['local'], 95):.2f}x"
                )
            print(f"CPU seconds in the {seconds:g} s window, by process:")
            for name, (_, cpu) in measured.items():
                used = ", ".join(f"{proc} {secs:.1f}" for proc, secs in cpu.items() if secs >= 0.1)
                print(f"  {name:<22}: {sum(cpu.values()):6.1f} ({used})")
            sql = {name: _etl_sql(w, url, runs) for name, (w, url) in stores.items()}
            print(f"etl sql, whole command (median of {runs}):")
            for name, value in sql.items():
                print(f"  {name:<22}: {value:5.2f} s")
            print(f"  {'s3 / local':<22}: {sql['s3'] / sql['local']:.2f}x")
        print(f"now {load_average()}")
        spark.stop()
    finally:
        moto.terminate()


if __name__ == "__main__":
    main()
