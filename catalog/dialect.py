"""What differs between the catalog's backends, SQLite and PostgreSQL, in one object each.

Every other catalog module is written once for both: where they differ (how a write
transaction is serialized, whose clock is used, how a list of names is bound, how the
newest row per name is fetched, which engines are opened) it asks :class:`Dialect`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.pool import QueuePool, StaticPool

from catalog.errors import CatalogNotFoundError, CatalogUrlError
from consistency.timestamps import as_utc

Backend = Literal["sqlite", "postgresql"]

# Advisory lock class id for catalog writes ("DBR1"); the second key is the schema, so
# catalogs in different schemas of one database do not serialize against each other.
_PG_LOCK_CLASS = 0x44425231
_PG_IDLE_IN_TRANSACTION_SECONDS = 30
_PG_CONNECT_TIMEOUT_SECONDS = 10
_SQLITE_BUSY_TIMEOUT_SECONDS = 30.0


class Dialect(ABC):
    """One backend's way of doing what the catalog needs."""

    name: Backend

    def in_memory(self, url: sa.URL) -> bool:
        """Whether the catalog at ``url`` lives in this process's memory."""
        return False

    @abstractmethod
    def opens_read_only(self, url: sa.URL, *, requested: bool | None, create: bool) -> bool:
        """Whether the catalog at ``url`` opens read-only (``requested`` if given);
        CatalogNotFoundError if it does not exist and may not be created, and creating
        what it needs (a directory) if it may."""

    @abstractmethod
    def engines(self, url: sa.URL, *, read_only: bool) -> tuple[sa.Engine, sa.Engine]:
        """The engine of transactions and the engine of one-statement reads."""

    @abstractmethod
    def begin(self, conn: sa.Connection, *, write: bool, snapshot: bool) -> None:
        """The first statements of a transaction: a write is serialized with every other
        writer of the catalog; a snapshot read sees one committed state throughout."""

    @abstractmethod
    def now(self, conn: sa.Connection) -> datetime:
        """The catalog's clock."""

    @abstractmethod
    def where(self, conn: sa.Connection, url: sa.URL) -> str:
        """Where a catalog with no tables was looked for, for messages (never with a
        password)."""

    @abstractmethod
    def names(self) -> tuple[sa.TableValuedAlias, sa.ColumnElement[Any]]:
        """A table of the names bound as ``:names`` (see :meth:`bind_names`), and its column."""

    @abstractmethod
    def bind_names(self, names: Sequence[str]) -> object:
        """The value of the ``:names`` parameter for ``names``."""

    @abstractmethod
    def greatest(self, *values: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The largest of ``values`` (a scalar function, not an aggregate)."""

    @abstractmethod
    def fetch_newest(
        self,
        target: sa.Table,
        epoch: sa.Select[Any],
        requested: sa.TableValuedAlias,
        name: sa.ColumnElement[Any],
    ) -> sa.Select[Any]:
        """The rows of ``target`` at the epoch ``epoch`` finds for each requested name,
        computing ``epoch`` once per name."""


class SqliteDialect(Dialect):
    name: Backend = "sqlite"

    def in_memory(self, url: sa.URL) -> bool:
        return not url.database

    def opens_read_only(self, url: sa.URL, *, requested: bool | None, create: bool) -> bool:
        if self.in_memory(url):
            _refuse_read_only(url, requested)
            if not create:
                raise CatalogNotFoundError(
                    backend="sqlite", where="an in-memory catalog (always new and empty)"
                )
            return False
        path = Path(url.database or "")
        if not path.exists():
            if not create:
                raise CatalogNotFoundError(backend="sqlite", where=f"the SQLite file {path}")
            if not requested:
                path.parent.mkdir(parents=True, exist_ok=True)
            return bool(requested)
        if requested is not None:
            return requested
        # WAL mode needs to create the -wal and -shm files beside the database.
        return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))

    def engines(self, url: sa.URL, *, read_only: bool) -> tuple[sa.Engine, sa.Engine]:
        in_memory = self.in_memory(url)
        if in_memory:
            engine = sa.create_engine(
                "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        elif read_only:
            path = Path(url.database or "").resolve()
            engine = sa.create_engine(
                "sqlite://", creator=lambda: _read_only_connection(path), poolclass=QueuePool
            )
        else:
            engine = sa.create_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_SECONDS})
        wal = not in_memory and not read_only

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: object) -> None:
            # Take transaction control away from the sqlite3 module (which would not BEGIN
            # before SELECTs) so that the "begin" hook below decides how to begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            # IMMEDIATE takes the write lock now, not at the first write: a transaction
            # that reads then writes cannot be overtaken by another writer in between.
            write = conn.get_execution_options().get("catalog_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine, engine.execution_options()

    def begin(self, conn: sa.Connection, *, write: bool, snapshot: bool) -> None:
        """Nothing to add: BEGIN IMMEDIATE took the write lock, and a SQLite transaction
        reads one snapshot."""

    def now(self, conn: sa.Connection) -> datetime:
        return datetime.now(UTC)

    def where(self, conn: sa.Connection, url: sa.URL) -> str:
        return f"the SQLite file {url.database}"

    def names(self) -> tuple[sa.TableValuedAlias, sa.ColumnElement[Any]]:
        names = sa.bindparam("names", type_=sa.Text)
        requested = sa.func.json_each(names).table_valued("value").alias("requested")
        return requested, requested.c.value

    def bind_names(self, names: Sequence[str]) -> object:
        return json.dumps(list(names))

    def greatest(self, *values: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.func.max(*values)

    def fetch_newest(
        self,
        target: sa.Table,
        epoch: sa.Select[Any],
        requested: sa.TableValuedAlias,
        name: sa.ColumnElement[Any],
    ) -> sa.Select[Any]:
        # SQLite has no LATERAL: a materialized CTE runs the descents once per name.
        materialized = (
            sa.select(name.label("name"), epoch.scalar_subquery().label("epoch"))
            .cte("newest")
            .prefix_with("MATERIALIZED")
        )
        return sa.select(target).join(
            materialized,
            sa.and_(
                target.c.table_name == materialized.c.name,
                target.c.epoch == materialized.c.epoch,
            ),
        )


def _refuse_read_only(url: sa.URL, requested: bool | None) -> None:
    if requested:
        raise CatalogUrlError(
            url=url.render_as_string(hide_password=True),
            reason="only a SQLite catalog file can be opened read-only",
        )


def _read_only_connection(path: Path) -> sqlite3.Connection:
    uri = "file:" + quote(str(path))
    conn = sqlite3.connect(
        f"{uri}?mode=ro", uri=True, timeout=_SQLITE_BUSY_TIMEOUT_SECONDS, check_same_thread=False
    )
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        # A WAL database in a directory we cannot write, without -wal and -shm files:
        # no writer can exist either, so the file can be read as immutable.
        conn.close()
        conn = sqlite3.connect(
            f"{uri}?mode=ro&immutable=1",
            uri=True,
            timeout=_SQLITE_BUSY_TIMEOUT_SECONDS,
            check_same_thread=False,
        )
    return conn


class PostgresDialect(Dialect):
    name: Backend = "postgresql"

    def opens_read_only(self, url: sa.URL, *, requested: bool | None, create: bool) -> bool:
        _refuse_read_only(url, requested)
        return False

    def engines(self, url: sa.URL, *, read_only: bool) -> tuple[sa.Engine, sa.Engine]:
        # pool_pre_ping: a pooled session the server ended (a restart, a failover, an
        # idle timeout) is replaced at checkout instead of failing the next statement.
        engine = sa.create_engine(
            url,
            connect_args={"connect_timeout": _PG_CONNECT_TIMEOUT_SECONDS},
            pool_pre_ping=True,
        )

        @sa.event.listens_for(engine, "connect")
        def _on_pg_connect(dbapi_connection: Any, _record: object) -> None:
            # A process frozen inside a catalog transaction (SIGSTOP, a VM pause) would
            # hold the write lock for as long as it is frozen: the server ends such a
            # transaction, the others go on, and the frozen process finds its
            # connection gone when it wakes. (SQLite has no server to do this.)
            with dbapi_connection.cursor() as cursor:
                cursor.execute(
                    f"SET idle_in_transaction_session_timeout = '{_PG_IDLE_IN_TRANSACTION_SECONDS}s'"
                )
            dbapi_connection.commit()

        # Reads of one statement need no transaction: autocommit saves the BEGIN and
        # ROLLBACK round trips on every snapshot resolution.
        autocommit = sa.create_engine(
            url,
            isolation_level="AUTOCOMMIT",
            connect_args={"connect_timeout": _PG_CONNECT_TIMEOUT_SECONDS},
            pool_pre_ping=True,
        )
        return engine, autocommit

    def begin(self, conn: sa.Connection, *, write: bool, snapshot: bool) -> None:
        if snapshot:
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if write:
            conn.execute(
                sa.select(
                    sa.func.pg_advisory_xact_lock(
                        _PG_LOCK_CLASS, sa.func.hashtext(sa.func.current_schema())
                    )
                )
            )

    def now(self, conn: sa.Connection) -> datetime:
        # The server's clock, shared by every machine.
        return as_utc(conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one())

    def where(self, conn: sa.Connection, url: sa.URL) -> str:
        schema = conn.execute(sa.select(sa.func.current_schema())).scalar_one()
        host = f"{url.host or 'localhost'}:{url.port or 5432}"
        return (
            f"PostgreSQL database {url.database!r} on {host}, schema {schema!r} "
            "(it has no catalog tables)"
        )

    def names(self) -> tuple[sa.TableValuedAlias, sa.ColumnElement[Any]]:
        names = sa.bindparam("names", type_=sa.ARRAY(sa.Text))
        requested = sa.func.unnest(names).table_valued("name").render_derived("requested")
        return requested, requested.c.name

    def bind_names(self, names: Sequence[str]) -> object:
        return list(names)

    def greatest(self, *values: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.func.greatest(*values)

    def fetch_newest(
        self,
        target: sa.Table,
        epoch: sa.Select[Any],
        requested: sa.TableValuedAlias,
        name: sa.ColumnElement[Any],
    ) -> sa.Select[Any]:
        # LATERAL runs the descents once per name inside the join.
        found = epoch.lateral("newest")
        return (
            sa.select(target)
            .select_from(requested)
            .join(found, sa.true())
            .join(target, sa.and_(target.c.table_name == name, target.c.epoch == found.c.epoch))
        )


DIALECTS: dict[Backend, Dialect] = {"sqlite": SqliteDialect(), "postgresql": PostgresDialect()}
"""The dialect of each backend."""
