"""Small epoch: the whole cost of one tiny epoch (10 rows) against Spark writing the same
10 rows as Parquet, to expose the fixed per-epoch overhead.

One epoch = drop a 10-row JSON file, ``open_epoch`` and ``run_pending``, through:

- ``ingest``: one job (a FileSource appended to a table) -- the headline figure;
- ``+append`` / ``+merge`` / ``+overwrite``: the same ingest job and one derived SQL job
  of that write mode, so that (variant - ingest) is what one more table costs in a chain.

The baseline reads the same 10-row JSON file with Spark and writes it as Parquet
(``spark.read.json(f).write.parquet(p)``). Runs interleave (baseline, then each variant)
so that load drifts hit all alike; medians of ``DB_BENCH_EPOCHS`` runs after one warm-up.
Also counted per epoch: Spark jobs (status tracker) and catalog SQL statements
(SQLAlchemy events).

History: the ``+append`` variant then runs ``DB_BENCH_HISTORY`` (default 100) more
epochs; the median epoch of each block of 10 shows whether an epoch's cost grows with the
tables' history (opening a Delta table replays the commits after its newest checkpoint).

Run: ``python -m bench small_epoch``; ``DB_BENCH_EPOCHS`` (default 15) sets the runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench._common import (
    ProcessCpu,
    Py4jCalls,
    StatementCounter,
    env_int,
    load_average,
    median,
    spark_job_count,
)

SCHEMA = "id BIGINT, customer INT, amount DOUBLE"
ROWS = 10

# name -> (mode of the derived job or None, its SQL, merge keys)
VARIANTS: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "ingest": (None, "", ()),
    "+append": ("append", "SELECT id, customer, amount * 2 AS amount2 FROM events", ()),
    "+merge": (
        "merge",
        "SELECT customer, count(*) AS orders, sum(amount) AS total FROM events GROUP BY customer",
        ("customer",),
    ),
    "+overwrite": (
        "overwrite",
        "SELECT count(*) AS orders, sum(amount) AS total FROM events",
        (),
    ),
}


def _rows_json(seq: int) -> str:
    return "".join(
        f'{{"id": {seq * ROWS + i}, "customer": {i % 5}, "amount": {i}.5}}\n' for i in range(ROWS)
    )


def _drop(directory: Path, seq: int) -> Path:
    """Write a 10-row JSON file under a dot-name, then rename it (the FileSource rule)."""
    final = directory / f"drop-{seq:06d}.json"
    hidden = directory / f".drop-{seq:06d}.json"
    hidden.write_text(_rows_json(seq))
    os.replace(hidden, final)
    return final


class _Variant:
    def __init__(self, name: str, root: Path, spark) -> None:
        from catalog import load_catalog
        from etl import FileSource, Pipeline, Runner

        mode, query, keys = VARIANTS[name]
        self.name = name
        self.incoming = root / "incoming"
        self.incoming.mkdir(parents=True)
        pipeline = Pipeline("small_epoch")
        pipeline.ingest(
            "ingest",
            source=FileSource("drops", path=self.incoming, format="json", schema=SCHEMA),
            output="events",
        )
        if mode is not None:
            pipeline.sql(
                "derive", output="derived", query=query, inputs=["events"], mode=mode, keys=keys
            )
        warehouse = root / "warehouse"
        self.catalog = load_catalog(None, warehouse=warehouse)
        self.runner = Runner(pipeline, catalog=self.catalog, warehouse=str(warehouse), spark=spark)
        self.runner.register()
        self.runner.acquire()
        self.seq = 0

    def epoch(self) -> None:
        self.seq += 1
        _drop(self.incoming, self.seq)
        time.sleep(0.002)  # the file's mtime strictly before the barrier
        self.runner.open_epoch()
        result = self.runner.run_pending()
        assert result.ok, result.failures
        assert all(b.sealed for b in result.batches), result.batches

    def close(self) -> None:
        self.runner.release()
        self.catalog.close()


def _history(variant: _Variant, epochs: int) -> list[float]:
    """Seconds of each of ``epochs`` more epochs of ``variant``."""
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        variant.epoch()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    from etl import build_spark

    runs = env_int("DB_BENCH_EPOCHS", 15)
    spark = build_spark(app_name="bench-small-epoch", conf={"spark.ui.enabled": "false"})
    print(f"{ROWS} rows per epoch, median of {runs} runs after a warm-up; {load_average()}")
    with tempfile.TemporaryDirectory(prefix="small-epoch-") as tmp:
        root = Path(tmp)
        plain_in = root / "plain-in"
        plain_in.mkdir()
        variants = {name: _Variant(name, root / name.strip("+"), spark) for name in VARIANTS}
        plain_seq = 0

        def baseline() -> None:
            nonlocal plain_seq
            plain_seq += 1
            source = _drop(plain_in, plain_seq)
            spark.read.schema(SCHEMA).json(str(source)).write.mode("overwrite").parquet(
                str(root / "plain-out" / f"{plain_seq}")
            )

        actions: dict[str, Callable[[], None]] = {"parquet": baseline}
        actions.update({name: variant.epoch for name, variant in variants.items()})
        seconds: dict[str, list[float]] = {name: [] for name in actions}
        jobs: dict[str, list[int]] = {name: [] for name in actions}
        statements: dict[str, list[int]] = {name: [] for name in actions}
        jvm_cpu: dict[str, list[float]] = {name: [] for name in actions}
        python_cpu: dict[str, list[float]] = {name: [] for name in actions}
        round_trips: dict[str, list[int]] = {name: [] for name in actions}
        cpu = ProcessCpu(spark)
        try:
            for action in actions.values():
                action()  # warm-up: JIT, Python workers, the tables' first versions
            with StatementCounter() as counter, Py4jCalls() as py4j:
                for _ in range(runs):
                    for name, action in actions.items():
                        jobs_before, statements_before = spark_job_count(spark), counter.count
                        calls_before = py4j.count
                        jvm_before, python_before = cpu.jvm(), cpu.python()
                        start = time.perf_counter()
                        action()
                        seconds[name].append(time.perf_counter() - start)
                        jvm_cpu[name].append(cpu.jvm() - jvm_before)
                        python_cpu[name].append(cpu.python() - python_before)
                        jobs[name].append(spark_job_count(spark) - jobs_before)
                        statements[name].append(counter.count - statements_before)
                        round_trips[name].append(py4j.count - calls_before)
            history = _history(variants["+append"], env_int("DB_BENCH_HISTORY", 100))
        finally:
            for variant in variants.values():
                variant.close()

    base = median(seconds["parquet"])
    ingest = median(seconds["ingest"])
    print(
        f"{'':12} {'median ms':>10} {'p90 ms':>8} {'x parquet':>10} {'+ms vs ingest':>14}"
        f" {'spark jobs':>10} {'catalog stmts':>13} {'JVM cpu ms':>10} {'py cpu ms':>9}"
        f" {'py4j calls':>10}"
    )
    for name in actions:
        values = sorted(seconds[name])
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        extra = "" if name in ("parquet", "ingest") else f"{(median(values) - ingest) * 1000:14.0f}"
        print(
            f"{name:12} {median(values) * 1000:10.0f} {p90 * 1000:8.0f}"
            f" {median(values) / base:10.1f} {extra:>14}"
            f" {median(jobs[name]):10.0f} {median(statements[name]):13.0f}"
            f" {median(jvm_cpu[name]) * 1000:10.0f} {median(python_cpu[name]) * 1000:9.0f}"
            f" {median(round_trips[name]):10.0f}"
        )
    blocks = [median(history[i : i + 10]) for i in range(0, len(history), 10)]
    if blocks:
        print(
            "+append, epoch cost as history grows (median ms per block of 10 epochs): "
            + " ".join(f"{b * 1000:.0f}" for b in blocks)
            + f"; slowest block / first {max(blocks) / blocks[0]:.2f}"
        )
    print(
        f"one tiny epoch through one job: {ingest * 1000:.0f} ms, {ingest / base:.1f}x Spark "
        f"writing the same {ROWS} rows as Parquet ({base * 1000:.0f} ms); {load_average()}"
    )


if __name__ == "__main__":
    main()
