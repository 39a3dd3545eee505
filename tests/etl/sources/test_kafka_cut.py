"""KafkaSource.cut against a brute-force computation over every record (tansu, over the wire).

A slice of a partition ends one past the last record (highest offset) whose timestamp is at
or before the barrier (-1 counts as at or before), and never before where the previous slice
ended. The cut reads from where the broker's ListOffsets-by-timestamp says the records after
the barrier begin, which is only a hint: timestamps here are out of order, -1, equal to the
barrier, and tansu answers by batch append time, so the hint is often wrong both ways. The
cut must also be exact when the answer is any offset at all, none, or an error: those
answers replace the broker's for the cut's consumer (everything else is the broker's).
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import pytest

from etl.sources.base import SliceRequest
from etl.sources.kafka import KafkaSource
from etl.sources.kafka.bounds import EPOCH_UTC, Bounds, Range

pytestmark = pytest.mark.kafka

PARTITIONS = 4  # the last one stays empty


def _at(ms: int) -> datetime:
    return EPOCH_UTC + timedelta(milliseconds=ms)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _produce_waves(producer, topic: str, rng: random.Random) -> list[int]:
    """Records in waves appended a pause apart. Partition 0: a few past records, then
    2,620 far-future ones (a barrier between the waves is found only by searching back
    below the hint, or below the end when the broker gives no hint); 1: timestamps out of order around the append time,
    -1 among them; 2: the producer's own timestamps. Returns the wall-clock ms between the
    waves (where an append-time hint points at a wave's first batch)."""
    between = []
    waves = [
        {0: ("past", 40), 1: ("mixed", 50), 2: ("now", 50)},
        {0: ("far", 2_500), 1: ("mixed", 60), 2: ("now", 60)},
        {0: ("far", 120), 1: ("mixed", 80), 2: ("now", 70)},
        {1: ("past", 30), 2: ("now", 80)},
    ]
    for wave in waves:
        now = _now_ms()
        for partition, (kind, count) in wave.items():
            for _ in range(count):
                producer.send(topic, b"x", partition=partition, timestamp_ms=_stamp(kind, now, rng))
        producer.flush()
        time.sleep(0.03)
        between.append(_now_ms())
        time.sleep(0.03)
    return between


def _stamp(kind: str, now: int, rng: random.Random) -> int | None:
    if kind == "now":
        return None
    if kind == "past":
        return now - rng.randrange(1, 5_000)
    if kind == "far":
        return now + 3_600_000 + rng.randrange(0, 1_000)
    roll = rng.random()
    if roll < 0.1:
        return -1
    if roll < 0.5:
        return now - rng.randrange(0, 3_000)
    return now + rng.randrange(0, 3_000)


def _all_records(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """(offset, timestamp) of every record of every partition, read from the beginning."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = consumer.end_offsets(partitions)
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    try:
        # Every partition up to its end, then nothing more for a second (the end offset a
        # broker reports may be short of its last record); a slow first fetch only waits.
        deadline = time.monotonic() + 120
        idle_since = time.monotonic()
        while time.monotonic() < deadline and (
            time.monotonic() - idle_since < 1.0
            or any(len(found[tp.partition]) < ends[tp] for tp in partitions)
        ):
            for tp, records in consumer.poll(timeout_ms=200).items():
                found[tp.partition].extend((r.offset, r.timestamp) for r in records)
                idle_since = time.monotonic()
    finally:
        consumer.close()
    assert all(len(found[tp.partition]) >= ends[tp] for tp in partitions)
    return found


def _expected_end(records: list[tuple[int, int]], start: int, barrier_ms: int) -> int:
    at_or_before = [o for o, ts in records if o >= start and ts <= barrier_ms]
    return max(at_or_before) + 1 if at_or_before else start


def _previous(topic: str, starts: dict[int, int], barrier_ms: int) -> dict[str, object]:
    ranges = tuple(Range(topic, p, 0, end) for p, end in starts.items())
    return Bounds("system_time", _at(barrier_ms), None, ranges).to_json()


@dataclass(frozen=True)
class Produced:
    topic: str
    records: dict[int, list[tuple[int, int]]]
    """(offset, timestamp) of every record, per partition."""
    between: list[int]


@pytest.fixture(scope="module")
def produced(kafka_bootstrap, kafka_broker, kafka_producer) -> Produced:
    topic = f"cut_{uuid.uuid4().hex[:12]}"
    kafka_broker.create_topics({topic: PARTITIONS})
    between = _produce_waves(kafka_producer, topic, random.Random(28))
    return Produced(topic, _all_records(kafka_bootstrap, topic), between)


HintAnswer = Literal["broker", "random", "none", "error"]


def _answer_hints(monkeypatch, answer: HintAnswer, rng: random.Random) -> None:
    """Replace the broker's answer to ListOffsets by timestamp (the cut's hint), for the
    cut's own consumer: any offset (past the end, below the slice), none, or an error."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaTimeoutError
    from kafka.structs import OffsetAndTimestamp

    def answered(consumer, timestamps, timeout_ms=None):
        if answer == "error":
            raise KafkaTimeoutError("no answer to ListOffsets")
        return {
            tp: None
            if answer == "none"
            else OffsetAndTimestamp(rng.randrange(0, 2_800), at + rng.randrange(0, 99), -1)
            for tp, at in timestamps.items()
        }

    if answer != "broker":
        monkeypatch.setattr(KafkaConsumer, "offsets_for_times", answered)


@pytest.mark.parametrize("answer", ["broker", "random", "none", "error"])
def test_the_cut_ends_where_a_scan_of_every_record_says(
    kafka_bootstrap, produced, monkeypatch, answer: HintAnswer
):
    rng = random.Random(answer)
    records = produced.records
    stamps = sorted({ts for rs in records.values() for _, ts in rs if ts >= 0})
    barriers = sorted(
        {stamps[0] - 60_000, stamps[-1] + 60_000, *produced.between}
        | {ts + delta for ts in rng.sample(stamps, 8) for delta in (-1, 0)}
    )
    _answer_hints(monkeypatch, answer, rng)
    source = KafkaSource(
        "cut", topics=[produced.topic], bootstrap_servers=kafka_bootstrap, value_format="bytes"
    )

    for barrier_ms in barriers:
        for starts in (
            {p: 0 for p in range(PARTITIONS)},
            {p: rng.randrange(0, len(rs) + 1) for p, rs in records.items()},
        ):
            previous = (
                _previous(produced.topic, starts, barrier_ms - 1) if any(starts.values()) else None
            )
            bounds = source.cut(
                SliceRequest(
                    epoch=2, first_epoch=2, barrier_ts=_at(barrier_ms), previous_bounds=previous
                )
            )
            got = {r["partition"]: (r["start"], r["end"]) for r in bounds["ranges"]}
            expected = {
                p: (starts[p], _expected_end(rs, starts[p], barrier_ms))
                for p, rs in records.items()
            }
            assert got == expected, (barrier_ms, starts)
