"""Snapshot reads of a SQLite catalog file through Python's ``sqlite3``, without SQLAlchemy.

A command that only reads a cut (``etl sql``, ``etl snapshot``) would spend most of its
start-up importing SQLAlchemy; :class:`SqliteReads` answers :class:`~catalog.reads.CatalogReads`
with a few statements over the same file, under the same connection policy as
:mod:`catalog.dialect` (a 30 s busy timeout; pins written under ``BEGIN IMMEDIATE``, the
catalog's write lock; datetimes stored as SQLAlchemy stores them, naive UTC text). Rows
become values through :mod:`catalog.rows`, as in the SQL stores.
``tests/catalog/test_sqlite_reads.py`` holds every answer to the SQL catalog's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from catalog import rows
from catalog.base import META_SCHEMA_VERSION, SCHEMA_VERSION
from catalog.errors import (
    CatalogReadOnlyError,
    CatalogUnavailableError,
    EpochExpiredError,
    PinExpiredError,
    UnknownEpochError,
    UnknownRevisionError,
    UnknownTableError,
    UnknownTagError,
    driver_message,
    says_read_only,
)
from catalog.models import EpochExpiry, Pin, TableInfo, Tag, pin_ttl
from catalog.urls import catalog_url
from catalog.write_gate import write_transaction
from consistency.records import Epoch, EpochState, Revision, TableEpoch
from consistency.timestamps import as_utc

BUSY_TIMEOUT_SECONDS = 30.0
"""As the SQL catalog's SQLite connections wait for a writer (catalog.dialect)."""

_DATETIME_TEXT = "%Y-%m-%d %H:%M:%S.%f"
"""How SQLAlchemy stores a DATETIME in SQLite (naive, UTC here)."""

_TABLE_EPOCH = ", ".join(f"te.{column}" for column in rows.TABLE_EPOCH_COLUMNS)


def _latest_written(*, bounded: bool) -> str:
    """Per requested table, its newest WRITTEN epoch (with ``bounded``, at or before
    ``:at_or_before``): one backward descent of ``ix_table_epochs_state`` per name, then
    the row by primary key, as the SQL catalog's ``latest_statements``."""
    bound = "AND x.epoch <= :at_or_before" if bounded else ""
    return f"""
WITH newest AS MATERIALIZED (
    SELECT requested.value AS name, (
        SELECT max(x.epoch) FROM table_epochs AS x
        WHERE x.table_name = requested.value AND x.state = '{EpochState.WRITTEN.value}' {bound}
    ) AS epoch
    FROM json_each(:names) AS requested
)
SELECT {_TABLE_EPOCH} FROM table_epochs AS te
JOIN newest ON te.table_name = newest.name AND te.epoch = newest.epoch
"""


_LATEST_WRITTEN = {bounded: _latest_written(bounded=bounded) for bounded in (False, True)}


_UNAVAILABLE = (sqlite3.OperationalError, sqlite3.ProgrammingError)
"""The database cannot be used: locked past the busy timeout, read-only, unreadable, or
this object closed (a pin's renewal may come after the command closed it)."""


def _where(conditions: Sequence[str]) -> str:
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def _stored(value: datetime) -> str:
    return as_utc(value).replace(tzinfo=None).strftime(_DATETIME_TEXT)


_DATETIME_COLUMNS = """
SELECT DISTINCT c.name FROM sqlite_master AS t JOIN pragma_table_info(t.name) AS c
WHERE t.type = 'table' AND upper(c.type) = 'DATETIME'
"""
"""The columns the schema declares DATETIME (each name is one in every table that has it)."""


def sqlite_file(url: str | None, *, warehouse: str | os.PathLike[str] | None) -> Path | None:
    """The SQLite file a catalog URL (or a warehouse's embedded catalog) names; None for
    any other catalog, and for a URL with options or escapes (SQLAlchemy reads those)."""
    if url is None and warehouse is None:
        return None
    text = catalog_url(url, warehouse=warehouse)
    prefix = "sqlite:///"
    if not text.startswith(prefix) or any(c in text for c in "?%#"):
        return None
    path = text.removeprefix(prefix)
    return Path(path) if path and path != ":memory:" else None


