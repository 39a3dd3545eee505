"""A Kafka source through the runner: every record accounted for, idle topics, new
partitions, backlog catch-up, and ``--once`` runs against a batching producer."""

from __future__ import annotations

import json
import time

import pytest

from catalog import EpochState
from tests.support.cli_runner import etl_here as etl
from tests.support.kafka_env import make_orders, order

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _offsets(rows: list[tuple]) -> list[tuple[int, int]]:
    return [(r[0], r[1]) for r in rows]


def test_every_message_lands_once_in_the_root_table_or_the_rejects(
    tmp_path, spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(2)
    bad = {
        3: (b"{not json", "decode"),
        8: (b"\xff\xfe not utf-8", "decode"),
        11: (None, "decode"),  # a tombstone
        14: (b'{"id": "14"}', "schema"),  # wrong type
        19: (b'{"name": "no id"}', "schema"),  # a NOT NULL field missing
        22: (b'{"id": 22, "amount": "lots"}', "schema"),
        25: (b"[1, 2]", "schema"),  # not an object
    }
    values = [bad[i][0] if i in bad else order(i) for i in range(40)]
    keys = [f"k{i}".encode() for i in range(40)]  # a tombstone needs a key
    metadata = kafka_produce(topic, values, partitions=2, keys=keys)
    where = {(m.partition, m.offset): i for i, m in enumerate(metadata)}
    orders = make_orders(tmp_path, spark, bootstrap=kafka_bootstrap, topics=[topic])

    result = orders.runner.run_once()

    assert result.ok, result.failures
    rows, rejects = orders.rows("orders"), orders.rows("orders_rejects")
    assert sorted(_offsets(rows) + _offsets(rejects)) == sorted(where)  # each offset once
    assert sorted(where[(p, o)] for p, o, *_ in rows) == [i for i in range(40) if i not in bad]
    assert all(where[(p, o)] == i for p, o, i, *_ in rows)
    got = {where[(p, o)]: (value, reason, epoch) for p, o, value, reason, epoch in rejects}
    assert got == {i: (value, reason, 1) for i, (value, reason) in bad.items()}
    topics = orders.read().table("orders_rejects").select("topic").distinct().collect()
    assert [r["topic"] for r in topics] == [topic]
    commit = orders.catalog.get_commit(1)
    assert commit is not None and set(commit.versions) >= {"orders", "orders_rejects"}


def test_a_once_run_takes_every_record_a_batching_producer_sent(
    tmp_path, spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(2)
    # Several large batches: a broker's ListOffsets may report only the last batch's
    # base offset + 1 (tansu does); the run must still take every record.
    for first in range(0, 3000, 1000):
        kafka_produce(topic, [order(i) for i in range(first, first + 1000)], partitions=2)
    orders = make_orders(tmp_path, spark, bootstrap=kafka_bootstrap, topics=[topic])

    assert orders.runner.run_once().ok

    assert sorted(r[2] for r in orders.rows("orders")) == list(range(3000))


def test_an_idle_topic_never_holds_the_pipeline_back(
    tmp_path, spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    busy, idle = kafka_topic(1), kafka_topic(2)
    orders = make_orders(tmp_path, spark, bootstrap=kafka_bootstrap, topics=[busy, idle])
    kafka_produce(busy, [order(i) for i in range(5)])
    assert orders.runner.run_once().ok
    for _ in range(2):  # nothing new anywhere: empty slices
        assert orders.runner.run_once().ok

    latest = orders.catalog.latest_epoch().id
    assert latest == 3
    written = orders.catalog.latest_written(["orders", "order_counts"])
    assert {t: s.epoch for t, s in written.items()} == {"orders": 3, "order_counts": 3}
    assert orders.catalog.get_commit(3) is not None
    empty = orders.catalog.get_slice("orders", 3).bounds["ranges"]
    assert all(r["start"] == r["end"] for r in empty)
    assert sorted(r[2] for r in orders.rows("orders")) == list(range(5))


def test_a_partition_added_mid_run_is_picked_up(
    tmp_path, spark, kafka_broker, kafka_bootstrap, kafka_topic, kafka_produce
):
    from kafka import KafkaProducer

    topic = kafka_topic(1)
    orders = make_orders(tmp_path, spark, bootstrap=kafka_bootstrap, topics=[topic])
    first = [order(i) for i in range(6)]
    kafka_produce(topic, first)
    assert orders.runner.run_once().ok
    # tansu cannot add partitions (no CreatePartitions). Recreating the topic with two
    # partitions and the same records at the same offsets of partition 0 is, to any
    # client, the same topic with a partition added.
    kafka_broker.delete_topics([topic])
    kafka_broker.create_topics({topic: 2})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)  # no stale metadata
    sent = [producer.send(topic, v, partition=0) for v in first + [order(i) for i in range(6, 9)]]
    sent += [producer.send(topic, order(i), partition=1) for i in range(100, 104)]
    producer.flush()
    producer.close()
    assert [f.get(timeout=10).offset for f in sent] == [*range(9), *range(4)]

    assert orders.runner.run_once().ok

    ranges = {r["partition"]: (r["start"], r["end"]) for r in
              orders.catalog.get_slice("orders", 2).bounds["ranges"]}  # fmt: skip
    assert ranges == {0: (6, 9), 1: (0, 4)}
    rows = orders.rows("orders")
    assert sorted((r[0], r[2], r[-1]) for r in rows) == sorted(
        [(0, i, 1) for i in range(6)] + [(0, i, 2) for i in range(6, 9)]
        + [(1, i, 2) for i in range(100, 104)]
    )  # fmt: skip


def test_a_backlog_is_caught_up_in_large_slices_then_epochs_are_small_again(
    tmp_path, spark, kafka_bootstrap, kafka_topic, kafka_produce
):
    topic = kafka_topic(1)
    orders = make_orders(
        tmp_path,
        spark,
        bootstrap=kafka_bootstrap,
        topics=[topic],
        backlog_threshold=3,
        backlog_records=50,
    )
    runner, catalog = orders.runner, orders.catalog
    kafka_produce(topic, [order(i) for i in range(5)])
    assert runner.run_once().ok  # epoch 1: small

    # The pipeline is down while records arrive and three epochs are issued: when it
    # comes back, the pending epochs are one batch and one large slice.
    for wave in range(3):
        kafka_produce(topic, [order(i) for i in range(10 + 10 * wave, 20 + 10 * wave)])
        time.sleep(0.01)
        runner.open_epoch()
    with runner:
        assert runner.run_pending().ok  # epochs 2..4 as one batch

    # Far behind in records (separate batches: tansu's ListOffsets lags one batch):
    for first in range(100, 400, 100):
        kafka_produce(topic, [order(i) for i in range(first, first + 100)])
    assert runner.run_once().ok  # epoch 5: catch-up by records
    kafka_produce(topic, [order(i) for i in range(1000, 1003)])
    assert runner.run_once().ok  # epoch 6: small again

    slices = {e: catalog.get_slice("orders", e) for e in range(1, 7)}
    assert slices[2] is None and slices[3] is None  # coalesced into epoch 4's slice
    catch_up = {e: s.catch_up for e, s in slices.items() if s is not None}
    assert catch_up == {1: False, 4: True, 5: True, 6: False}
    sizes = {
        e: sum(r["end"] - r["start"] for r in s.bounds["ranges"])
        for e, s in slices.items()
        if s is not None
    }
    assert sizes == {1: 5, 4: 30, 5: 300, 6: 3}
    assert catalog.table_epoch("orders", 3).state is EpochState.COALESCED
    assert catalog.table_epoch("order_counts", 4).state is EpochState.WRITTEN
    counts = orders.read().table("order_counts").collect()
    assert sorted((r["_epoch"], r["orders"]) for r in counts) == [
        (1, 5), (4, 30), (5, 300), (6, 3)
    ]  # fmt: skip
    assert len(orders.rows("orders")) == 338

    # Operators see which epochs were catch-up: `etl epochs` (no Spark needed).
    shown = etl("epochs", "orders", "--format", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    listed = {r["epoch"]: (r["state"], r["catch_up"]) for r in json.loads(shown.stdout)}
    assert listed == {
        1: ("WRITTEN", False),
        2: ("COALESCED", None),
        3: ("COALESCED", None),
        4: ("WRITTEN", True),
        5: ("WRITTEN", True),
        6: ("WRITTEN", False),
    }


def test_micro_batches_split_a_slice_in_order_and_cover_it_exactly(spark):
    from etl.sources.kafka import KafkaSource

    source = KafkaSource(
        "orders",
        topics=["t"],
        bootstrap_servers="127.0.0.1:1",
        value_format="bytes",
        max_records_per_micro_batch=4,
    )
    bounds = {
        "format": "kafka/1",
        "barrier": "system_time",
        "barrier_ts": "2026-01-01T00:00:00+00:00",
        "late_before": None,
        "ranges": [
            {"topic": "t", "partition": 0, "start": 10, "end": 16},
            {"topic": "t", "partition": 1, "start": 0, "end": 0},
            {"topic": "t", "partition": 2, "start": 3, "end": 6},
        ],
    }
    parts = source.micro_batches(bounds)

    spans = [[(r["partition"], r["start"], r["end"]) for r in p["ranges"]] for p in parts]
    assert spans == [[(0, 10, 14)], [(0, 14, 16), (2, 3, 5)], [(2, 5, 6)]]
    assert all(p["barrier_ts"] == bounds["barrier_ts"] for p in parts)
    assert source.micro_batches(json.loads(json.dumps(bounds))) == parts
    exactly_one = {**bounds, "ranges": [{**bounds["ranges"][0], "end": 14}]}
    assert source.micro_batches(exactly_one) == (exactly_one,)
