"""The small pipelines of the fault campaign and their deterministic inputs per epoch.

``files``: a FileSource (json, one file per micro-batch) -> ``events`` (append, a
``quarantine`` gate: negative amounts go to ``events_quarantine``) -> ``totals`` (merge
on ``key``: a running total per key) -> ``summary`` (overwrite: one row over all totals).

``kafka``: a KafkaSource on a 2-partition topic (micro-batches of a few records; bad
messages to ``orders_rejects``) -> ``orders`` (append, a ``block`` gate: the last epoch
holds a negative amount, so it stays PROCESSED until a run with the relaxed gate) ->
``customer_totals`` (merge on ``customer``) -> ``order_counts`` (overwrite).

Every transform is Python and first checks a marker file ``<root>/fail/<job>``: while it
exists the job raises (the campaign's "job failure while epochs keep opening").

Inputs depend only on the kind and the epoch, so a reference run without faults is
computed once per kind and every faulted run is compared with it. The driver puts the
inputs of epoch k in place, then opens epoch k: the barrier is explicit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import great_expectations as gx
from pyspark.sql import functions as F

from catalog import Catalog, load_catalog
from etl import FileSource, Pipeline, Runner
from etl.quality import QualityGate

KINDS = ("files", "kafka")
EPOCHS = 3
BACKLOG_THRESHOLD = 2
FILES_SCHEMA = "id INT, key STRING, amount INT"
KAFKA_SCHEMA = "id long not null, customer string, amount double"
KAFKA_PARTITIONS = 2
KAFKA_MICRO_BATCH = 3

TABLES = {
    "files": ["events", "events_quarantine", "totals", "summary"],
    "kafka": ["orders", "orders_rejects", "customer_totals", "order_counts"],
}
JOBS = {
    "files": ["ingest_events", "totals", "summary"],
    "kafka": ["ingest_orders", "customer_totals", "order_counts"],
}
SOURCE_JOBS = {"ingest_events", "ingest_orders"}
MICRO_BATCH_JOBS = SOURCE_JOBS  # the jobs that commit several micro-batches per epoch
DROPPED_COLUMNS = {"topic", "_kafka_topic", "timestamp", "_kafka_timestamp"}
"""Columns that legitimately differ between two runs (a fresh topic, produce times)."""


@dataclass(frozen=True)
class Config:
    """Everything a child process needs to rebuild the same pipeline."""

    kind: str
    root: str
    bootstrap: str | None = None
    topic: str | None = None
    catalog_url: str | None = None
    """None: the embedded SQLite catalog in the warehouse."""
    warehouse_url: str | None = None
    """An object-store warehouse (``s3://bucket/prefix``); None: ``<root>/warehouse``.
    Inputs and failure markers stay under ``root`` either way."""

    def open_catalog(self) -> Catalog:
        return load_catalog(self.catalog_url, warehouse=self.warehouse)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @staticmethod
    def from_json(text: str) -> Config:
        return Config(**json.loads(text))

    @property
    def warehouse(self) -> str:
        return self.warehouse_url or str(Path(self.root) / "warehouse")

    @property
    def incoming(self) -> Path:
        return Path(self.root) / "incoming"

    @property
    def markers(self) -> Path:
        return Path(self.root) / "fail"


def _check_marker(markers: Path, job: str) -> None:
    if (markers / job).exists():
        raise RuntimeError(f"injected failure of job {job!r} (marker {markers / job} exists)")


def build(config: Config, *, strict: bool = True) -> Pipeline:
    """The pipeline of ``config.kind``; ``strict=False`` relaxes the kafka block gate."""
    markers = config.markers
    if config.kind == "files":
        config.incoming.mkdir(parents=True, exist_ok=True)
        pipeline = Pipeline("fcamp")

        def ingest(ctx):
            _check_marker(markers, "ingest_events")
            return ctx["drops"]

        pipeline.ingest(
            "ingest_events",
            source=FileSource(
                "drops",
                path=config.incoming,
                format="json",
                schema=FILES_SCHEMA,
                files_per_micro_batch=1,
            ),
            output="events",
            transform=ingest,
        )

        @pipeline.job("totals", output="totals", inputs=["events"], mode="merge", keys=["key"])
        def totals(ctx):
            _check_marker(markers, "totals")
            new = (
                ctx["events"]
                .groupBy("key")
                .agg(F.sum("amount").cast("long").alias("add"), F.count(F.lit(1)).alias("m"))
            )
            if ctx.previous is None:
                return new.select("key", F.col("add").alias("total"), F.col("m").alias("n"))
            return new.join(ctx.previous.select("key", "total", "n"), "key", "left").select(
                "key",
                (F.coalesce("total", F.lit(0)) + F.col("add")).alias("total"),
                (F.coalesce("n", F.lit(0)) + F.col("m")).alias("n"),
            )

        @pipeline.job("summary", output="summary", inputs=["totals"], mode="overwrite")
        def summary(ctx):
            _check_marker(markers, "summary")
            return ctx["totals"].agg(
                F.count(F.lit(1)).alias("keys"),
                F.sum("total").alias("total"),
                F.sum("n").alias("n"),
            )

        pipeline.expect(
            QualityGate(
                "events",
                [gx.expectations.ExpectColumnValuesToBeBetween(column="amount", min_value=0)],
                policy="quarantine",
            )
        )
        return pipeline

    from etl.sources.kafka import KafkaSource

    assert config.bootstrap and config.topic
    pipeline = Pipeline("kcamp")

    class MarkedKafkaSource(KafkaSource):
        """Reading a slice fails while ``ingest_orders``' failure marker exists: the root
        job has no transform (so that its source's tasks write its files directly, as a
        copying root's do) and its read plays the transform's part in a job failure."""

        def read(self, spark, bounds, *, epoch):
            _check_marker(markers, "ingest_orders")
            return super().read(spark, bounds, epoch=epoch)

    pipeline.ingest(
        "ingest_orders",
        source=MarkedKafkaSource(
            "orders_src",
            topics=[config.topic],
            bootstrap_servers=config.bootstrap,
            schema=KAFKA_SCHEMA,
            include={"partition", "offset"},
            max_records_per_micro_batch=KAFKA_MICRO_BATCH,
        ),
        output="orders",
        rejects="orders_rejects",
    )

    @pipeline.job(
        "customer_totals",
        output="customer_totals",
        inputs=["orders"],
        mode="merge",
        keys=["customer"],
    )
    def customer_totals(ctx):
        _check_marker(markers, "customer_totals")
        new = (
            ctx["orders"]
            .groupBy("customer")
            .agg(F.sum("amount").alias("add"), F.count(F.lit(1)).alias("m"))
        )
        if ctx.previous is None:
            return new.select("customer", F.col("add").alias("total"), F.col("m").alias("n"))
        return new.join(ctx.previous.select("customer", "total", "n"), "customer", "left").select(
            "customer",
            (F.coalesce("total", F.lit(0.0)) + F.col("add")).alias("total"),
            (F.coalesce("n", F.lit(0)) + F.col("m")).alias("n"),
        )

    @pipeline.job("order_counts", output="order_counts", inputs=["orders"], mode="overwrite")
    def order_counts(ctx):
        _check_marker(markers, "order_counts")
        return (
            ctx["orders"]
            .groupBy(F.col("_kafka_partition").alias("partition"))
            .agg(F.count(F.lit(1)).alias("orders"), F.sum("amount").alias("amount"))
        )

    pipeline.expect(
        QualityGate(
            "orders",
            [
                gx.expectations.ExpectColumnValuesToBeBetween(
                    column="amount", min_value=0 if strict else -1000
                )
            ],
            policy="block",
        )
    )
    return pipeline


def make_runner(
    config: Config,
    spark,
    *,
    catalog: Catalog | None = None,
    strict: bool = True,
    lease_ttl_seconds: float = 120.0,
) -> Runner:
    catalog = catalog or config.open_catalog()
    runner = Runner(
        build(config, strict=strict),
        catalog=catalog,
        warehouse=config.warehouse,
        spark=spark,
        lease_ttl_seconds=lease_ttl_seconds,
        backlog_threshold=BACKLOG_THRESHOLD,
    )
    runner.register()
    return runner


# -- inputs ------------------------------------------------------------------------------


def file_drops(epoch: int) -> list[tuple[str, list[dict], bool]]:
    """(name, rows, old_mtime) of the files of an epoch. Epoch 2 has a negative amount (the
    quarantine gate); the last epoch's second file arrives with an old mtime, as ``cp -p``
    or rsync would leave it (a producer whose clock or copy keeps the source's time)."""
    keys = ["a", "b", "c"]
    drops = []
    for f in range(2):
        rows = []
        for i in range(3):
            n = epoch * 100 + f * 10 + i
            amount = -5 if (epoch == 2 and f == 1 and i == 0) else (n % 7) + 1
            rows.append({"id": n, "key": keys[(n + f) % 3], "amount": amount})
        drops.append((f"e{epoch}f{f}.json", rows, epoch == EPOCHS and f == 1))
    return drops


def kafka_messages(epoch: int) -> list[tuple[int, bytes]]:
    """(partition, value) of an epoch's records: some malformed in epochs 1 and 2 (rejects,
    not in the last micro-batch of the partition), a negative amount in the last epoch (the
    block gate)."""
    out = []
    customers = ["x", "y", "z"]
    for i in range(7):
        n = epoch * 100 + i
        amount = -1.0 if (epoch == EPOCHS and i == 3) else float(n % 5 + 1)
        value = json.dumps({"id": n, "customer": customers[n % 3], "amount": amount}).encode()
        if epoch < EPOCHS and i == 1:
            value = b"{not json" if epoch == 1 else b'{"id": "not a number"}'
        out.append((i % KAFKA_PARTITIONS, value))
    return out


class Inputs:
    """Puts the inputs of epoch k in place (the driver then opens epoch k)."""

    def __init__(self, config: Config, producer=None) -> None:
        self.config = config
        self.producer = producer
        self.placed: set[int] = set()

    def place(self, epoch: int) -> None:
        if epoch in self.placed:
            return
        self.placed.add(epoch)
        if self.config.kind == "files":
            old = time.time() - 3600
            for name, rows, old_mtime in file_drops(epoch):
                hidden = self.config.incoming / f".{name}.tmp"
                hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
                if old_mtime:
                    os.utime(hidden, (old, old))
                os.replace(hidden, self.config.incoming / name)
        else:
            assert self.producer is not None
            futures = [
                self.producer.send(self.config.topic, value, partition=p)
                for p, value in kafka_messages(epoch)
            ]
            self.producer.flush()
            for future in futures:
                future.get(timeout=10)
        time.sleep(0.02)  # the barrier's timestamp comes strictly after the inputs


def open_epoch(runner: Runner, inputs: Inputs, epoch: int) -> None:
    """Place epoch ``epoch``'s inputs, then open it (the catalog must issue that number)."""
    inputs.place(epoch)
    opened = runner.catalog.open_epoch(pipeline=runner.catalog_pipeline)
    assert opened.id == epoch, f"the catalog opened epoch {opened.id}, expected {epoch}"
    time.sleep(0.02)  # the next epoch's inputs come strictly after this barrier


def expected_invariants(kind: str) -> dict[str, object]:
    """What the inputs alone say the tables must hold at the end (every epoch released)."""
    if kind == "files":
        rows = [r for e in range(1, EPOCHS + 1) for _, rs, _ in file_drops(e) for r in rs]
        good = [r for r in rows if r["amount"] >= 0]
        totals: dict[str, list[int]] = {}
        for r in good:
            t = totals.setdefault(r["key"], [0, 0])
            t[0] += r["amount"]
            t[1] += 1
        return {
            "events": sorted(r["id"] for r in good),
            "events_quarantine": sorted(r["id"] for r in rows if r["amount"] < 0),
            "totals": sorted((k, t, n) for k, (t, n) in totals.items()),
        }
    produced = []
    for e in range(1, EPOCHS + 1):
        offsets = dict.fromkeys(range(KAFKA_PARTITIONS), 0)
        for p, value in kafka_messages(e):
            produced.append((p, value))
            offsets[p] += 1
    return {"records": len(produced)}
