"""What a run asks of the catalog per epoch: the same number of statements at every epoch
(nothing a batch or the runner's planning sends grows with the history), and no more
transactions per batch than a batch needs (every statement is a round trip on PostgreSQL,
and most of a small batch's fixed cost)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from catalog import load_catalog
from etl import FileSource, Pipeline, Runner

pytestmark = [pytest.mark.spark]

SCHEMA = "id BIGINT, customer INT, amount DOUBLE"


def three_jobs(incoming: Path) -> Pipeline:
    """An ingest, an append and a merge: the write modes of the freshness chain."""
    pipeline = Pipeline("statements")
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    pipeline.sql(
        "clean",
        output="clean",
        inputs=["events"],
        query="SELECT id, customer, amount FROM events WHERE amount >= 0",
    )
    pipeline.sql(
        "latest",
        output="latest",
        inputs=["clean"],
        mode="merge",
        keys=("customer",),
        query="SELECT customer, sum(amount) AS amount FROM clean GROUP BY customer",
    )
    return pipeline


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Catalog statements sent meanwhile by this process's engines, by first word (BEGIN
    opens a transaction), except the lease keeper's renewals (timed, not per epoch)."""
    seen: Counter[str] = Counter()

    def count(_conn, _cursor, statement, *_args) -> None:
        if threading.current_thread().name != "lease-keeper":
            seen[statement.split(None, 1)[0].upper()] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


def run_epochs(tmp_path: Path, spark, epochs: int) -> list[Counter[str]]:
    """Statements of each ``run_once`` (recovery, one epoch, its three batches)."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    runner = Runner(three_jobs(incoming), catalog=catalog, warehouse=str(warehouse), spark=spark)
    runner.register()
    per_epoch = []
    for epoch in range(epochs):
        rows = [
            f'{{"id": {epoch * 10 + i}, "customer": {i % 3}, "amount": {i}.5}}' for i in range(9)
        ]
        (incoming / f"{epoch:04d}.json").write_text("\n".join(rows) + "\n")
        with counted() as seen:
            result = runner.run_once()
        assert result.ok and len(result.batches) == 3, result
        per_epoch.append(seen)
    catalog.close()
    return per_epoch


def test_statements_per_epoch_do_not_grow_with_the_epochs(tmp_path, spark):
    totals = [sum(seen.values()) for seen in run_epochs(tmp_path, spark, 12)[2:]]
    # The first epochs create the tables. A run also looks for a recompute once a second:
    # the fewest statements of each half are the ones no timer added.
    earlier, later = totals[: len(totals) // 2], totals[len(totals) // 2 :]
    assert min(later) <= min(earlier), totals


def test_a_run_once_opens_few_catalog_transactions(tmp_path, spark):
    transactions = min(seen["BEGIN"] for seen in run_epochs(tmp_path, spark, 6)[3:])
    # Leases, recovery of the three jobs, opening the epoch, planning each job (not again
    # after its own batch, which leaves it nothing to run), and per batch: what it reads,
    # PROCESSED, the seal. Before issue 28 (item 6): 96; with the engine's cuts alone 75;
    # now 69.
    assert transactions <= 71, transactions
