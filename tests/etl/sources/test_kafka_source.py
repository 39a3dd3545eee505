"""KafkaSource against a real Kafka-protocol broker (tansu), over the wire."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from etl.errors import SourceError
from etl.sources.base import SliceRequest
from etl.sources.kafka import (
    KAFKA_REJECT_COLUMNS,
    KafkaDataLossError,
    KafkaSource,
    KafkaTopicError,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SCHEMA = "id long not null, name string, amount decimal(10,2), tags array<string>, ts timestamp"


def _source(bootstrap: str, topics: list[str], **options) -> KafkaSource:
    options.setdefault("schema", SCHEMA)
    return KafkaSource("orders", topics=topics, bootstrap_servers=bootstrap, **options)


def _cut(source: KafkaSource, previous=None, *, barrier: datetime | None = None, epoch: int = 1):
    return source.cut(
        SliceRequest(
            epoch=epoch,
            first_epoch=epoch,
            barrier_ts=barrier or datetime.now(UTC),
            previous_bounds=previous,
        )
    )


def _ranges(bounds) -> dict[tuple[str, int], tuple[int, int]]:
    return {(r["topic"], r["partition"]): (r["start"], r["end"]) for r in bounds["ranges"]}


def _order(i: int, **extra) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "amount": "1.50", **extra}).encode()


def _ids(frame) -> list[int]:
    return sorted(r["id"] for r in frame.select("id").collect())


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        consumer.close()
    return {tp.partition: offset for tp, offset in ends.items()}


def test_a_large_batch_is_fully_inside_a_once_slice(
    spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(2)
    kafka_produce(topic, [_order(i) for i in range(3000)], partitions=2)
    kafka_produce(topic, [_order(i) for i in range(3000, 3500)], partitions=2)
    # The case this test is about: the broker's ListOffsets reports the last batch's base
    # offset + 1, far short of the 1750 records each partition holds.
    assert all(end < 1750 for end in _end_offsets(kafka_bootstrap, topic, 2).values())

    source = _source(kafka_bootstrap, [topic], max_records_per_task=400)
    bounds = _cut(source)

    assert _ranges(bounds) == {(topic, 0): (0, 1750), (topic, 1): (0, 1750)}
    data = source.read(spark, bounds, epoch=1)
    assert _ids(data.rows) == list(range(3500))
    assert data.rejects.count() == 0
    assert data.rows.rdd.getNumPartitions() == 10  # 2 partitions x ceil(1750 / 400) tasks


def test_slices_are_contiguous_and_replays_read_the_same_rows(
    spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(3)
    source = _source(kafka_bootstrap, [topic], include={"partition", "offset"})
    kafka_produce(topic, [_order(i) for i in range(0, 600)], partitions=3)
    first = _cut(source, epoch=1)
    kafka_produce(topic, [_order(i) for i in range(600, 900)], partitions=3)
    second = _cut(source, first, epoch=2)
    third = _cut(source, second, epoch=3)  # nothing new: empty ranges

    one, two, three = _ranges(first), _ranges(second), _ranges(third)
    for partition in one:
        assert one[partition][0] == 0
        assert two[partition][0] == one[partition][1]
        assert three[partition] == (two[partition][1], two[partition][1])
    assert two[(topic, 0)] == (200, 300)

    read_once = source.read(spark, first, epoch=1).rows
    replayed = source.read(spark, json.loads(json.dumps(first)), epoch=1).rows
    columns = ["_kafka_partition", "_kafka_offset", "id", "name", "amount"]
    assert sorted(read_once.select(columns).collect()) == sorted(replayed.select(columns).collect())
    assert _ids(read_once) == list(range(600))
    assert _ids(source.read(spark, second, epoch=2).rows) == list(range(600, 900))
    assert source.read(spark, third, epoch=3).rows.count() == 0


def test_records_after_the_barrier_wait_for_the_next_slice(
    spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(1)
    source = _source(kafka_bootstrap, [topic])
    kafka_produce(topic, [_order(i) for i in range(100)])
    barrier = datetime.now(UTC)
    time.sleep(0.01)
    # Several batches after the barrier, more records than the first search window.
    for start in range(100, 5100, 1000):
        kafka_produce(topic, [_order(i) for i in range(start, start + 1000)])

    first = _cut(source, barrier=barrier)
    assert _ranges(first) == {(topic, 0): (0, 100)}
    second = _cut(source, first, epoch=2)
    assert _ranges(second) == {(topic, 0): (100, 5100)}
    assert _ids(source.read(spark, first, epoch=1).rows) == list(range(100))


def test_every_offset_is_a_row_or_a_reject(spark, kafka_bootstrap, kafka_topic, kafka_produce):
    topic = kafka_topic(1)
    messages: list[tuple[bytes | None, bytes | None, str | None]] = [
        # (key, value, expected reject reason or None for a row)
        (b"k0", _order(0, tags=["a", "b"], ts="2024-05-01T10:00:00+02:00"), None),
        (b"k1", b'{"id": 1, "name": "x", "unknown": {"ignored": true}}', None),
        (b"k2", b"{not json", "decode"),
        (b"k3", b"\xff\xfe not utf-8", "decode"),
        (b"k4", b'{"id": "4"}', "schema"),
        (b"k5", b'{"name": "no id"}', "schema"),
        (b"k6", b'{"id": null}', "schema"),
        (b"k7", b"[1, 2, 3]", "schema"),
        (b"k8", None, "decode"),
        (b"\xff", _order(9), "decode"),
        (b"k10", b'{"id": 10, "amount": "1.234"}', "schema"),
        (b"k11", b'{"id": 11, "ts": "yesterday"}', "schema"),
        (b"k12", b'{"id": 12, "tags": ["a", 5]}', "schema"),
        (b"k13", b'{"id": 9223372036854775808}', "schema"),
        (b"k14", b'{"id": true}', "schema"),
        (None, b'{"id": 15, "amount": 99999999.99}', None),
    ]
    kafka_produce(
        topic,
        [m[1] for m in messages],
        keys=[m[0] for m in messages],
        headers=[[("h", b"v")]] * len(messages),
    )
    source = _source(kafka_bootstrap, [topic], include={"offset", "key", "headers"})
    data = source.read(spark, _cut(source), epoch=7)

    rows = {r["_kafka_offset"]: r for r in data.rows.collect()}
    rejects = {r["offset"]: r for r in data.rejects.collect()}
    assert set(rows) | set(rejects) == set(range(len(messages)))
    assert not set(rows) & set(rejects)
    for offset, (key, value, reason) in enumerate(messages):
        if reason is None:
            assert offset in rows, f"offset {offset} should be a row"
        else:
            reject = rejects[offset]
            assert reject["reason"] == reason, (offset, reject["detail"])
            assert (reject["key"], reject["value"]) == (key, value)
            assert reject["topic"] == topic and reject["partition"] == 0
            assert reject["_epoch"] == 7 and reject["timestamp"] is not None
    assert list(data.rejects.columns) == list(KAFKA_REJECT_COLUMNS)
    assert rows[0]["tags"] == ["a", "b"]
    assert rows[0]["ts"] == datetime(2024, 5, 1, 8, 0)  # UTC, as the session time zone
    assert str(rows[0]["amount"]) == "1.50"
    assert rows[0]["_kafka_key"] == "k0" and rows[15]["_kafka_key"] is None
    assert [(h["key"], h["value"]) for h in rows[0]["_kafka_headers"]] == [("h", b"v")]
    assert rows[1]["name"] == "x" and rows[1]["amount"] is None
    assert "id: required" in rejects[5]["detail"]


def test_nested_types_are_decoded_and_checked(spark, kafka_bootstrap, kafka_topic, kafka_produce):
    topic = kafka_topic(1)
    values = [
        {"id": 1, "s": {"a": 1, "b": ["2024-01-02", None]}, "m": {"x": 1.5, "y": None},
         "bin": "aGVsbG8=", "f": 1.5, "t": "2024-01-01T10:00:00"},
        {"id": 2, "s": {"b": []}},
        {"id": 3, "bin": "not base64!"},
        {"id": 4, "f": 1e39},
        {"id": 5, "t": "2024-01-01T10:00:00+01:00"},
        {"id": 6, "m": {"x": "12345.6"}},
        {"id": 7, "s": None, "m": None},
    ]  # fmt: skip
    kafka_produce(topic, [json.dumps(v).encode() for v in values])
    schema = (
        "id int not null, s struct<a: int not null, b: array<date>>, "
        "m map<string, decimal(5,1)>, bin binary, f float, t timestamp_ntz"
    )
    source = _source(kafka_bootstrap, [topic], schema=schema)
    data = source.read(spark, _cut(source), epoch=1)

    rows = sorted(data.rows.collect())
    assert [r["id"] for r in rows] == [1, 7]
    first = rows[0]
    assert (first["s"]["a"], first["s"]["b"]) == (1, [date(2024, 1, 2), None])
    assert first["m"] == {"x": Decimal("1.5"), "y": None}
    assert (first["bin"], first["f"], first["t"]) == (b"hello", 1.5, datetime(2024, 1, 1, 10))
    details = {r["offset"]: r["detail"] for r in data.rejects.collect()}
    assert sorted(details) == [1, 2, 3, 4, 5]
    assert details[1].startswith("s.a: required")
    assert details[2].startswith("bin: expected a base64 string")
    assert details[5].startswith("m{}: expected a decimal(5,1)")


def test_an_idle_topic_gives_empty_slices(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(2)
    source = _source(kafka_bootstrap, [topic], include={"offset"})
    bounds = _cut(source)

    assert _ranges(bounds) == {(topic, 0): (0, 0), (topic, 1): (0, 0)}
    data = source.read(spark, bounds, epoch=1)
    assert data.rows.count() == 0 and data.rejects.count() == 0
    assert data.rows.columns == ["id", "name", "amount", "tags", "ts", "_kafka_offset"]
    assert list(data.rejects.columns) == list(KAFKA_REJECT_COLUMNS)


def test_a_partition_new_to_the_source_starts_at_its_earliest_offset(
    spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    # tansu cannot add partitions to a topic (no CreatePartitions), so the previous slice
    # is one cut when the topic had only partition 0: its bounds do not list partition 1.
    topic = kafka_topic(2)
    source = _source(kafka_bootstrap, [topic])
    kafka_produce(topic, [_order(i) for i in range(10)], partition=0)
    kafka_produce(topic, [_order(i) for i in range(10, 15)], partition=1)
    earlier = _cut(source)
    earlier["ranges"] = [r for r in earlier["ranges"] if r["partition"] == 0]

    bounds = _cut(source, earlier, epoch=2)
    assert _ranges(bounds) == {(topic, 0): (10, 10), (topic, 1): (0, 5)}
    assert _ids(source.read(spark, bounds, epoch=2).rows) == list(range(10, 15))


def test_a_second_topic_is_read_alongside(spark, kafka_bootstrap, kafka_topic, kafka_produce):
    first, second = kafka_topic(1), kafka_topic(1)
    kafka_produce(first, [_order(i) for i in range(5)])
    kafka_produce(second, [_order(i) for i in range(5, 8)])
    source = _source(kafka_bootstrap, [first, second], include={"topic"})
    data = source.read(spark, _cut(source), epoch=1)
    expected = [(first, i) for i in range(5)] + [(second, i) for i in range(5, 8)]
    assert sorted((r["_kafka_topic"], r["id"]) for r in data.rows.collect()) == sorted(expected)


def test_deleted_records_are_data_loss_never_skipped(
    spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    # tansu cannot delete records (DeleteRecords is unimplemented, retention is not
    # enforced), so the partition's earliest offset stays 0. The check compares the
    # broker-reported earliest offset with where the slice must start; a slice that
    # must start before it (here: offset -3) is exactly the situation after deletion.
    topic = kafka_topic(1)
    kafka_produce(topic, [_order(i) for i in range(5)])
    source = _source(kafka_bootstrap, [topic])
    bounds = _cut(source)
    lost = {**bounds, "ranges": [{**bounds["ranges"][0], "end": -3}]}

    with pytest.raises(KafkaDataLossError) as cut_error:
        _cut(source, lost, epoch=2)
    assert (cut_error.value.topic, cut_error.value.partition) == (topic, 0)
    assert (cut_error.value.expected_offset, cut_error.value.earliest_offset) == (-3, 0)
    assert "3 records were deleted" in str(cut_error.value)

    replay = {**bounds, "ranges": [{**bounds["ranges"][0], "start": -3}]}
    with pytest.raises(KafkaDataLossError) as read_error:
        source.read(spark, replay, epoch=4)
    assert read_error.value.epoch == 4


def test_a_recreated_topic_is_refused(
    spark, kafka_broker, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(1)
    kafka_produce(topic, [_order(i) for i in range(50)])
    source = _source(kafka_bootstrap, [topic])
    bounds = _cut(source)
    kafka_broker.delete_topics([topic])
    kafka_broker.create_topics({topic: 1})
    kafka_produce(topic, [_order(i) for i in range(10)])

    with pytest.raises(KafkaTopicError, match="recreated or truncated"):
        _cut(source, bounds, epoch=2)
    with pytest.raises(Exception, match="recreated or truncated"):
        source.read(spark, bounds, epoch=1).rows.count()


def test_transaction_markers_are_offsets_without_records(spark, kafka_bootstrap, kafka_topic):
    from kafka import KafkaProducer

    topic = kafka_topic(1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic)
    producer.init_transactions()
    for first in (0, 5):
        producer.begin_transaction()
        for i in range(first, first + 5):
            producer.send(topic, _order(i), partition=0)
        producer.commit_transaction()
    producer.close()
    # Offsets 5 and 11 hold commit markers: tasks of three offsets start and end on them.
    source = _source(kafka_bootstrap, [topic], include={"offset"}, max_records_per_task=3)
    bounds = _cut(source)
    assert _ranges(bounds) == {(topic, 0): (0, 11)}
    rows = source.read(spark, bounds, epoch=1).rows.collect()
    assert sorted((r["_kafka_offset"], r["id"]) for r in rows) == [
        (offset, i) for i, offset in enumerate([0, 1, 2, 3, 4, 6, 7, 8, 9, 10])
    ]
    assert _ranges(_cut(source, bounds, epoch=2)) == {(topic, 0): (11, 11)}


def test_a_missing_topic_is_an_error(kafka_bootstrap):
    with pytest.raises(KafkaTopicError, match="does not exist"):
        _cut(_source(kafka_bootstrap, ["no_such_topic_here"]))


def test_both_frames_come_from_one_read_of_kafka(
    spark, kafka_broker, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(1)
    kafka_produce(topic, [_order(i) if i % 4 else b"bad" for i in range(200)])
    source = _source(kafka_bootstrap, [topic])
    data = source.read(spark, _cut(source), epoch=1)

    assert data.rows.count() == 150
    kafka_broker.delete_topics([topic])  # a second read of Kafka would now fail
    assert data.rejects.count() == 50
    assert data.rows.count() == 150


def test_late_records_follow_the_stated_policy(spark, kafka_bootstrap, kafka_topic, kafka_produce):
    topic = kafka_topic(1)
    lateness = timedelta(minutes=5)

    def event(i: int, at: datetime) -> bytes:
        return _order(i, ts=at.isoformat())

    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    kafka_produce(topic, [event(0, long_ago)])  # first slice: nothing can be late
    options = dict(barrier="event_time", event_time_column="ts", allowed_lateness=lateness)
    keep = _source(kafka_bootstrap, [topic], late_records="next_epoch", **options)
    first = _cut(keep)
    barrier = datetime.fromisoformat(first["barrier_ts"])
    kafka_produce(
        topic,
        [
            event(1, barrier - lateness - timedelta(seconds=1)),  # late
            event(2, barrier - lateness + timedelta(seconds=1)),  # within the allowed lateness
            event(3, barrier + timedelta(seconds=1)),  # on time
            event(4, long_ago),  # late
            b'{"id": 5}',  # no event time
        ],
    )
    second = _cut(keep, first, epoch=2)
    assert second["late_before"] == (barrier - lateness).isoformat()
    assert _ids(keep.read(spark, first, epoch=1).rows) == [0]

    kept = keep.read(spark, second, epoch=2)
    assert _ids(kept.rows) == [1, 2, 3, 4]
    assert [r["reason"] for r in kept.rejects.collect()] == ["schema"]

    reject = _source(kafka_bootstrap, [topic], late_records="reject", **options)
    split = reject.read(spark, second, epoch=2)
    assert _ids(split.rows) == [2, 3]
    late = {r["offset"]: r for r in split.rejects.collect()}
    assert {o: r["reason"] for o, r in late.items()} == {1: "late", 4: "late", 5: "schema"}
    assert "the previous barrier minus the allowed lateness" in late[1]["detail"]


def test_backlog_counts_the_records_behind(kafka_bootstrap, kafka_topic, kafka_produce):
    topic = kafka_topic(1)
    source = _source(kafka_bootstrap, [topic], backlog_records=50)
    start = _cut(source)
    assert not source.is_backlogged(start)
    for _ in range(3):  # separate batches: ListOffsets on tansu lags by one batch
        kafka_produce(topic, [_order(i) for i in range(40)])
    assert source.is_backlogged(start)
    assert not source.is_backlogged(_cut(source, start, epoch=2))
    assert not _source(kafka_bootstrap, [topic]).is_backlogged(start)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topics": []}, "non-empty"),
        ({"value_format": "avro"}, "unknown value_format"),
        ({"schema": None}, "need a schema"),
        ({"value_format": "bytes"}, "only applies to json"),
        ({"include": {"key"}, "key_format": "none"}, "key_format"),
        ({"include": {"partitions"}}, "unknown include"),
        ({"barrier": "event_time"}, "event_time_column"),
        ({"barrier": "event_time", "event_time_column": "name"}, "timestamp field"),
        ({"schema": "id long, m map<int, string>"}, "cannot be decoded"),
        ({"schema": "_kafka_offset long"}, "reserved"),
        ({"consumer_options": {"group_id": "g"}}, "may not set"),
    ],
)
def test_bad_options_are_refused(spark, options, message):
    arguments = {"topics": ["t"], "bootstrap_servers": "127.0.0.1:1", "schema": SCHEMA, **options}
    with pytest.raises(SourceError, match=message):
        KafkaSource("orders", **arguments)
