"""Throughput: the highest rate at which the ten-job chain fed from Kafka stays fresh.

The freshness chain (``bench/freshness_bench.py``: a Kafka root and nine derived jobs, 1 s
epochs) runs continuously while a feeder **in a separate process** (so that producing does
not compete with the run inside its interpreter) produces JSON records to the topic at a
rate that steps up: ``DB_BENCH_RATES`` rows/s, each step settling for
``DB_BENCH_STEP_SETTLE`` seconds, then measured for ``DB_BENCH_STEP_SECONDS``. A probe
resolves repeatable-read cuts of all ten tables every 0.1 s.

Per step: the rate the feeder reached, freshness (first cut at or past an epoch minus its
barrier) p50 / p95 over the epochs whose barrier falls in the window, and the lag trend
(p50 over the window's second half against its first: a chain that cannot keep up falls
further behind every epoch). The **knee** is the highest rate whose step kept p95 within
``DB_BENCH_TARGET_P95`` seconds with a bounded lag; the ramp stops at the first step that
misses (every higher rate would miss too).

Environment (defaults in brackets): DB_BENCH_RATES [2000,5000,10000,20000,40000],
DB_BENCH_WARMUP [60], DB_BENCH_STEP_SETTLE [20], DB_BENCH_STEP_SECONDS [40],
DB_BENCH_TARGET_P95 [5], DB_BENCH_PARTITIONS [4].

Run: ``python -m bench throughput``.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench._common import (
    LoadSampler,
    env_float,
    env_int,
    env_ints,
    load_average,
    median,
    percentile,
)
from bench.freshness_bench import (
    KAFKA_TOPIC,
    SOURCE_SCHEMA,
    ContinuousRun,
    Feeder,
    FeedTarget,
    Probe,
    build_pipeline,
    lag_is_bounded,
    visible_after_barrier,
)

TICKS_PER_SECOND = 10


@dataclass(frozen=True)
class Step:
    rate: int
    reached: float
    """Rows/s the feeder actually produced in the window."""
    freshness: tuple[float, ...]
    early_p50: float
    late_p50: float

    @property
    def bounded(self) -> bool:
        return lag_is_bounded(self.early_p50, self.late_p50)

    def fresh(self, target_p95: float) -> bool:
        return (
            bool(self.freshness)
            and percentile(self.freshness, 95) <= target_p95
            and self.bounded
            and self.reached >= 0.9 * self.rate
        )

    def line(self, target_p95: float) -> str:
        if not self.freshness:
            return f"  {self.rate:>7,} rows/s: no epoch became visible in the window  MISSED"
        verdict = "ok" if self.fresh(target_p95) else "MISSED"
        return (
            f"  {self.rate:>7,} rows/s (fed {self.reached:>9,.0f}): freshness p50 "
            f"{median(self.freshness):6.2f} s  p95 {percentile(self.freshness, 95):6.2f} s  "
            f"lag p50 {self.early_p50:6.2f} -> {self.late_p50:6.2f} s "
            f"({'bounded' if self.bounded else 'growing'})  {verdict}"
        )


def _measure(catalog, probe: Probe, feeder: Feeder, rate: int, seconds: float) -> Step:
    started_rows, started = feeder.rows, time.time()
    time.sleep(seconds)
    ended_rows, ended = feeder.rows, time.time()
    # The probe needs a moment to see the window's last epochs: measure them after it.
    time.sleep(min(10.0, seconds / 2))
    values = visible_after_barrier(catalog, probe, (started, ended))
    half = len(values) // 2
    return Step(
        rate=rate,
        reached=(ended_rows - started_rows) / (ended - started),
        freshness=tuple(values),
        early_p50=median(values[:half]) if half else float("nan"),
        late_p50=median(values[half:]) if values else float("nan"),
    )


def main() -> None:
    from catalog import load_catalog
    from etl import KafkaSource, Runner, build_spark
    from tests.support.tansu import TansuBroker

    rates = env_ints("DB_BENCH_RATES", (2000, 5000, 10000, 20000, 40000))
    warmup = env_float("DB_BENCH_WARMUP", 60.0)
    settle = env_float("DB_BENCH_STEP_SETTLE", 20.0)
    seconds = env_float("DB_BENCH_STEP_SECONDS", 40.0)
    target = env_float("DB_BENCH_TARGET_P95", 5.0)
    partitions = env_int("DB_BENCH_PARTITIONS", 4)
    spark = build_spark(app_name="bench-throughput", conf={"spark.ui.enabled": "false"})
    print(
        f"ten-table chain from Kafka ({partitions} partitions), 1 s epochs, rates {rates} "
        f"rows/s, warm-up {warmup:g} s at the first, each step {settle:g} s settling + "
        f"{seconds:g} s measured, target p95 <= {target:g} s; {load_average()}"
    )
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp, ExitStack() as stack:
        broker = stack.enter_context(TansuBroker())
        broker.create_topics({KAFKA_TOPIC: partitions})
        source = KafkaSource(
            "drops",
            topics=[KAFKA_TOPIC],
            bootstrap_servers=broker.bootstrap_servers,
            schema=SOURCE_SCHEMA,
        )
        warehouse = Path(tmp) / "warehouse"
        pipeline, names = build_pipeline(source, 10)
        catalog = load_catalog(None, warehouse=warehouse)
        stack.callback(catalog.close)
        runner = Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark)
        runner.register()
        feeder = Feeder(
            FeedTarget("kafka", bootstrap=broker.bootstrap_servers, partitions=partitions),
            rows_per_second=rates[0],
            ticks_per_second=TICKS_PER_SECOND,
        )
        probe = Probe(warehouse, names, interval=0.1)
        driver = ContinuousRun(runner, interval=1.0)
        with LoadSampler() as load:
            feeder.start()
            driver.start()
            probe.start()
            time.sleep(warmup)
            try:
                for index, value in enumerate(rates):
                    feeder.rate.value = float(value)
                    if index:
                        time.sleep(settle)
                    step = _measure(catalog, probe, feeder, value, seconds)
                    steps.append(step)
                    print(step.line(target), flush=True)
                    if not step.fresh(target):
                        break
            finally:
                feeder.stop_event.set()
                feeder.join()
                try:
                    driver.finish()  # raises when the run failed
                finally:
                    probe.stop_event.set()
                    probe.join()
        fresh = [step.rate for step in steps if step.fresh(target)]
        knee = max(fresh) if fresh else None
        print(
            f"knee: {knee:,} rows/s (the highest step with p95 <= {target:g} s and a bounded lag)"
            if knee is not None
            else f"knee: below {rates[0]:,} rows/s (no step kept p95 <= {target:g} s)"
        )
        print(load.summary() + f"; now {load_average()}")


if __name__ == "__main__":
    main()
