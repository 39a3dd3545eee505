"""Kafka ingest throughput: the root table against a plain kafka-python consume loop,
and a backlog caught up in one large slice against the same records in small epochs.

Starts a local tansu broker, produces ``RECORDS`` small JSON records to a topic of
``PARTITIONS`` partitions (one producer process per core, batched), then times:

(a) a plain kafka-python loop: one consumer assigned to every partition, reading from
    the beginning to the end and ``json.loads``-ing each value;
(b) one ``Runner.run_once`` of a pipeline whose ingest job reads the topic with a
    ``KafkaSource``: the slice is cut and recorded, read, decoded and validated in Spark
    tasks, and committed to the Delta root table (and its rejects table), then sealed.

Prints records/s of both and the ratio (b)/(a) (target: at least 0.5). Spark start-up
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

RECORDS = 1_000_000
PARTITIONS = 4
TARGET_RATIO = 0.5
CATCH_UP_EPOCHS = 20
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


def _plain_consume(bootstrap: str, topic: str, records: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        max_poll_records=20_000,
    )
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


def _root_ingest(spark, bootstrap: str, topic: str) -> tuple[float, int, int]:
    """One ``run_once`` into a fresh warehouse: seconds, root rows, rejects."""
    with tempfile.TemporaryDirectory() as tmp:
        runner = _runner(Path(tmp), spark, bootstrap, topic, backlog_threshold=None)
        start = time.perf_counter()
        result = runner.run_once()
        elapsed = time.perf_counter() - start
        if not result.ok:
            raise SystemExit(f"the ingest run failed: {result.failures}")
        rows, rejects = _root_rows(runner)
    return elapsed, rows, rejects


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

        plain_s = _plain_consume(bootstrap, "bench", records)

        spark = build_spark(app_name="kafka-ingest-bench", conf={"spark.ui.enabled": "false"})
        _produce(bootstrap, "warmup", 4_000)
        _root_ingest(spark, bootstrap, "warmup")
        source_s, rows, rejects = _root_ingest(spark, bootstrap, "bench")
        if rows != records or rejects:
            raise SystemExit(f"the root table has {rows} rows and {rejects} rejects, not {records}")

        barriers = _produce_epochs(bootstrap, "catchup")
        small_s, small_slices, _ = _catch_up(
            spark, bootstrap, "catchup", barriers, backlog_threshold=None
        )
        large_s, large_slices, catch_up = _catch_up(
            spark, bootstrap, "catchup", barriers, backlog_threshold=CATCH_UP_EPOCHS // 2
        )

    plain_rate, source_rate = records / plain_s, records / source_s
    ratio = source_rate / plain_rate
    print(f"{'path':<46} {'seconds':>8} {'records/s':>12}")
    print(f"{'(a) kafka-python poll + json.loads':<46} {plain_s:>8.2f} {plain_rate:>12,.0f}")
    print(
        f"{'(b) run_once: KafkaSource -> Delta root table':<46} {source_s:>8.2f} {source_rate:>12,.0f}"
    )
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"ratio (b)/(a): {ratio:.2f} (target >= {TARGET_RATIO}) {verdict}")
    print(f"catch-up: {CATCH_UP_RECORDS:,} records behind {CATCH_UP_EPOCHS} pending epochs")
    print(f"  small epochs     : {small_s:8.2f} s ({small_slices} slices)")
    print(f"  one large slice  : {large_s:8.2f} s ({large_slices} slice, {catch_up} catch-up)")
    print(f"  speed-up         : {small_s / large_s:8.1f}x")


if __name__ == "__main__":
    main()
