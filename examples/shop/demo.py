"""``make demo`` (``python -m examples.shop.demo``): the shop pipeline on a local Kafka-protocol broker, read at three levels.

It starts an in-memory tansu broker, creates the ``orders`` topic, and produces a
synthetic stream of orders (with a few malformed messages) while the runner processes
``examples/shop/pipeline.py`` continuously. Beside them a checker reads the four tables
of the chain at every consistency level and counts where detail and totals disagree:

- ``orders`` vs ``order_facts``: order ids present in one and not the other;
- ``order_facts`` vs ``customer_totals``: customers whose total or order count is not
  the sum of their order facts;
- ``customer_totals`` vs ``tier_counts``: tiers whose customer count is wrong.

The checker reads whenever a job seals an epoch (a dashboard refreshing on every table
update) and at least twice a second, so it often reads between the commits of two jobs:
that is when read-committed and read-uncommitted show disagreements. Repeatable-read
must never show one. The warehouse is left behind for ``notebooks/explore.ipynb``.

Exit codes: 0 all good; 1 a job failed, repeatable-read saw a disagreement, or the final
cut does not match what was produced; 2 usage error (e.g. a warehouse that is not a
previous demo's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from catalog import Catalog, as_utc, load_catalog
from consistency import Level, NoCommonEpochError
from etl.cli.render import err
from etl.cli.show import status_view
from etl.loader import load_pipeline
from etl.reader import SnapshotReader, snapshot
from etl.report import lineage_graph, lineage_text, status_report
from etl.runner import Runner, RunResult
from etl.spark import build_spark
from tests.support.tansu import TansuBroker

PIPELINE_FILE = Path(__file__).resolve().with_name("pipeline.py")
CHAIN = ("orders", "order_facts", "customer_totals", "tier_counts")
REJECTS = "orders_rejects"
LEVELS = (Level.READ_UNCOMMITTED, Level.READ_COMMITTED, Level.REPEATABLE_READ)
MARKER = "_demo.json"
"""Written into the warehouse: a later demo may replace a warehouse that has it."""
TOPIC = "orders"
PARTITIONS = 3
CUSTOMERS = tuple(f"c{k:03d}" for k in range(1, 41))
CUSTOMER_WEIGHTS = tuple(1 / k for k in range(1, 41))
"""A few customers buy much more than the rest (Zipf), so they reach different tiers."""
BATCH_INTERVAL_S = 0.4
BACKLOG_THRESHOLD = 3
"""A job this many epochs behind catches up in one batch (a slow machine still keeps up)."""
MALFORMED_EVERY = 6
"""Every this many batches (from the first), one malformed message joins the batch."""
MALFORMED = (
    b'{"order_id": 1, "customer": "c001", "amount": 12.5',
    b"not json at all",
    b'{"order_id": "seven", "customer": "c002", "amount": 10.0, "items": 1}',
    b'{"order_id": 8, "customer": 42, "amount": 10.0, "items": 1}',
    b'{"order_id": 9, "customer": "c003", "amount": "lots", "items": 2}',
    b'{"order_id": 10, "customer": "c004", "items": 2}',
)
"""Bad JSON, then wrong types and a missing field: each must land in the rejects table."""

out = Console(soft_wrap=True)
if not out.is_terminal:
    out.width = 120  # the status table needs it; 80 columns would truncate table names


class DemoError(Exception):
    """The demo cannot run as asked (e.g. it would delete a directory it did not create)."""


@dataclass(frozen=True)
class Order:
    order_id: int
    customer: str
    amount: Decimal
    items: int

    def message(self) -> bytes:
        return json.dumps(
            {
                "order_id": self.order_id,
                "customer": self.customer,
                "amount": str(self.amount),
                "items": self.items,
            }
        ).encode()


@dataclass(frozen=True)
class Disagreements:
    """Rows of one snapshot where detail and totals disagree (see the module docstring)."""

    facts: int
    totals: int
    tiers: int

    @property
    def total(self) -> int:
        return self.facts + self.totals + self.tiers


@dataclass(frozen=True)
class LevelTally:
    """What the checker saw at one level."""

    level: Level
    snapshots: int = 0
    inconsistent: int = 0
    rows: int = 0
    epochs: frozenset[int] = frozenset()

    def add(self, snap: SnapshotReader, found: Disagreements) -> LevelTally:
        return replace(
            self,
            snapshots=self.snapshots + 1,
            inconsistent=self.inconsistent + (found.total > 0),
            rows=self.rows + found.total,
            epochs=self.epochs | ({snap.epoch} if snap.epoch is not None else set()),
        )


@dataclass(frozen=True)
class Produced:
    """What the producer sent: good orders and malformed messages."""

    orders: tuple[Order, ...] = ()
    malformed: int = 0
    batches: int = 0
    last_sent_at: datetime | None = None

    def totals(self) -> dict[str, tuple[Decimal, int]]:
        amounts: dict[str, Decimal] = {}
        for order in self.orders:
            amounts[order.customer] = amounts.get(order.customer, Decimal(0)) + order.amount
        counts = Counter(order.customer for order in self.orders)
        return {c: (amounts[c], counts[c]) for c in amounts}


@dataclass(frozen=True)
class DemoResult:
    warehouse: Path
    run: RunResult
    produced: Produced
    tallies: tuple[LevelTally, ...]
    rejects: int
    final_problems: tuple[str, ...]
    checker_error: str | None = None

    @property
    def repeatable(self) -> LevelTally:
        return next(t for t in self.tallies if t.level is Level.REPEATABLE_READ)

    @property
    def ok(self) -> bool:
        return (
            self.run.ok
            and self.repeatable.inconsistent == 0
            and not self.final_problems
            and self.checker_error is None
        )


# -- the warehouse -----------------------------------------------------------------------


DEMO_ENTRIES = frozenset({MARKER, *CHAIN, REJECTS, "_catalog.sqlite"})
"""What a demo's warehouse holds; anything else there is someone else's."""


def prepare_warehouse(path: Path, *, replace: bool = False) -> str:
    """Make ``path`` a fresh directory holding only the demo's marker; say what was done.
    Only a previous demo's warehouse (it has the marker and nothing but the demo's
    tables) or an empty directory is reused; anything else only with ``replace``."""
    if path.exists() and not path.is_dir():
        raise DemoError(f"--warehouse {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not (path / MARKER).is_file():
            raise DemoError(
                f"--warehouse {path} is not empty and was not made by the demo (no {MARKER}); "
                "refusing to delete it: pass --warehouse with a new or empty directory"
            )
        foreign = sorted(
            p.name
            for p in path.iterdir()
            if p.name not in DEMO_ENTRIES and not p.name.startswith("_catalog.sqlite")
        )
        if foreign and not replace:
            raise DemoError(
                f"--warehouse {path} holds more than a previous demo ({', '.join(foreign)}); "
                "refusing to delete it: pass --replace to delete it anyway, or --warehouse "
                "with a new or empty directory"
            )
        shutil.rmtree(path)
        note = "replaced the previous demo's warehouse"
    else:
        note = "new warehouse"
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text(
        json.dumps({"demo": "shop", "started_at": datetime.now(UTC).isoformat()}) + "\n"
    )
    return note


# -- the producer ------------------------------------------------------------------------


class OrderProducer(threading.Thread):
    """Sends a batch of orders every BATCH_INTERVAL_S until stopped (seeded: the same
    sequence every run), with one malformed message every MALFORMED_EVERY batches."""

    def __init__(self, bootstrap_servers: str, *, seed: int) -> None:
        super().__init__(name="order-producer", daemon=True)
        self.bootstrap_servers = bootstrap_servers
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.produced = Produced()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, linger_ms=20)
        try:
            while not self.stop.is_set():
                self._send_batch(producer)
                self.stop.wait(BATCH_INTERVAL_S)
        except BaseException as exc:  # reported by the demo, which then fails
            self.error = exc
        finally:
            producer.close()

    def _send_batch(self, producer) -> None:
        done = self.produced
        first_id = len(done.orders) + 1
        orders = tuple(
            Order(
                order_id=first_id + i,
                customer=self.random.choices(CUSTOMERS, CUSTOMER_WEIGHTS)[0],
                amount=Decimal(self.random.randrange(199, 15_000)) / 100,
                items=self.random.randrange(1, 6),
            )
            for i in range(self.random.randrange(10, 40))
        )
        for order in orders:
            producer.send(TOPIC, order.message(), key=order.customer.encode())
        malformed = done.batches % MALFORMED_EVERY == 0
        if malformed:
            producer.send(TOPIC, MALFORMED[done.malformed % len(MALFORMED)], key=b"bad")
        producer.flush()
        self.produced = Produced(
            orders=done.orders + orders,
            malformed=done.malformed + malformed,
            batches=done.batches + 1,
            last_sent_at=datetime.now(UTC),
        )


# -- the checker -------------------------------------------------------------------------


def disagreements(snap: SnapshotReader) -> Disagreements:
    """Count where detail and totals of one snapshot disagree (pandas via delta-rs)."""
    orders = _frame(snap, "orders", ["order_id"])
    facts = _frame(snap, "order_facts", ["order_id", "customer", "amount"])
    totals = _frame(snap, "customer_totals", ["customer", "total", "orders", "tier"])
    tiers = _frame(snap, "tier_counts", ["tier", "customers"])
    facts_off = len(set(orders.order_id) ^ set(facts.order_id)) + abs(len(orders) - len(facts))
    expected = {
        customer: (sum(group.amount, Decimal(0)), len(group))
        for customer, group in facts.groupby("customer")
    }
    actual = {r.customer: (r.total, r.orders) for r in totals.itertuples()}
    totals_off = sum(expected.get(c) != actual.get(c) for c in expected.keys() | actual.keys())
    expected_tiers = Counter(totals.tier)
    actual_tiers = dict(zip(tiers.tier, tiers.customers, strict=True))
    tiers_off = sum(
        expected_tiers.get(t, 0) != actual_tiers.get(t, 0)
        for t in expected_tiers.keys() | actual_tiers.keys()
    )
    return Disagreements(facts=facts_off, totals=totals_off, tiers=tiers_off)


def _frame(snap: SnapshotReader, table: str, columns: list[str]) -> pd.DataFrame:
    """The table at the snapshot; a table without data at the snapshot's level is empty."""
    if snap.versions[table] is None:
        return pd.DataFrame(columns=columns)
    return snap.pandas(table, columns=columns)


