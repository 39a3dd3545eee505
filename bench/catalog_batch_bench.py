"""The catalog's part of a batch: what a derived job's batch asks of an embedded (SQLite)
catalog, through the public ``Catalog`` API, against the same SQL sent through Python's
``sqlite3`` alone.

A pipeline of ``DB_BENCH_TABLES`` tables (a root and a chain of derived jobs) is
registered and its jobs leased. Each epoch, the root is recorded and sealed, then every
derived job makes the calls the engine makes for one batch: ``batch_start`` (the
attempt number and its input's sealed version, in one read) and ``seal`` (which records
the commit and checks for the epoch's COMMIT; a job without a quality gate records no
PROCESSED before it, and knows its output's schema from its previous commit); the runner
renews all leases once per epoch. Every statement SQLAlchemy sends is
captured with its parameters, and the transaction it belongs to.

The floor: the captured statements replayed through ``sqlite3`` on a copy of the catalog
taken before the measured epochs, in the same transactions (``BEGIN IMMEDIATE`` for
writes), the same parameters: the database's own work, without the catalog's code and
SQLAlchemy. Reported: driver CPU per batch of both and their ratio (the catalog's Python
overhead over the statements it needs).

Environment (defaults in brackets): DB_BENCH_TABLES [10], DB_BENCH_EPOCHS [200] measured
epochs (after 20 to warm up).

Run: ``python -m bench catalog_batch``.
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import env_int, load_average

WARMUP_EPOCHS = 20


@dataclass
class Transaction:
    """The statements of one catalog transaction, as sent to the driver."""

    statements: list[tuple[str, Any, bool]] = field(default_factory=list)
    """(SQL, parameters, executemany)."""


class Capture:
    """Every statement SQLAlchemy sends, grouped by transaction (SQLAlchemy's public event
    API: ``before_cursor_execute``, ``commit``, ``rollback``)."""

    def __init__(self) -> None:
        self.transactions: list[Transaction] = []
        self._open: Transaction | None = None
        self._lock = threading.Lock()
        self.on = False

    def _execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if not self.on:
            return
        with self._lock:
            if self._open is None:
                self._open = Transaction()
            self._open.statements.append((statement, parameters, executemany))

    def _end(self, conn) -> None:
        with self._lock:
            if self._open is not None:
                self.transactions.append(self._open)
                self._open = None

    @contextmanager
    def listening(self):
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        hooks = (
            ("before_cursor_execute", self._execute),
            ("commit", self._end),
            ("rollback", self._end),
        )
        for name, hook in hooks:
            event.listen(Engine, name, hook)
        try:
            yield self
        finally:
            for name, hook in hooks:
                event.remove(Engine, name, hook)


def _build(catalog, tables: int):
    """Register the root and the chain; lease every job; (jobs, their outputs, leases)."""
    from catalog import JobSpec, TableSpec

    names = [f"t{i:03d}" for i in range(tables)]
    jobs = [f"job_{name}" for name in names]
    catalog.register_table(TableSpec(name=names[0], location="/bench/" + names[0], kind="root"))
    catalog.register_job(JobSpec(jobs[0], names[0], source="bench_source"))
    for i in range(1, tables):
        catalog.register_table(TableSpec(name=names[i], location="/bench/" + names[i]))
        catalog.register_job(JobSpec(jobs[i], names[i], inputs=(names[i - 1],)))
    leases = catalog.acquire_leases(jobs, "bench", ttl_seconds=600)
    return jobs, names, {lease.job: lease for lease in leases}


def _epoch(catalog, jobs, names, leases, version: int) -> None:
    """One epoch: the root sealed, then each derived job's batch as the engine asks it."""
    from catalog import SealRequest

    epoch = catalog.open_epoch().id
    for i, (job, table) in enumerate(zip(jobs, names, strict=True)):
        generation = leases[job].generation
        catalog.batch_start([table], epoch, inputs=names[i - 1 : i] if i else ())
        catalog.seal(
            job,
            generation,
            [SealRequest(table=table, epoch=epoch, delta_version=version, attempt=1, rows=5)],
        )
    renewed = catalog.renew_leases(leases.values(), ttl_seconds=600)
    leases.update(renewed.renewed)


def _copy(source: Path, target: Path) -> None:
    """A copy of the SQLite database at ``source``, its write-ahead log included."""
    with closing(sqlite3.connect(source)) as original, closing(sqlite3.connect(target)) as copy:
        original.backup(copy)


def _replay(path: Path, transactions: list[Transaction]) -> float:
    """CPU seconds of the captured transactions through ``sqlite3`` alone."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("PRAGMA journal_mode = WAL")
    started = time.process_time()
    for transaction in transactions:
        for statement, parameters, many in transaction.statements:
            if statement.startswith("BEGIN"):
                db.execute(statement)
            elif many:
                db.executemany(statement, parameters)
            else:
                db.execute(statement, parameters).fetchall()
        db.execute("COMMIT")
    elapsed = time.process_time() - started
    db.close()
    return elapsed


def main() -> dict:
    from catalog import load_catalog

    tables = env_int("DB_BENCH_TABLES", 10)
    epochs = env_int("DB_BENCH_EPOCHS", 200)
    with tempfile.TemporaryDirectory(prefix="catalog-batch-") as tmp:
        path = Path(tmp) / "catalog.db"
        catalog = load_catalog(f"sqlite:///{path}")
        try:
            jobs, names, leases = _build(catalog, tables)
            for version in range(WARMUP_EPOCHS):
                _epoch(catalog, jobs, names, leases, version)
            floor_copy = Path(tmp) / "floor.db"
            _copy(path, floor_copy)
            with Capture().listening() as capture:
                capture.on = True
                started = time.process_time()
                for version in range(WARMUP_EPOCHS, WARMUP_EPOCHS + epochs):
                    _epoch(catalog, jobs, names, leases, version)
                ours = time.process_time() - started
                capture.on = False
        finally:
            catalog.close()
        floor = _replay(floor_copy, capture.transactions)
    batches = epochs * tables
    statements = sum(len(t.statements) for t in capture.transactions)
    figures = {
        "tables": tables,
        "epochs": epochs,
        "catalog_ms_per_batch": ours / batches * 1000,
        "sqlite3_ms_per_batch": floor / batches * 1000,
        "ratio": ours / floor,
        "statements_per_batch": statements / batches,
        "transactions_per_batch": len(capture.transactions) / batches,
    }
    print(
        f"catalog calls of one batch ({tables}-table chain, {epochs} epochs, SQLite file): "
        f"{figures['transactions_per_batch']:.1f} transactions, "
        f"{figures['statements_per_batch']:.1f} statements"
    )
    print(
        f"driver CPU per batch: catalog {figures['catalog_ms_per_batch']:.2f} ms, the same SQL "
        f"through sqlite3 {figures['sqlite3_ms_per_batch']:.2f} ms -> {figures['ratio']:.2f}x"
    )
    print(load_average())
    return figures
