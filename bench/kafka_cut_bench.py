"""The cost of cutting a Kafka slice against reading the records after the barrier once.

Starts a local tansu broker and, for each N in ``TAILS`` (``DB_BENCH_CUT_TAILS``), a topic
of ``PARTITIONS`` partitions holding ``BEFORE`` records per partition produced before the
barrier and N produced after it (CreateTime timestamps, a short pause either side of the
barrier). The default N are just past 1,024, 1,024 + 4,096 and 1,024 + 4,096 + 16,384: the
worst cases of a search back from the end in windows growing fourfold. Then, ``REPEATS``
times each, medians printed:

(a) a plain kafka-python consume of the tail: one consumer (made beforehand) assigned to
    every partition, seeked to the first record after the barrier, polled to the end;
(b) a fresh consumer's set-up as a cut makes it: connect, topic metadata, beginning and
    end offsets, close;
(c) ``KafkaSource.cut`` from the topic's beginning (no previous slice) to the barrier.

Prints wall and CPU seconds (this process, all threads; the broker is left out), the ratios
(c)/(a) of both and the share (b)/(c) of the cut's wall time. The cut's ranges are checked against
the ends computed from every record's timestamp. Run: ``python -m bench kafka_cut``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from bench._common import env_int, env_ints, load_average, median, plain_kafka_consumer

PARTITIONS = 4
BEFORE = env_int("DB_BENCH_CUT_BEFORE", 20_000)
TAILS = env_ints("DB_BENCH_CUT_TAILS", (1_100, 5_200, 21_600))
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


class _Clock:
    """Wall and CPU seconds (of this process) since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def _plain_tail(
    bootstrap: str, topic: str, firsts: dict[int, int], ends: dict[int, int]
) -> tuple[float, float]:
    from kafka import TopicPartition

    consumer = plain_kafka_consumer(bootstrap)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.position(partitions[0])  # connected and the metadata known before timing
    clock = _Clock()
    for tp in partitions:
        consumer.seek(tp, firsts[tp.partition])
    pending = {tp for tp in partitions if firsts[tp.partition] < ends[tp.partition]}
    while pending:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            if records[-1].offset + 1 >= ends[tp.partition]:
                pending.discard(tp)
    elapsed = clock.read()
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


def _case(bootstrap: str, broker, tail: int) -> dict[str, float]:
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
        clock = _Clock()
        bounds = source.cut(request)
        cut.append(clock.read())
        got = {r["partition"]: r["end"] for r in bounds["ranges"]}
        if got != expected:
            raise SystemExit(f"the cut of {topic} ends at {got}, not at {expected}")
    return {
        "plain_wall": median([wall for wall, _ in plain]),
        "plain_cpu": median([cpu for _, cpu in plain]),
        "set_up": median(set_up),
        "cut_wall": median([wall for wall, _ in cut]),
        "cut_cpu": median([cpu for _, cpu in cut]),
    }


def main() -> None:
    from tests.support.tansu import TansuBroker

    print(
        f"{PARTITIONS} partitions, {BEFORE:,} records per partition before the barrier, "
        f"medians of {REPEATS}"
    )
    print(
        f"{'after/partition':>15} {'(a) wall':>9} {'CPU':>6} {'(b) wall':>9} {'(c) wall':>9} "
        f"{'CPU':>6} {'(c)/(a) wall':>13} {'CPU':>6} {'(b)/(c)':>8}"
    )
    with TansuBroker() as broker:
        for tail in TAILS:
            t = _case(broker.bootstrap_servers, broker, tail)
            print(
                f"{tail:>15,} {t['plain_wall']:>9.3f} {t['plain_cpu']:>6.3f} {t['set_up']:>9.3f} "
                f"{t['cut_wall']:>9.3f} {t['cut_cpu']:>6.3f} "
                f"{t['cut_wall'] / t['plain_wall']:>13.2f} {t['cut_cpu'] / t['plain_cpu']:>6.2f} "
                f"{t['set_up'] / t['cut_wall']:>8.2f}",
                flush=True,
            )
    print(load_average())


if __name__ == "__main__":
    main()
