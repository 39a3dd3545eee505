"""Pytest fixtures for a real Kafka-protocol broker: one tansu process per test session.

Loaded from ``tests/conftest.py`` (``pytest_plugins``). Tests that use them are marked
``kafka``. Without the tansu binary they are skipped, except on CI where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.support.tansu import KafkaBrokerError, TansuBroker, find_tansu_binary


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """A running in-memory tansu broker, shared by the whole session."""
    try:
        binary = find_tansu_binary()
    except KafkaBrokerError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the tansu broker is required on CI: {exc}")
        pytest.skip(str(exc))
    with TansuBroker(binary=binary) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: TansuBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_topic(kafka_broker: TansuBroker) -> Callable[..., str]:
    """``make(partitions=1) -> name``: creates a fresh topic with a unique name."""

    def make(partitions: int = 1) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        kafka_broker.create_topics({name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def kafka_producer(kafka_broker: TansuBroker):
    """A kafka-python producer that batches like a real one (linger, large batches)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=16 * 1024 * 1024,
    )
    yield producer
    producer.close()


@pytest.fixture
def kafka_produce(kafka_producer) -> Callable[..., list]:
    """``produce(topic, values, *, partition=None, keys=None, headers=None)``.

    Sends ``values`` (bytes or None) in one go, so they travel in as few batches as the
    producer makes, then flushes and returns the record metadata (offsets, timestamps).
    ``partition=None`` spreads the values round-robin over ``partitions`` partitions.
    """

    def produce(
        topic: str,
        values: Sequence[bytes | None],
        *,
        partition: int | None = None,
        partitions: int = 1,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[list[tuple[str, bytes]]] | None = None,
    ) -> list:
        futures = [
            kafka_producer.send(
                topic,
                value,
                key=keys[i] if keys is not None else None,
                headers=headers[i] if headers is not None else None,
                partition=partition if partition is not None else i % partitions,
            )
            for i, value in enumerate(values)
        ]
        kafka_producer.flush()
        return [f.get(timeout=10) for f in futures]

    return produce
