"""An orders pipeline fed by a Kafka topic, in a temporary warehouse, for the engine's tests.

``ingest_orders`` appends the topic's records to ``orders`` (undecodable ones to
``orders_rejects``); ``count_orders`` derives per-partition counts into ``order_counts``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from catalog import Catalog, load_catalog
from etl import Pipeline, Runner, snapshot
from etl.sources.kafka import KafkaSource

SCHEMA = "id long not null, name string, amount double"
ROW_COLUMNS = ["_kafka_partition", "_kafka_offset", "id", "name", "amount", "_epoch"]
REJECT_COLUMNS = ["partition", "offset", "value", "reason", "_epoch"]


@dataclass
class OrdersPipeline:
    catalog: Catalog
    runner: Runner
    source: KafkaSource

    def read(self, level: str = "read-committed"):
        return snapshot(
            self.catalog,
            ["orders", "orders_rejects", "order_counts"],
            level,
            spark=self.runner.spark,
        )

    def rows(self, table: str = "orders", level: str = "read-committed") -> list[tuple]:
        columns = ROW_COLUMNS if table == "orders" else REJECT_COLUMNS
        frame = self.read(level).table(table).select(*columns)
        return sorted(tuple(r) for r in frame.collect())


def order(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}).encode()


def make_orders(
    root: Path,
    spark,
    *,
    bootstrap: str,
    topics: list[str],
    derived: bool = True,
    backlog_threshold: int | None = None,
    **source_options,
) -> OrdersPipeline:
    source = KafkaSource(
        "orders",
        topics=topics,
        bootstrap_servers=bootstrap,
        schema=SCHEMA,
        include={"topic", "partition", "offset"},
        **source_options,
    )
    pipeline = Pipeline("orders")
    pipeline.ingest("ingest_orders", source=source, output="orders", rejects="orders_rejects")
    if derived:
        pipeline.sql(
            "count_orders",
            output="order_counts",
            query="SELECT _kafka_partition AS partition, count(*) AS orders "
            "FROM orders GROUP BY _kafka_partition",
            inputs=["orders"],
        )
    warehouse = root / "warehouse"
    catalog = load_catalog(None, warehouse=warehouse)
    runner = Runner(
        pipeline,
        catalog=catalog,
        warehouse=str(warehouse),
        spark=spark,
        backlog_threshold=backlog_threshold,
    )
    runner.register()
    return OrdersPipeline(catalog, runner, source)