def _row_factory(datetimes: frozenset[str]) -> Any:
    """Rows with their columns as attributes, the ``datetimes`` columns as aware UTC."""

    def make(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Any:
        names = tuple(column[0] for column in cursor.description)
        values = tuple(
            datetime.fromisoformat(value).replace(tzinfo=UTC)
            if name in datetimes and isinstance(value, str)
            else value
            for name, value in zip(names, values, strict=True)
        )
        return _row_type(names)(*values)

    return make


_row_types: dict[tuple[str, ...], type] = {}


def _row_type(names: tuple[str, ...]) -> type:
    found = _row_types.get(names)
    if found is None:
        found = _row_types[names] = namedtuple("Row", names)  # noqa: PYI024 - per statement
    return found


class SqliteReads:
    """:class:`~catalog.reads.CatalogReads` on a SQLite catalog file, without SQLAlchemy.

    Open it with :meth:`open`. One connection, shared by the threads of the process
    (a snapshot's pin is renewed from a thread of its own), one statement at a time.
    """

    backend = "sqlite"
    read_only = False

    def __init__(self, path: Path, connection: sqlite3.Connection):
        self.path = path
        self.url = f"sqlite:///{path}"
        self._conn = connection
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> SqliteReads | None:
        """Reads of the catalog file at ``path``; None unless it exists, this process may
        write it and its directory (a pin is a write; SQLite's WAL files live beside it),
        and it is at this schema version."""
        path = path.expanduser().resolve()
        if not path.is_file() or not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
            return None
        try:
            connection = sqlite3.connect(
                path,
                timeout=BUSY_TIMEOUT_SECONDS,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error:
            return None
        try:
            connection.execute("PRAGMA foreign_keys = ON")
            datetimes = frozenset(name for (name,) in connection.execute(_DATETIME_COLUMNS))
            connection.row_factory = _row_factory(datetimes)
            found = connection.execute(
                "SELECT value FROM meta WHERE key = ?", (META_SCHEMA_VERSION,)
            ).fetchone()
        except sqlite3.Error:
            found = None
        if found is None or found.value != str(SCHEMA_VERSION):
            connection.close()
            return None
        return cls(path, connection)

    # -- statements --------------------------------------------------------------------

    def _unavailable(self, exc: sqlite3.Error) -> CatalogUnavailableError | CatalogReadOnlyError:
        if says_read_only(exc):
            return CatalogReadOnlyError(url=self.url)
        return CatalogUnavailableError(
            backend="sqlite", host=None, database=str(self.path), reason=driver_message(exc)
        )

    def _all(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except _UNAVAILABLE as exc:
                raise self._unavailable(exc) from None

    def _first(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Any:
        found = self._all(sql, params)
        return found[0] if found else None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction under the catalog's write lock (``BEGIN IMMEDIATE``),
        rolled back if anything in it fails."""
        with write_transaction(), self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                finally:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
            except _UNAVAILABLE as exc:
                raise self._unavailable(exc) from None

    # -- tables and epochs -------------------------------------------------------------

    def list_tables(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[TableInfo]:
        conditions = []
        if not include_retired:
            conditions.append("retired_at IS NULL")
        if pipeline is not None:
            conditions.append("pipeline = :pipeline")
        found = self._all(
            f"SELECT * FROM tables{_where(conditions)} ORDER BY name",
            {"pipeline": pipeline},
        )
        return [rows.table_info(row) for row in found]

    def get_table(self, name: str) -> TableInfo:
        row = self._first("SELECT * FROM tables WHERE name = ?", (name,))
        if row is None:
            raise UnknownTableError(name)
        return rows.table_info(row)

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        names = list(dict.fromkeys(tables))
        if not names:
            return {}
        found = self._all(
            _LATEST_WRITTEN[at_or_before is not None],
            {"names": json.dumps(names), "at_or_before": at_or_before},
        )
        return {row.table_name: rows.table_epoch(row) for row in found}

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        names = list(dict.fromkeys(tables))
        if not names:
            return {}
        found = self._all(
            f"SELECT {_TABLE_EPOCH} FROM table_epochs AS te WHERE te.epoch = :epoch "
            "AND te.table_name IN (SELECT value FROM json_each(:names))",
            {"epoch": epoch, "names": json.dumps(names)},
        )
        return {row.table_name: rows.table_epoch(row) for row in found}

    def get_epoch(self, epoch: int) -> Epoch:
        row = self._first("SELECT * FROM epochs WHERE id = ?", (epoch,))
        if row is None:
            raise UnknownEpochError(epoch)
        return rows.epoch(row)

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        conditions = ["barrier_ts <= :ts"] + ([] if pipeline is None else ["pipeline = :pipeline"])
        row = self._first(
            f"SELECT * FROM epochs{_where(conditions)} ORDER BY barrier_ts DESC, id DESC LIMIT 1",
            {"ts": _stored(ts), "pipeline": pipeline},
        )
        return None if row is None else rows.epoch(row)

    # -- time travel -------------------------------------------------------------------

    def get_tag(self, name: str) -> Tag:
        row = self._first("SELECT * FROM tags WHERE name = ?", (name,))
        if row is None:
            raise UnknownTagError(name)
        return rows.tag(row)

    def revisions(self, *, pipeline: str | None = None, table: str | None = None) -> list[Revision]:
        conditions = [] if pipeline is None else ["pipeline = :pipeline"]
        found = self._all(
            f"SELECT * FROM revisions{_where(conditions)} ORDER BY id", {"pipeline": pipeline}
        )
        revisions = [rows.revision(row) for row in found]
        return [rev for rev in revisions if table is None or table in rev.tables]

    def superseded_states(self, revision: int) -> list[TableEpoch]:
        if self._first("SELECT id FROM revisions WHERE id = ?", (revision,)) is None:
            raise UnknownRevisionError(revision)
        found = self._all(
            f"SELECT {_TABLE_EPOCH} FROM revision_states AS te WHERE te.revision = ? "
            "ORDER BY te.table_name, te.epoch",
            (revision,),
        )
        return [rows.table_epoch(row) for row in found]

    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]:
        conditions = ["te.table_name = :table", "te.epoch > :after"]
        if up_to is not None:
            conditions.append("te.epoch <= :up_to")
        found = self._all(
            f"SELECT {_TABLE_EPOCH} FROM table_epochs AS te{_where(conditions)} "
            "ORDER BY te.epoch LIMIT :limit",
            {
                "table": table,
                "after": after,
                "up_to": up_to,
                "limit": -1 if limit is None else limit,
            },
        )
        return [rows.table_epoch(row) for row in found]

    # -- retention ---------------------------------------------------------------------

    _EXPIRY = (
        "SELECT x.epoch, e.pipeline, x.rule, x.expired_at FROM epoch_expiries AS x "
        "JOIN epochs AS e ON e.id = x.epoch WHERE x.epoch = ?"
    )

    def expiry_of(self, epoch: int) -> EpochExpiry | None:
        row = self._first(self._EXPIRY, (epoch,))
        return None if row is None else EpochExpiry(*row)

    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin:
        pin_ttl(ttl_seconds)
        with self._write() as conn:
            if epoch is not None:
                if conn.execute("SELECT id FROM epochs WHERE id = ?", (epoch,)).fetchone() is None:
                    raise UnknownEpochError(epoch)
                expired = conn.execute(self._EXPIRY, (epoch,)).fetchone()
                if expired is not None:
                    raise EpochExpiredError(
                        epoch=epoch, rule=expired.rule, expired_at=expired.expired_at
                    )
            pin = Pin.new(
                pipeline=pipeline,
                epoch=epoch,
                versions=versions,
                holder=holder,
                ttl_seconds=ttl_seconds,
                now=datetime.now(UTC),
            )
            conn.execute(
                "INSERT INTO pins (id, pipeline, epoch, versions, holder, created_at, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    pin.id,
                    pin.pipeline,
                    pin.epoch,
                    rows.json_text(pin.versions),
                    pin.holder,
                    _stored(pin.created_at),
                    _stored(pin.expires_at),
                ),
            )
        return pin

    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin:
        ttl = pin_ttl(ttl_seconds)
        with self._write() as conn:
            row = conn.execute("SELECT * FROM pins WHERE id = ?", (pin.id,)).fetchone()
            now = datetime.now(UTC)
            if row is None or row.expires_at <= now:
                raise PinExpiredError(
                    pin_id=pin.id,
                    holder=pin.holder,
                    expired_at=None if row is None else row.expires_at,
                )
            conn.execute(
                "UPDATE pins SET expires_at = ? WHERE id = ?", (_stored(now + ttl), pin.id)
            )
        return dataclasses.replace(rows.pin(row), expires_at=now + ttl)

    def release_pin(self, pin: Pin) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM pins WHERE id = ?", (pin.id,))

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SqliteReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteReads({self.url!r})"


__all__ = ["SqliteReads", "sqlite_file"]
