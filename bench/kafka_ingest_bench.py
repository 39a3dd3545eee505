"""Kafka ingest throughput: KafkaSource against a plain kafka-python consume loop.

Starts a local tansu broker, produces ``RECORDS`` small JSON records to a topic of
``PARTITIONS`` partitions (one producer process per core, batched), then times:

(a) a plain kafka-python loop: one consumer assigned to every partition, reading from
    the beginning to the end and ``json.loads``-ing each value;
(b) ``KafkaSource.cut`` + ``read`` and writing the rows (and rejects) to Spark's
    ``noop`` sink: the whole slice is read, decoded and validated in Spark tasks.

Prints records/s of both and the ratio (b)/(a) (target: at least 0.5). Spark start-up
and the first Python workers are warmed up on a small topic before (b) is timed.

Run: ``python -m bench.kafka_ingest_bench`` (or through ``python -m bench``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from datetime import UTC, datetime

RECORDS = 1_000_000
PARTITIONS = 4
TARGET_RATIO = 0.5
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


def _source_ingest(spark, bootstrap: str, topic: str) -> tuple[float, int, int]:
    from etl.sources.base import SliceRequest
    from etl.sources.kafka import KafkaSource

    source = KafkaSource("bench", topics=[topic], bootstrap_servers=bootstrap, schema=SCHEMA)
    start = time.perf_counter()
    bounds = source.cut(
        SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None)
    )
    data = source.read(spark, bounds, epoch=1)
    data.rows.write.format("noop").mode("overwrite").save()
    assert data.rejects is not None
    data.rejects.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - start
    return elapsed, data.rows.count(), data.rejects.count()


def main(records: int = RECORDS) -> None:
    from etl.sources.kafka_broker import TansuBroker
    from etl.spark import build_spark

    records -= records % PARTITIONS
    with TansuBroker() as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topics({"bench": PARTITIONS, "warmup": PARTITIONS})
        produce_s = _produce(bootstrap, "bench", records)
        print(f"produced {records:,} records in {produce_s:.1f}s ({records / produce_s:,.0f}/s)")

        plain_s = _plain_consume(bootstrap, "bench", records)

        spark = build_spark(app_name="kafka-ingest-bench", conf={"spark.ui.enabled": "false"})
        _produce(bootstrap, "warmup", 4_000)
        _source_ingest(spark, bootstrap, "warmup")
        source_s, rows, rejects = _source_ingest(spark, bootstrap, "bench")
        if rows != records or rejects:
            raise SystemExit(f"KafkaSource read {rows} rows and {rejects} rejects, not {records}")

    plain_rate, source_rate = records / plain_s, records / source_s
    ratio = source_rate / plain_rate
    print(f"{'path':<42} {'seconds':>8} {'records/s':>12}")
    print(f"{'(a) kafka-python poll + json.loads':<42} {plain_s:>8.2f} {plain_rate:>12,.0f}")
    print(f"{'(b) KafkaSource cut+read -> noop sink':<42} {source_s:>8.2f} {source_rate:>12,.0f}")
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"ratio (b)/(a): {ratio:.2f} (target >= {TARGET_RATIO}) {verdict}")


if __name__ == "__main__":
    main()
