"""Exactly once from Kafka into the root table across crashes.

A child process runs epoch 2 of the orders pipeline and dies (os._exit) at a fault point;
more records arrive; a fresh runner recovers and goes on. The tables must then equal,
row for row by partition and offset, those of a run that never crashed: no record lost,
none written twice, and the replay of epoch 2 reads its recorded slice, not a new cut.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from catalog import EpochState
from etl.faults import FAULT_ENV, FAULT_EXIT_CODE
from tests.support.kafka_env import make_orders, order

pytestmark = [pytest.mark.kafka, pytest.mark.recovery, pytest.mark.spark, pytest.mark.slow]

CHILD = Path(__file__).parents[2] / "support" / "crash_child.py"
PARTITIONS = 2
MICRO_BATCH = 10
BAD = {2: b"{not json", 7: b'{"id": "7"}', 12: b'{"name": "no id"}', 17: b"\xff\xfe"}


def _wave(first: int, count: int, bad: dict[int, bytes] | None = None) -> list[bytes]:
    return [(bad or {}).get(i - first, order(i)) for i in range(first, first + count)]


# Epoch 1: 10 good records. Epoch 2: 10 per partition, 2 bad in each, so with micro-batches
# of 10 offsets it commits rejects, orders (partition 0), rejects, orders (partition 1).
# Epoch 3: records produced after the crash, which the replay of epoch 2 must not take.
WAVES = [_wave(0, 10), _wave(100, 20, BAD), _wave(200, 6)]
EPOCH_2_COMMITS = 4


def _produce(producer, topic: str, values: list[bytes]) -> None:
    futures = [producer.send(topic, v, partition=i % PARTITIONS) for i, v in enumerate(values)]
    producer.flush()
    for future in futures:
        future.get(timeout=10)


def _new_topic(broker) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    broker.create_topics({name: PARTITIONS})
    return name


def _contents(orders) -> dict[str, list[tuple]]:
    reader = orders.read()
    return {
        "orders": orders.rows("orders"),
        "orders_rejects": orders.rows("orders_rejects"),
        "order_counts": sorted(
            tuple(r) for r in reader.table("order_counts").select("*").collect()
        ),
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spark, kafka_broker, kafka_producer):
    topic = _new_topic(kafka_broker)
    orders = make_orders(
        tmp_path_factory.mktemp("kafka-reference"),
        spark,
        bootstrap=kafka_broker.bootstrap_servers,
        topics=[topic],
        max_records_per_micro_batch=MICRO_BATCH,
    )
    for wave in WAVES:
        _produce(kafka_producer, topic, wave)
        assert orders.runner.run_once().ok
    return _contents(orders)


def test_the_reference_accounts_for_every_record(reference):
    produced = sum(len(w) for w in WAVES)
    assert len(reference["orders"]) + len(reference["orders_rejects"]) == produced
    assert len(reference["orders_rejects"]) == len(BAD)
    assert {r[-1] for r in reference["orders_rejects"]} == {2}
    assert [r[-1] for r in reference["orders"]].count(2) == 20 - len(BAD)


@pytest.mark.parametrize(
    ("fault", "rolled_back", "sealed_by_recovery"),
    [
        ("after_slice_recorded@ingest_orders:2", [], False),
        ("before_commit@ingest_orders:2", [], False),
        # The first commit of epoch 2 is the rejects table's: the output has none yet.
        ("after_commit@ingest_orders:2", ["orders_rejects"], False),
        ("between_micro_batches@ingest_orders:2", ["orders", "orders_rejects"], False),
        # The epoch's last commit, never recorded in the catalog: complete, so sealed.
        (f"after_commit@ingest_orders:2#{EPOCH_2_COMMITS}", [], True),
        ("after_seal@ingest_orders:2", [], False),
    ],
)
def test_crash_then_recover_writes_every_record_once(
    tmp_path, spark, kafka_broker, kafka_producer, reference, fault, rolled_back, sealed_by_recovery
):
    bootstrap = kafka_broker.bootstrap_servers
    topic = _new_topic(kafka_broker)
    orders = make_orders(
        tmp_path,
        spark,
        bootstrap=bootstrap,
        topics=[topic],
        max_records_per_micro_batch=MICRO_BATCH,
    )
    _produce(kafka_producer, topic, WAVES[0])
    assert orders.runner.run_once().ok
    _produce(kafka_producer, topic, WAVES[1])

    child = subprocess.run(
        [sys.executable, str(CHILD), "--kafka", bootstrap, topic, str(MICRO_BATCH), str(tmp_path)],
        env={**os.environ, FAULT_ENV: fault},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == FAULT_EXIT_CODE, child.stderr[-3000:]
    recorded = orders.catalog.get_slice("orders", 2)
    assert recorded is not None

    if "orders" in rolled_back:
        # Part of epoch 2 is committed: only read-uncommitted may see it.
        assert orders.read("read-uncommitted").table("orders").where("_epoch = 2").count() > 0
        assert orders.read("read-committed").table("orders").where("_epoch = 2").count() == 0

    _produce(kafka_producer, topic, WAVES[2])
    time.sleep(1.2)  # the child's 1 s lease expires; the new run takes it over
    with orders.runner:
        recovered = orders.runner.recover()
        assert orders.runner.run_pending().ok
    assert orders.catalog.get_slice("orders", 2).bounds == recorded.bounds
    assert orders.runner.run_once().ok

    assert _contents(orders) == reference
    undone = sorted(s.table for s in recovered.recovered if s.action == "rolled back")
    assert undone == sorted(rolled_back)
    for table in rolled_back:
        history = [h.state for h in orders.catalog.state_history(table, epoch=2)]
        assert EpochState.ROLLED_BACK in history
        assert orders.catalog.table_epoch(table, 2).state is EpochState.WRITTEN
    sealed = [s for s in recovered.recovered if s.action == "sealed"]
    assert [s.epochs for s in sealed] == ([(2,)] if sealed_by_recovery else [])
    assert orders.catalog.get_commit(3) is not None
