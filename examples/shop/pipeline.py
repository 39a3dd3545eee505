"""A shop: orders arrive on a Kafka topic as JSON and flow down a chain of four tables.

``orders`` (root, from the topic; malformed messages go to ``orders_rejects``)
-> facts (append)                -> ``order_facts`` (one row per order, with a size band)
-> totals (merge on ``customer``) -> ``customer_totals`` (running total, order count, tier)
-> tiers (overwrite)             -> ``tier_counts`` (customers per tier)

Every transform is deterministic, so replaying an epoch writes the same rows. Amounts are
DECIMAL: sums are exact, and a total either equals the sum of its orders or it does not.

Run it:  etl run examples/shop/pipeline.py --continuous --epoch-interval 2 \\
             --param bootstrap_servers=127.0.0.1:9092 --param topic=orders
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from etl import EpochContext, Pipeline, param
from etl.sources.kafka import KafkaSource

ORDER_SCHEMA = (
    "order_id BIGINT NOT NULL, customer STRING NOT NULL, amount DECIMAL(10,2) NOT NULL, "
    "items INT NOT NULL"
)
TOTAL_TYPE = "DECIMAL(14,2)"
TOTALS_SCHEMA = f"customer STRING, total {TOTAL_TYPE}, orders BIGINT, tier STRING"
TIERS = (("gold", 20_000), ("silver", 5_000), ("bronze", 0))
"""A customer's tier: the first whose threshold their running total reaches."""


def build(bootstrap_servers: str, topic: str) -> Pipeline:
    pipeline = Pipeline("shop")
    pipeline.ingest(
        "ingest_orders",
        source=KafkaSource(
            "order_stream",
            topics=[topic],
            bootstrap_servers=bootstrap_servers,
            schema=ORDER_SCHEMA,
        ),
        output="orders",
        rejects="orders_rejects",
    )
    pipeline.sql(
        "facts",
        output="order_facts",
        inputs=["orders"],
        query="""
            SELECT order_id, customer, amount, items,
                   CAST(try_divide(amount, items) AS DECIMAL(10,2)) AS item_price,
                   CASE WHEN amount >= 100 THEN 'large'
                        WHEN amount >= 30 THEN 'medium'
                        ELSE 'small' END AS size
            FROM orders
        """,
    )

    @pipeline.job(
        "totals", output="customer_totals", inputs=["order_facts"], mode="merge", keys=["customer"]
    )
    def running_totals(ctx: EpochContext) -> DataFrame:
        new = (
            ctx["order_facts"]
            .groupBy("customer")
            .agg(F.sum("amount").alias("new_total"), F.count(F.lit(1)).alias("new_orders"))
        )
        previous = ctx.previous
        if previous is None:
            previous = ctx.spark.createDataFrame([], TOTALS_SCHEMA)
        total = (F.coalesce(F.col("total"), F.lit(0)) + F.col("new_total")).cast(TOTAL_TYPE)
        return new.join(previous, "customer", "left").select(
            "customer",
            total.alias("total"),
            (F.coalesce(F.col("orders"), F.lit(0)) + F.col("new_orders")).alias("orders"),
            tier_of(total).alias("tier"),
        )

    pipeline.sql(
        "tiers",
        output="tier_counts",
        inputs=["customer_totals"],
        mode="overwrite",
        query="SELECT tier, count(*) AS customers FROM customer_totals GROUP BY tier",
    )
    return pipeline


def tier_of(total: Column) -> Column:
    """The tier of a running total (see TIERS)."""
    (name, threshold), *lower = TIERS
    tier = F.when(total >= threshold, name)
    for name, threshold in lower:
        tier = tier.when(total >= threshold, name)
    return tier


pipeline = build(
    param("bootstrap_servers", "127.0.0.1:9092"),
    param("topic", "orders"),
)
