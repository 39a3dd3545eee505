"""Freshness outside a recompute: the tables a recompute does not touch stay as fresh
while it runs as they were before it.

The pipeline is the freshness chain (``bench/freshness_bench.py``, ``DB_BENCH_JOBS`` tables,
fed by files at a steady rate) plus a side branch off its root that the recompute rewrites:

    events -> side_clean (append) -> side_latest (merge on customer) -> side_rank (overwrite)

``Runner.run_continuous`` runs in a thread with 1 s epochs. After the warm-up, a window of
``DB_BENCH_SECONDS`` without a recompute (the baseline), then a window of the same length
in which ``etl recompute side_clean --downstream`` (coalesced, from the first epoch, on the
same SparkSession, as a second thread: a recompute is a second driver competing for the
same cores) runs again and again, ``DB_BENCH_RECOMPUTE_PAUSE`` (5) seconds apart, so that
the run takes the side branch back and catches it up in between. A probe with its own catalog resolves repeatable-read
snapshots of the chain's tables (outside the recompute) every 0.1 s.

Reported, per window: freshness of the chain's epochs (first time the repeatable-read cut
reached the epoch minus its barrier) p50 / p95 / max, and the ratio during / before; the
recomputes done and how long each took.

Run: python -m bench recompute_freshness
"""

from __future__ import annotations

import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from bench._common import LoadSampler, env_float, env_int, load_average, median, percentile
from bench.freshness_bench import (
    CHAIN,
    ROOT_TABLE,
    ContinuousRun,
    Probe,
    build_pipeline,
    finish,
    freshness_line,
    source_and_feeder,
    visible_after_barrier,
)

SIDE = (
    (
        "side_clean",
        "append",
        (),
        f"SELECT id, customer, amount FROM {ROOT_TABLE} WHERE amount >= 10",
    ),
    (
        "side_latest",
        "merge",
        ("customer",),
        "SELECT customer, max(amount) AS amount FROM side_clean GROUP BY customer",
    ),
    (
        "side_rank",
        "overwrite",
        (),
        "SELECT customer, amount, rank() OVER (ORDER BY amount DESC) AS pos FROM side_latest",
    ),
)


def _with_side_branch(pipeline) -> None:
    previous = ROOT_TABLE
    for output, mode, keys, query in SIDE:
        pipeline.sql(
            f"job_{output}", output=output, query=query, inputs=[previous], mode=mode, keys=keys
        )
        previous = output


def main() -> None:
    from catalog import load_catalog
    from etl import Runner, build_spark
    from etl.recompute import RecomputeRequest, recompute

    seconds = env_float("DB_BENCH_SECONDS", 60.0)
    warmup = env_float("DB_BENCH_WARMUP", 60.0)
    rows_per_second = env_int("DB_BENCH_ROWS_PER_SECOND", 1000)
    tables = max(2, min(len(CHAIN) + 1, env_int("DB_BENCH_JOBS", 6)))
    pause = env_float("DB_BENCH_RECOMPUTE_PAUSE", 5.0)
    spark = build_spark(app_name="bench-recompute-freshness", conf={"spark.ui.enabled": "false"})
    print(
        f"{tables}-table chain + a 3-table side branch, 1 s epochs, {rows_per_second} rows/s; "
        f"warm-up {warmup:g} s, two windows of {seconds:g} s; {load_average()}"
    )
    with tempfile.TemporaryDirectory(prefix="recompute-freshness-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        source, feeder = source_and_feeder(
            "file", root, stack, rows_per_second=rows_per_second, ticks_per_second=5.0
        )
        warehouse = root / "warehouse"
        pipeline, names = build_pipeline(source, tables)
        _with_side_branch(pipeline)
        catalog = load_catalog(None, warehouse=warehouse)
        runner = Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark)
        outcome: dict[str, BaseException] = {}
        recomputes: list[tuple[float, int]] = []
        recomputing = threading.Event()

        def recompute_in_a_loop() -> None:
            own = load_catalog(None, warehouse=warehouse)
            try:
                while recomputing.is_set():
                    started = time.perf_counter()
                    result = recompute(
                        own,
                        pipeline,
                        spark,
                        RecomputeRequest(("side_clean",), downstream=True, reason="bench"),
                        warehouse=str(warehouse),
                    )
                    recomputes.append(
                        (time.perf_counter() - started, result.revision.through_epoch or 0)
                    )
                    time.sleep(pause)
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome["recompute error"] = exc
            finally:
                own.close()

        probe = Probe(warehouse, names, interval=0.1)
        driver = ContinuousRun(runner, interval=1.0)
        recomputer = threading.Thread(target=recompute_in_a_loop, name="recompute", daemon=True)
        with LoadSampler() as load:
            feeder.start()
            driver.start()
            probe.start()
            time.sleep(warmup)
            before = (time.time(), time.time() + seconds)
            time.sleep(seconds)
            recomputing.set()
            recomputer.start()
            during = (time.time(), time.time() + seconds)
            time.sleep(seconds)
            recomputing.clear()
            recomputer.join()
            finish(feeder, driver, probe)
        if "recompute error" in outcome:
            raise RuntimeError("the recompute failed") from outcome["recompute error"]
        quiet = visible_after_barrier(catalog, probe, before)
        busy = visible_after_barrier(catalog, probe, during)
        print(f"freshness of the {tables} tables outside the recompute (repeatable read):")
        print(freshness_line("without a recompute", quiet))
        print(freshness_line("during recomputes", busy))
        if quiet and busy:
            print(
                f"  during / without      : p50 {median(busy) / median(quiet):.2f}x  "
                f"p95 {percentile(busy, 95) / percentile(quiet, 95):.2f}x"
            )
        durations = [d for d, _ in recomputes]
        print(
            f"recomputes of side_clean --downstream: {len(recomputes)} in the window"
            + (
                f", {median(durations):.1f} s each (median), through epochs "
                f"{[e for _, e in recomputes]}"
                if recomputes
                else ""
            )
        )
        print(load.summary() + f"; now {load_average()}")
        catalog.close()


if __name__ == "__main__":
    main()
