"""The cost of cutting a Kafka slice against reading the records after the barrier once.

Starts a local tansu broker and, for each N in ``TAILS`` (``DB_BENCH_CUT_TAILS``), a topic
of ``PARTITIONS`` partitions holding ``BEFORE`` records per partition produced before the
barrier and N produced after it (CreateTime timestamps, a short pause either side of the
barrier). Then, ``REPEATS`` times each, medians printed:

(a) a plain kafka-python consume of the tail: one consumer (made beforehand) assigned to
    every partition, seeked to the first record after the barrier, polled to the end;
(b) a fresh consumer's set-up as a cut makes it: connect, topic metadata, beginning and
    end offsets, close;
(c) ``KafkaSource.cut`` from the topic's beginning (no previous slice) to the barrier.

Prints seconds and the ratios (c)/(a) and (b)/(c). The cut's ranges are checked against
the ends computed from every record's timestamp. Run: ``python -m bench kafka_cut``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from bench._common import env_int, env_ints, load_average, median

PARTITIONS = 4
BEFORE = env_int("DB_BENCH_CUT_BEFORE", 20_000)
TAILS = env_ints("DB_BENCH_CUT_TAILS", (1_000, 5_000, 20_000))
REPEATS = env_int("DB_BENCH_CUT_REPEATS", 5)
PAUSE_S = 0.05


def _value(i: int) -> bytes:
    return json.dumps({"id": i, "user": f"user-{i % 9973}", "amount": i % 1000}).encode()


def _produce(bootstrap: str, topic: str, per_partition: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024)
    for i in range(per_partition * PARTITIONS):
        producer.send(topic, _value(i), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def _stamps(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, timestamp) of every record, per partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 1.0:
        for tp, records in consumer.poll(timeout_ms=200).items():
            found[tp.partition].extend((r.offset, r.timestamp) for r in records)
            idle_since = time.monotonic()
    consumer.close()
    return found


def _expected_ends(stamps: dict[int, list[tuple[int, int]]], barrier_ms: int) -> dict[int, int]:
    return {
        p: max((o + 1 for o, ts in records if ts <= barrier_ms), default=0)
        for p, records in stamps.items()
    }


def _plain_tail(bootstrap: str, topic: str, firsts: dict[int, int], ends: dict[int, int]) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        max_poll_records=20_000,
    )
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.position(partitions[0])  # connected and the metadata known before timing
    start = time.perf_counter()
    for tp in partitions:
        consumer.seek(tp, firsts[tp.partition])
    pending = {tp for tp in partitions if firsts[tp.partition] < ends[tp.partition]}
    while pending:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            if records[-1].offset + 1 >= ends[tp.partition]:
                pending.discard(tp)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _set_up(bootstrap: str, topic: str) -> float:
    """A cut's consumer set-up: connect, metadata, beginning and end offsets, close."""
    from kafka import KafkaConsumer, TopicPartition

    start = time.perf_counter()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.beginning_offsets(partitions)
    consumer.end_offsets(partitions)
    consumer.close()
    return time.perf_counter() - start


def _case(bootstrap: str, broker, tail: int) -> tuple[float, float, float]:
    from etl.sources.base import SliceRequest
    from etl.sources.kafka import KafkaSource

    topic = f"cut_{tail}"
    broker.create_topics({topic: PARTITIONS})
    _produce(bootstrap, topic, BEFORE)
    time.sleep(PAUSE_S)
    barrier = datetime.now(UTC)
    time.sleep(PAUSE_S)
    _produce(bootstrap, topic, tail)
    barrier_ms = int(barrier.timestamp() * 1000)
    stamps = _stamps(bootstrap, topic)
    expected = _expected_ends(stamps, barrier_ms)
    log_ends = {p: records[-1][0] + 1 for p, records in stamps.items()}

    source = KafkaSource("bench", topics=[topic], bootstrap_servers=bootstrap, value_format="bytes")
    request = SliceRequest(epoch=1, first_epoch=1, barrier_ts=barrier, previous_bounds=None)
    plain, set_up, cut = [], [], []
    for _ in range(REPEATS):
        plain.append(_plain_tail(bootstrap, topic, expected, log_ends))
        set_up.append(_set_up(bootstrap, topic))
        start = time.perf_counter()
        bounds = source.cut(request)
        cut.append(time.perf_counter() - start)
        got = {r["partition"]: r["end"] for r in bounds["ranges"]}
        if got != expected:
            raise SystemExit(f"the cut of {topic} ends at {got}, not at {expected}")
    return median(plain), median(set_up), median(cut)


def main() -> None:
    from tests.support.tansu import TansuBroker

    print(
        f"{PARTITIONS} partitions, {BEFORE:,} records per partition before the barrier, "
        f"medians of {REPEATS}"
    )
    print(
        f"{'after/partition':>15} {'(a) tail s':>11} {'(b) set-up s':>13} {'(c) cut s':>10} "
        f"{'(c)/(a)':>8} {'(b)/(c)':>8}"
    )
    with TansuBroker() as broker:
        for tail in TAILS:
            plain, set_up, cut = _case(broker.bootstrap_servers, broker, tail)
            print(
                f"{tail:>15,} {plain:>11.3f} {set_up:>13.3f} {cut:>10.3f} "
                f"{cut / plain:>8.2f} {set_up / cut:>8.2f}",
                flush=True,
            )
    print(load_average())


if __name__ == "__main__":
    main()
