"""Kafka ingest throughput: the root table against a plain kafka-python consume loop,
and a backlog caught up in one large slice against the same records in small epochs.

Starts a local tansu broker, produces ``RECORDS`` small JSON records to a topic of
``PARTITIONS`` partitions (one producer process per core, batched), then times:

(a) a plain kafka-python loop: one consumer assigned to every partition, reading from
    the beginning to the end and ``json.loads``-ing each value;
(b) one ``Runner.run_once`` of a pipeline whose ingest job reads the topic with a
    ``KafkaSource``: the slice is cut and recorded, read, decoded and validated in Spark
    tasks, and committed to the Delta root table (and its rejects table), then sealed.

Prints records/s of both and the ratio (b)/(a) (target: at least 1.5, issue 28: two
cores and four partitions should beat one thread), and the batch's stage times. Spark start-up
and the first Python workers are warmed up on a small topic before (b) is timed.

Then ``CATCH_UP_EPOCHS`` epochs are issued while ``CATCH_UP_RECORDS`` records arrive
between their barriers, and the pending epochs are run into a fresh warehouse twice:
one by one (a small slice each), and coalesced into one catch-up batch (one large slice,
recorded with ``catch_up``). Prints both times and the speed-up.

Run: ``python -m bench kafka_ingest`` (or ``python -m bench.kafka_ingest_bench``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench._common import env_int, load_average, plain_kafka_consumer

RECORDS = 1_000_000
PARTITIONS = 4
TARGET_RATIO = 1.5
CATCH_UP_EPOCHS = env_int("DB_BENCH_CATCH_UP_EPOCHS", 20)
"""0 skips the catch-up part."""
CATCH_UP_RECORDS = 40_000
SCHEMA = "id long not null, user string, amount double, country string, ts timestamp"


def _value(i: int) -> bytes:
    return json.dumps(
        {
            "id": i,
            "user": f"user-{i % 9973}",
            "amount": (i % 10_000) / 100,
            "country": ("NL", "DE", "FR", "US")[i % 4],
            "ts": "2026-01-01T00:00:00+00:00",
        }
    ).encode()


def _produce_share(bootstrap: str, topic: str, partitions: list[int], per_partition: int) -> None:
    """One producer process: ``per_partition`` records into each of ``partitions``."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=50,
        batch_size=1024 * 1024,
        max_request_size=16 * 1024 * 1024,
    )
    for partition in partitions:
        first = partition * per_partition
        for i in range(first, first + per_partition):
            producer.send(topic, _value(i), partition=partition)
    producer.flush()
    producer.close()


def _produce(bootstrap: str, topic: str, records: int) -> float:
    per_partition = records // PARTITIONS
    processes = max(1, min(PARTITIONS, os.cpu_count() or 1))
    shares = [list(range(PARTITIONS))[p::processes] for p in range(processes)]
    start = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        pool.starmap(_produce_share, [(bootstrap, topic, share, per_partition) for share in shares])
    return time.perf_counter() - start


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process (``driver``) and its descendants: Spark's JVM
    (``jvm``), its Python workers (``workers``), any other (``other``); each with its
    reaped children. The broker is left out."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, list[str], bytes]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if b"tansu" not in command:
            stats[int(entry.name)] = (int(fields[1]), fields, command)
    spent: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "workers": 0.0, "other": 0.0}
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        _, fields, command = stats[pid]
        part = (
            "driver"
            if pid == os.getpid()
            else "jvm"
            if b"java" in command
            else "workers"
            if b"pyspark" in command
            else "other"
        )
        spent[part] += sum(int(f) for f in fields[11:15]) / ticks  # utime stime cutime cstime
        todo.extend(child for child, (parent, _, _) in stats.items() if parent == pid)
    return spent


def _since(before: dict[str, float]) -> dict[str, float]:
    return {part: seconds - before[part] for part, seconds in _cpu_seconds().items()}


def _plain_consume(bootstrap: str, topic: str, records: int) -> float:
    from kafka import TopicPartition

    consumer = plain_kafka_consumer(bootstrap)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    start = time.perf_counter()
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    decoded = 0
    while decoded < records:
        for batch in consumer.poll(timeout_ms=1000).values():
            for record in batch:
                json.loads(record.value)
                decoded += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _runner(root: Path, spark, bootstrap: str, topic: str, *, backlog_threshold: int | None):
    from catalog import load_catalog
    from etl import Pipeline, Runner
    from etl.sources.kafka import KafkaSource

    pipeline = Pipeline("bench")
    pipeline.ingest(
        "ingest",
        source=KafkaSource("bench", topics=[topic], bootstrap_servers=bootstrap, schema=SCHEMA),
        output="events",
    )
    warehouse = root / "warehouse"
    runner = Runner(
        pipeline,
        catalog=load_catalog(None, warehouse=warehouse),
        warehouse=str(warehouse),
        spark=spark,
        backlog_threshold=backlog_threshold,
    )
    runner.register()
    return runner


def _root_rows(runner) -> tuple[int, int]:
    from deltalake import DeltaTable

    counts = []
    for table in ("events", "events_rejects"):
        location = runner.catalog.get_table(table).location
        counts.append(DeltaTable(location).to_pyarrow_dataset().count_rows())
    return counts[0], counts[1]


def _root_ingest(spark, bootstrap: str, topic: str) -> tuple[float, int, int, dict[str, float]]:
    """One ``run_once`` into a fresh warehouse: seconds, root rows, rejects, and the
    batch's seconds per engine stage (``read`` cuts the slice; ``write`` reads Kafka,
    decodes and writes the files)."""
    with tempfile.TemporaryDirectory() as tmp:
        runner = _runner(Path(tmp), spark, bootstrap, topic, backlog_threshold=None)
        start = time.perf_counter()
        result = runner.run_once()
        elapsed = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(f"the ingest run failed: {result.failures}")
        rows, rejects = _root_rows(runner)
        stages: dict[str, float] = {}
        for batch in result.batches:
            for stage, seconds in batch.timings.items():
                stages[stage] = stages.get(stage, 0.0) + seconds
    return elapsed, rows, rejects, stages