class Checker(threading.Thread):
    """Reads the chain at every level whenever woken (a job sealed) or every half second."""

    def __init__(self, catalog: Catalog) -> None:
        super().__init__(name="checker", daemon=True)
        self.catalog = catalog
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.tallies = {level: LevelTally(level) for level in LEVELS}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.wake.wait(0.5)
                self.wake.clear()
                for level in LEVELS:
                    self._check(level)
        except BaseException as exc:  # reported by the demo, which then fails
            self.error = exc

    def _check(self, level: Level) -> None:
        try:
            snap = snapshot(self.catalog, CHAIN, level)
        except NoCommonEpochError:
            return  # nothing is readable at repeatable-read before the first COMMIT
        self.tallies[level] = self.tallies[level].add(snap, disagreements(snap))


# -- the run -----------------------------------------------------------------------------


def _wait_for_epoch_after(catalog: Catalog, moment: datetime, timeout_s: float) -> None:
    """Wait until the runner opened an epoch whose barrier is after ``moment``: its slice
    then holds every message sent before ``moment``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = catalog.latest_epoch()
        if latest is not None and as_utc(latest.barrier_ts) > moment:
            return
        time.sleep(0.1)
    raise DemoError(f"no epoch was opened within {timeout_s}s after the producer stopped")


def final_check(catalog: Catalog, produced: Produced) -> tuple[int, list[str]]:
    """Compare the newest consistent cut with what was produced: (rejects, problems)."""
    problems = []
    latest = catalog.latest_epoch()
    commit = catalog.latest_commit()
    if latest is None or commit is None or commit.epoch != latest.id:
        problems.append(
            f"the last epoch ({latest.id if latest else '-'}) is not committed "
            f"(last COMMIT: {commit.epoch if commit else '-'})"
        )
    snap = snapshot(catalog, [*CHAIN, REJECTS], Level.REPEATABLE_READ)
    if any(version is None for version in snap.versions.values()):
        problems.append(f"a table has no data at the final cut: {dict(snap.versions)}")
        return 0, problems
    found = disagreements(snap)
    if found.total:
        problems.append(f"the final cut disagrees with itself: {found}")
    rejects = snap.arrow(REJECTS, columns=["offset"]).num_rows
    if rejects != produced.malformed:
        problems.append(f"{rejects} rejects, but {produced.malformed} malformed messages sent")
    orders = snap.arrow("orders", columns=["order_id"]).num_rows
    if orders != len(produced.orders):
        problems.append(f"{orders} orders in the table, but {len(produced.orders)} sent")
    totals = {
        r.customer: (r.total, r.orders)
        for r in snap.pandas(
            "customer_totals", columns=["customer", "total", "orders"]
        ).itertuples()
    }
    if totals != produced.totals():
        problems.append("customer_totals does not match the totals of the orders sent")
    return rejects, problems


def commit_line(epoch: int, previous: int) -> str:
    """The line for a COMMIT of ``epoch`` after one of ``previous``, saying which epochs
    in between were coalesced into it, and why."""
    if epoch <= previous + 1:
        return f"  epoch {epoch} committed"
    span = f"s {previous + 1}..{epoch - 1}" if epoch - 1 > previous + 1 else f" {previous + 1}"
    return (
        f"  epoch {epoch} committed (epoch{span} coalesced into it: a job fell "
        f"{BACKLOG_THRESHOLD}+ epochs behind and caught up in one batch; a coalesced epoch "
        "cannot be read on its own)"
    )


def run_demo(
    *, seconds: float, warehouse: Path, epoch_interval: float, seed: int, pipeline_file: Path
) -> DemoResult:
    """Run the demo in a prepared warehouse (see :func:`prepare_warehouse`)."""
    with TansuBroker() as broker:
        broker.create_topics({TOPIC: PARTITIONS})
        out.print(
            f"broker: tansu at {broker.bootstrap_servers}, topic {TOPIC!r} with "
            f"{PARTITIONS} partitions",
            highlight=False,
        )
        pipeline = load_pipeline(
            pipeline_file, {"bootstrap_servers": broker.bootstrap_servers, "topic": TOPIC}
        )
        catalog = load_catalog(warehouse=warehouse)
        spark = build_spark(
            app_name="etl-demo",
            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
        )
        checker = Checker(load_catalog(warehouse=warehouse))

        committed = [0]

        def on_batch(batch) -> None:
            checker.wake.set()
            if batch.commit is None:
                return
            out.print(commit_line(batch.commit.epoch, committed[0]), highlight=False)
            committed[0] = batch.commit.epoch

        runner = Runner(
            pipeline,
            catalog=catalog,
            warehouse=str(warehouse),
            spark=spark,
            on_batch=on_batch,
            backlog_threshold=BACKLOG_THRESHOLD,
        )
        producer = OrderProducer(broker.bootstrap_servers, seed=seed)
        stop = threading.Event()
        results: list[RunResult] = []
        driver = threading.Thread(
            target=lambda: results.append(
                runner.run_continuous(epoch_interval=epoch_interval, stop=stop)
            ),
            name="runner",
        )
        out.print(
            f"running {pipeline_file.name} for {seconds:g}s, an epoch every {epoch_interval:g}s",
            highlight=False,
        )
        driver.start()
        producer.start()
        checker.start()
        try:
            time.sleep(seconds)
        finally:
            producer.stop.set()
            producer.join()
            try:
                if producer.produced.last_sent_at is not None and driver.is_alive():
                    _wait_for_epoch_after(
                        catalog, producer.produced.last_sent_at, timeout_s=epoch_interval + 30
                    )
            finally:
                stop.set()
                driver.join()
                checker.stop.set()
                checker.join()
                checker.catalog.close()
        if producer.error is not None:
            raise DemoError(f"the producer failed: {producer.error!r}")
        if not results:
            raise DemoError("the runner stopped without a result (see the log above)")
        produced = producer.produced
        out.print(
            f"producer: {len(produced.orders)} orders and {produced.malformed} malformed "
            f"messages in {produced.batches} batches",
            highlight=False,
        )
        rejects, problems = final_check(catalog, produced)
        return DemoResult(
            warehouse=warehouse,
            run=results[0],
            produced=produced,
            tallies=tuple(checker.tallies[level] for level in LEVELS),
            rejects=rejects,
            final_problems=tuple(problems),
            checker_error=repr(checker.error) if checker.error else None,
        )


def print_report(result: DemoResult, catalog: Catalog) -> None:
    table = Table(title="detail vs totals, read while the pipeline ran")
    for column in ("level", "snapshots", "epochs", "disagreeing", "rows off"):
        table.add_column(column, justify="right" if column != "level" else "left")
    for tally in result.tallies:
        table.add_row(
            tally.level.value,
            str(tally.snapshots),
            str(len(tally.epochs)) if tally.level is Level.REPEATABLE_READ else "-",
            str(tally.inconsistent),
            str(tally.rows),
        )
    out.print(table)
    out.print(
        "disagreeing: snapshots in which detail and totals disagree; repeatable-read must "
        "show 0, the weaker levels show the skew it rules out",
        highlight=False,
    )
    out.print(
        f"rejects: {result.rejects} rows in {REJECTS} "
        f"({result.produced.malformed} malformed messages produced)",
        highlight=False,
    )
    out.print(status_view(status_report(catalog)))  # what `etl status` prints
    out.print(lineage_text(lineage_graph(catalog), fmt="text"), highlight=False)
    for failure in result.run.failures:
        out.print(f"[bold red]failed:[/] job {failure.job} epoch {failure.epoch}: {failure.error}")
    if result.checker_error:
        out.print(f"[bold red]the checker failed:[/] {result.checker_error}", highlight=False)
    for problem in result.final_problems:
        out.print(f"[bold red]final cut:[/] {problem}", highlight=False)
    if result.repeatable.inconsistent:
        out.print(
            f"[bold red]repeatable-read saw {result.repeatable.inconsistent} inconsistent "
            "snapshots",
            highlight=False,
        )
    verdict = "[bold green]ok[/]" if result.ok else "[bold red]FAILED[/]"
    out.print(f"demo {verdict}; the warehouse stays in {result.warehouse}", highlight=False)
    out.print(
        'explore it: notebooks/explore.ipynb (Jupyter kernel "Delta Barrier"), or run it '
        "headless, keeping its results: .venv/bin/jupyter execute --inplace notebooks/explore.ipynb",
        highlight=False,
    )


@dataclass(frozen=True)
class _Arguments:
    seconds: float
    warehouse: Path
    epoch_interval: float
    seed: int
    replace: bool = False


def _parse(argv: Sequence[str] | None) -> _Arguments:
    parser = argparse.ArgumentParser(
        prog="python -m examples.shop.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to produce orders")
    parser.add_argument(
        "--warehouse",
        type=Path,
        default=Path("demo-warehouse"),
        help="the demo's own warehouse (a previous demo's is replaced; default ./demo-warehouse)",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace the demo's warehouse even if it holds other tables (deletes them)",
    )
    parser.add_argument("--epoch-interval", type=float, default=2.0, help="seconds per epoch")
    parser.add_argument("--seed", type=int, default=7, help="seed of the order stream")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.epoch_interval <= 0:
        parser.error("--seconds and --epoch-interval must be positive")
    return _Arguments(
        seconds=args.seconds,
        warehouse=args.warehouse.resolve(),
        epoch_interval=args.epoch_interval,
        seed=args.seed,
        replace=args.replace,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        note = prepare_warehouse(args.warehouse, replace=args.replace)
    except DemoError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    out.print(f"warehouse: {args.warehouse} ({note})", highlight=False)
    try:
        result = run_demo(
            seconds=args.seconds,
            warehouse=args.warehouse,
            epoch_interval=args.epoch_interval,
            seed=args.seed,
            pipeline_file=PIPELINE_FILE,
        )
    except DemoError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 1
    with load_catalog(warehouse=args.warehouse) as catalog:
        print_report(result, catalog)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
