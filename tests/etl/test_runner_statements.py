"""What a run asks of the catalog per epoch: the same number of statements at every epoch
(nothing a batch or the runner's planning sends grows with the history), and no more
transactions per batch than a batch needs (every statement is a round trip on PostgreSQL,
and most of a small batch's fixed cost)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa

from catalog import load_catalog
from etl import FileSource, Pipeline, Runner
from tests.support.chains import SCHEMA, three_jobs

pytestmark = [pytest.mark.spark]


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


def fan_out(incoming: Path, children: int) -> Pipeline:
    """One root read by ``children`` jobs (appends and merges in turn)."""
    pipeline = Pipeline("fan_out")
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    for child in range(children):
        if child % 2:
            pipeline.sql(
                f"latest_{child}",
                output=f"latest_{child}",
                inputs=["events"],
                mode="merge",
                keys=("customer",),
                query="SELECT customer, max(amount) AS amount FROM events GROUP BY customer",
            )
        else:
            pipeline.sql(
                f"clean_{child}",
                output=f"clean_{child}",
                inputs=["events"],
                query=f"SELECT id, amount FROM events WHERE amount >= {child}",
            )
    return pipeline


def run_epochs(
    tmp_path: Path, spark, epochs: int, build: Callable[[Path], Pipeline] = three_jobs
) -> list[Counter[str]]:
    """Statements of each ``run_once`` (recovery, one epoch, a batch of each job)."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    pipeline = build(incoming)
    jobs = len(pipeline.ordered_jobs())
    runner = Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark)
    runner.register()
    per_epoch = []
    for epoch in range(epochs):
        rows = [
            f'{{"id": {epoch * 10 + i}, "customer": {i % 3}, "amount": {i}.5}}' for i in range(9)
        ]
        (incoming / f"{epoch:04d}.json").write_text("\n".join(rows) + "\n")
        with counted() as seen:
            result = runner.run_once()
        assert result.ok and len(result.batches) == jobs, result
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
    # The leases (one transaction to take them all, one to give them up), recovery of the
    # three jobs, opening the epoch, one read planning each job (not again after its own
    # batch, which leaves it nothing to run), and per batch: what it reads, PROCESSED, the
    # seal. Before issue 28 (item 6): 96; with the engine's cuts alone 75; then 69; with
    # the plan in one read, the leases in one transaction each and the attempt's reads in
    # one: 47; with every job the scheduler plans at once read in one: 45; 39 once a job
    # without a quality gate records no PROCESSED; with a batch's reads before it runs (its
    # attempt, its inputs' states, its tables' seals) in one: 36.
    assert transactions <= 36, transactions


def test_a_fan_out_costs_few_statements_per_table_and_epoch(tmp_path, spark):
    """One root read by four jobs: what a run_once of an epoch costs per table."""
    tables = 5
    per_epoch = run_epochs(tmp_path, spark, 5, partial(fan_out, children=tables - 1))[2:]
    transactions = min(seen["BEGIN"] for seen in per_epoch) / tables
    statements = min(sum(seen.values()) for seen in per_epoch) / tables
    # Now 9.8 transactions and 31.2 statements per table; 11 and 32.8 before a batch's
    # reads before it runs were one; 13 and 38.6 before a job without a quality gate
    # recorded no PROCESSED; 14.6 and 44.6 before the jobs planned at once were read in
    # one; 22.6 and 64.2 before the plan in one read, the leases in one transaction each,
    # the attempt's reads in one and the checks of a state change in one statement.
    assert transactions <= 9.8, transactions
    assert statements <= 31.2, statements


def fan_in(incoming: Path, branches: int) -> Pipeline:
    """One root, ``branches`` filters of it, and one job reading every branch."""
    pipeline = Pipeline("fan_in")
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    for b in range(branches):
        pipeline.sql(
            f"branch_{b}",
            output=f"branch_{b}",
            inputs=["events"],
            query=f"SELECT id, amount FROM events WHERE id % {branches} = {b}",
        )
    union = " UNION ALL ".join(f"SELECT id, amount FROM branch_{b}" for b in range(branches))
    pipeline.sql(
        "combined",
        output="combined",
        inputs=[f"branch_{b}" for b in range(branches)],
        query=f"SELECT count(*) AS n, sum(amount) AS amount FROM ({union})",
        mode="overwrite",
    )
    return pipeline


@pytest.mark.parametrize("continuous", [False, True], ids=["run_once", "continuous"])
def test_a_fan_in_is_planned_once_its_inputs_are_all_sealed(tmp_path, spark, continuous):
    """A job reading four tables is planned when the last of them is sealed through the
    epoch, not at the end of each of their batches (planning is a catalog read)."""
    incoming, warehouse = tmp_path / "in", tmp_path / "wh"
    incoming.mkdir()
    catalog = load_catalog(None, warehouse=warehouse)
    runner = Runner(fan_in(incoming, 4), catalog=catalog, warehouse=str(warehouse), spark=spark)
    runner.register()
    planned: Counter[str] = Counter()
    progress = catalog.jobs_progress

    def counting(requests):
        planned.update(r.output for r in requests)
        return progress(requests)

    catalog.jobs_progress = counting
    epochs = 3
    for epoch in range(epochs):
        rows = [f'{{"id": {epoch * 10 + i}, "customer": 1, "amount": {i}}}' for i in range(8)]
        (incoming / f"{epoch:04d}.json").write_text("\n".join(rows) + "\n")
        if not continuous:
            assert runner.run_once().ok
    if continuous:
        stop = threading.Event()
        result = runner.run_continuous(epoch_interval=0.5, stop=stop, max_epochs=epochs)
        assert result.ok, result
    opened = [e.id for e in catalog.epochs()]
    sealed = {s.epoch: s.state.name for s in catalog.table_epochs("combined")}
    assert set(sealed) == set(opened) and set(sealed.values()) <= {"WRITTEN", "COALESCED"}
    assert catalog.get_commit(opened[-1]) is not None
    catalog.close()
    # each epoch: planned with every job at the start of a run or when the epoch opens,
    # then once the fourth branch is sealed through it (before: after each branch's batch)
    assert planned["combined"] <= 2 * epochs, planned
    assert planned["branch_0"] <= 2 * epochs, planned