def _produce_epochs(bootstrap: str, topic: str) -> list[datetime]:
    """Produce the catch-up records in ``CATCH_UP_EPOCHS`` waves; the barrier after each."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1024 * 1024)
    per_wave = CATCH_UP_RECORDS // CATCH_UP_EPOCHS
    barriers = []
    for wave in range(CATCH_UP_EPOCHS):
        for i in range(wave * per_wave, (wave + 1) * per_wave):
            producer.send(topic, _value(i), partition=i % PARTITIONS)
        producer.flush()
        barriers.append(datetime.now(UTC))
        time.sleep(0.002)
    producer.close()
    return barriers


def _catch_up(
    spark, bootstrap: str, topic: str, barriers: list[datetime], *, backlog_threshold: int | None
) -> tuple[float, int, int]:
    """Run the pending epochs into a fresh warehouse: seconds, slices, catch-up slices."""
    with tempfile.TemporaryDirectory() as tmp:
        runner = _runner(Path(tmp), spark, bootstrap, topic, backlog_threshold=backlog_threshold)
        for barrier in barriers:
            runner.open_epoch(barrier)
        with runner:
            start = time.perf_counter()
            result = runner.run_pending()
            elapsed = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(f"the catch-up run failed: {result.failures}")
        rows, _ = _root_rows(runner)
        if rows != CATCH_UP_RECORDS:
            raise SystemExit(f"the catch-up run wrote {rows} rows, not {CATCH_UP_RECORDS}")
        slices = [runner.catalog.get_slice("bench", e + 1) for e in range(len(barriers))]
        recorded = [s for s in slices if s is not None]
    return elapsed, len(recorded), sum(s.catch_up for s in recorded)


def main(records: int = RECORDS) -> None:
    from etl.spark import build_spark
    from tests.support.tansu import TansuBroker

    records -= records % PARTITIONS
    with TansuBroker() as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topics({"bench": PARTITIONS, "warmup": PARTITIONS, "catchup": PARTITIONS})
        produce_s = _produce(bootstrap, "bench", records)
        print(f"produced {records:,} records in {produce_s:.1f}s ({records / produce_s:,.0f}/s)")

        cpu = _cpu_seconds()
        plain_s = _plain_consume(bootstrap, "bench", records)
        plain_cpu = _since(cpu)

        spark = build_spark(app_name="kafka-ingest-bench", conf={"spark.ui.enabled": "false"})
        _produce(bootstrap, "warmup", 4_000)
        _root_ingest(spark, bootstrap, "warmup")
        cpu = _cpu_seconds()
        source_s, rows, rejects, stages = _root_ingest(spark, bootstrap, "bench")
        source_cpu = _since(cpu)
        if rows != records or rejects:
            raise SystemExit(f"the root table has {rows} rows and {rejects} rejects, not {records}")

        if not CATCH_UP_EPOCHS:
            _report(records, (plain_s, plain_cpu), (source_s, source_cpu), stages)
            return
        barriers = _produce_epochs(bootstrap, "catchup")
        small_s, small_slices, _ = _catch_up(
            spark, bootstrap, "catchup", barriers, backlog_threshold=None
        )
        large_s, large_slices, catch_up = _catch_up(
            spark, bootstrap, "catchup", barriers, backlog_threshold=CATCH_UP_EPOCHS // 2
        )

    _report(records, (plain_s, plain_cpu), (source_s, source_cpu), stages)
    print(f"catch-up: {CATCH_UP_RECORDS:,} records behind {CATCH_UP_EPOCHS} pending epochs")
    print(f"  small epochs     : {small_s:8.2f} s ({small_slices} slices)")
    print(f"  one large slice  : {large_s:8.2f} s ({large_slices} slice, {catch_up} catch-up)")
    print(f"  speed-up         : {small_s / large_s:8.1f}x")


def _report(
    records: int,
    plain: tuple[float, dict[str, float]],
    source: tuple[float, dict[str, float]],
    stages: dict[str, float],
) -> None:
    """``plain``, ``source``: (wall seconds, CPU seconds by process) of (a) and (b)."""
    (plain_s, plain_parts), (source_s, source_parts) = plain, source
    plain_cpu, source_cpu = sum(plain_parts.values()), sum(source_parts.values())
    plain_rate, source_rate = records / plain_s, records / source_s
    ratio = source_rate / plain_rate
    print(f"{'path':<46} {'seconds':>8} {'records/s':>12} {'CPU-s':>7}")
    print(
        f"{'(a) kafka-python poll + json.loads':<46} {plain_s:>8.2f} {plain_rate:>12,.0f} "
        f"{plain_cpu:>7.1f}"
    )
    print(
        f"{'(b) run_once: KafkaSource -> Delta root table':<46} {source_s:>8.2f} "
        f"{source_rate:>12,.0f} {source_cpu:>7.1f}"
    )
    print(
        "    (b) CPU-s by process: "
        + ", ".join(f"{part} {seconds:.1f}" for part, seconds in source_parts.items())
    )
    print(f"    CPU-s per record, (b)/(a): {source_cpu / plain_cpu:.2f}")
    print("    stages (s): " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"ratio (b)/(a): {ratio:.2f} (target >= {TARGET_RATIO}) {verdict}")
    print(load_average())


if __name__ == "__main__":
    main()
