"""What a quality gate costs over an epoch without validation.

One epoch of one million rows (a few hundred of them bad) is committed once as Parquet. The
baseline is the epoch without validation: read those rows and write them to Parquet. Against
it: ``run_gate`` with five typical expectations (not null, between, in set, regex, row count)
under ``block``, and under ``quarantine`` including the write of the passing and quarantined
rows. Prints the one-off cost of importing Great Expectations and of the first (cold) gate,
then, over a few interleaved warm rounds, the median time of each step and the median of
its per-round ratio to the baseline.

Run: ``python -m bench.quality_bench`` (or through ``python -m bench``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROWS = 1_000_000
RUNS = 5
EPOCH = 1


def _seconds(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    start = time.perf_counter()
    from great_expectations import expectations as gxe

    import_s = time.perf_counter() - start

    from pyspark.sql import functions as F

    from etl.quality import QualityGate, run_gate
    from etl.spark import build_spark

    spark = build_spark(app_name="quality-bench", conf={"spark.ui.enabled": "false"})
    workdir = Path(tempfile.mkdtemp(prefix="quality-bench-"))
    try:
        committed = str(workdir / "committed")
        (
            spark.range(ROWS)
            .select(
                F.col("id"),
                F.when(F.col("id") % 10_007 == 0, None)
                .otherwise(F.concat(F.lit("customer-"), (F.col("id") % 997).cast("string")))
                .alias("customer"),
                F.when(F.col("id") % 50_021 == 0, -1.0)
                .otherwise((F.col("id") % 10_000) * 0.37)
                .alias("amount"),
                F.when(F.col("id") % 70_001 == 0, "lost")
                .otherwise(
                    F.element_at(
                        F.array(*map(F.lit, ("new", "paid", "shipped", "void"))),
                        (F.col("id") % 4 + 1).cast("int"),
                    )
                )
                .alias("status"),
                F.when(F.col("id") % 90_001 == 0, "bad-sku")
                .otherwise(F.format_string("ABC-%04d", F.col("id") % 10_000))
                .alias("sku"),
                F.lit(EPOCH).cast("long").alias("_epoch"),
            )
            .write.parquet(committed)
        )
        rows = spark.read.parquet(committed)
        expectations = [
            gxe.ExpectColumnValuesToNotBeNull(column="customer"),
            gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=10_000),
            gxe.ExpectColumnValuesToBeInSet(
                column="status", value_set=["new", "paid", "shipped", "void"]
            ),
            gxe.ExpectColumnValuesToMatchRegex(column="sku", regex=r"^[A-Z]{3}-\d{4}$"),
            gxe.ExpectTableRowCountToBeBetween(min_value=1, max_value=10 * ROWS),
        ]
        block = QualityGate("bench_orders", expectations, policy="block")
        quarantine = QualityGate("bench_orders", expectations, policy="quarantine")

        def baseline() -> None:
            rows.write.mode("overwrite").parquet(str(workdir / "baseline"))

        def gate_block() -> None:
            run_gate(spark, block, rows, epoch=EPOCH)

        def gate_quarantine() -> None:
            outcome = run_gate(spark, quarantine, rows, epoch=EPOCH)
            outcome.passing.write.mode("overwrite").parquet(str(workdir / "passing"))
            outcome.quarantined.write.mode("overwrite").parquet(str(workdir / "quarantined"))

        baseline()  # warm-up: JIT, Python workers, file system caches
        start = time.perf_counter()
        cold = run_gate(spark, block, rows, epoch=EPOCH)
        cold_s = time.perf_counter() - start
        gate_quarantine()

        # Interleaved rounds, so that drifting machine load weighs on every step alike.
        rounds = [
            (_seconds(baseline), _seconds(gate_block), _seconds(gate_quarantine))
            for _ in range(RUNS)
        ]
        baseline_s, block_s, quarantine_s = (
            statistics.median(step) for step in zip(*rounds, strict=True)
        )
        block_ratio = statistics.median(b / a for a, b, _ in rounds)
        quarantine_ratio = statistics.median(q / a for a, _, q in rounds)

        print(f"great_expectations import: {import_s:.2f} s (once per process)")
        print(f"first run_gate (cold GX context): {cold_s:.2f} s")
        print(f"epoch: {ROWS:,} rows, {len(expectations)} expectations, failing (planted):")
        for result in cold.results:
            if not result["success"]:
                print(f"  {result['unexpected_count']:>4} rows  {result['expectation']}")
        print(f"{'step':<42} {'median s':>9} {'x baseline':>11}")
        print(f"{'baseline: write epoch rows to parquet':<42} {baseline_s:>9.2f} {1.0:>11.2f}")
        print(f"{'run_gate, block':<42} {block_s:>9.2f} {block_ratio:>11.2f}")
        print(
            f"{'run_gate, quarantine + write both splits':<42} {quarantine_s:>9.2f} "
            f"{quarantine_ratio:>11.2f}"
        )
        print(f"epoch written and gated (block) vs only written: {1 + block_ratio:.2f}x")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
