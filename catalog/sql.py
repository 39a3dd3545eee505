"""The SQL catalog: one implementation of :class:`catalog.base.Catalog` for SQLite and PostgreSQL.

Every state change is one write transaction, and write transactions are serialized
across processes: SQLite takes the database write lock at ``BEGIN IMMEDIATE`` (WAL mode,
so readers are never blocked), PostgreSQL takes a transaction-scoped advisory lock keyed
on the catalog's schema as the first statement. Epoch issuance, registration checks,
sealing and leases therefore see every earlier write and cannot race. Reads take no lock;
a read of several statements shares one snapshot.

JSON values are stored as text. Timestamps are timezone-aware UTC; the clock is the
database server's on PostgreSQL (shared by every machine) and the local clock on SQLite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.pool import QueuePool, StaticPool

from catalog.base import SCHEMA_VERSION, Catalog
from catalog.errors import (
    CatalogError,
    CatalogNotFoundError,
    CatalogReadOnlyError,
    CatalogUnavailableError,
    CatalogUrlError,
    DuplicateWriterError,
    EpochExpiredError,
    EpochStateError,
    ForeignEpochError,
    InvalidRetentionPolicyError,
    LeaseError,
    LeaseHeldError,
    LineageCycleError,
    NameOwnedError,
    PinExpiredError,
    PipelineMismatchError,
    RegistrationError,
    RetiredError,
    RetirementBlockedError,
    RevisionStateError,
    SchemaVersionError,
    SliceConflictError,
    StaleLeaseError,
    TableConflictError,
    TagExistsError,
    UnknownEpochError,
    UnknownJobError,
    UnknownPipelineError,
    UnknownRevisionError,
    UnknownTableError,
    UnknownTagError,
    WriterMismatchError,
)
from catalog.models import (
    FAILURE_MESSAGE_MAX_CHARS,
    PIPELINE_DEFAULT,
    CommitManifest,
    Epoch,
    EpochExpiry,
    EpochState,
    JobFailureRecord,
    JobInfo,
    JobSpec,
    Lease,
    LineageEdge,
    Pin,
    PipelineInfo,
    Resolution,
    ResolutionAction,
    RetiredPipeline,
    Revision,
    RevisionState,
    SealRequest,
    SourceSlice,
    TableEpoch,
    TableInfo,
    TableKind,
    TableSpec,
    TableStatus,
    Tag,
    ValidationRecord,
    WriteMode,
    validate_name,
    validate_tag_name,
)
from catalog.states import check_transition
from catalog.timestamps import as_utc

Backend = Literal["sqlite", "postgresql"]
LatestQuery = Literal["written", "written_at_or_before", "processed", "validation"]

SUPPORTED_URLS = (
    "sqlite:///PATH (a file)",
    "sqlite:// or memory:// (in memory, this process only)",
    "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (also postgres:// and postgresql+psycopg://)",
)

# Advisory lock class id for catalog writes ("DBR1"); the second key is the schema, so
# catalogs in different schemas of one database do not serialize against each other.
_PG_LOCK_CLASS = 0x44425231
_SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
_PG_IDLE_IN_TRANSACTION_SECONDS = 30
_PG_CONNECT_TIMEOUT_SECONDS = 10
_NAME_LENGTH = 128


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them naive, in UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def _name_column(name: str, *args: Any, **kw: Any) -> sa.Column[str]:
    return sa.Column(name, sa.String(_NAME_LENGTH), *args, **kw)


def _epoch_column(name: str, *args: Any, **kw: Any) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger, *args, **kw)


def _pipeline_column() -> sa.Column[str]:
    # No foreign key: SQLite cannot add a referencing column with a non-NULL default, and
    # a v1 catalog gets this column by ALTER TABLE. The catalog creates a pipeline's row
    # (under the write lock) before anything refers to it.
    return _name_column("pipeline", nullable=False, server_default=PIPELINE_DEFAULT)


def _serial_column(name: str) -> sa.Column[int]:
    # INTEGER on SQLite makes the id the rowid (autoincrementing); BIGSERIAL on PostgreSQL.
    return sa.Column(name, sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True)


metadata = sa.MetaData()

meta_table = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
_META_SCHEMA_VERSION = "schema_version"
_META_RETENTION_POLICY = "retention_policy"
"""The catalog-wide default retention policy (JSON text) lives in ``meta``."""
_META_EPOCH_HIGH_WATER = "epoch_high_water"
"""The newest epoch id issued before a retired pipeline's epochs were deleted."""

pipelines_table = sa.Table(
    "pipelines",
    metadata,
    _name_column("name", primary_key=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("retention_policy", sa.Text),
)

tables_table = sa.Table(
    "tables",
    metadata,
    _name_column("name", primary_key=True),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("schema_json", sa.Text),
    sa.Column("partition_by", sa.Text, nullable=False),
    _epoch_column("first_epoch", nullable=False),
    # One column, so one writer per table is structural; checked under the write lock.
    _name_column("writer_job"),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Column("retired_at", UtcDateTime),
    sa.Index("ix_tables_pipeline", "pipeline"),
)

jobs_table = sa.Table(
    "jobs",
    metadata,
    _name_column("name", primary_key=True),
    _name_column("output", sa.ForeignKey("tables.name"), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    _name_column("source"),
    sa.Column("keys", sa.Text, nullable=False),
    sa.Column("side_outputs", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Column("retired_at", UtcDateTime),
    sa.Index("ix_jobs_pipeline", "pipeline"),
)

job_inputs_table = sa.Table(
    "job_inputs",
    metadata,
    _name_column("job", sa.ForeignKey("jobs.name", ondelete="CASCADE"), primary_key=True),
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
)

epochs_table = sa.Table(
    "epochs",
    metadata,
    # INTEGER on SQLite makes the id the rowid: no separate primary-key index.
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column("barrier_ts", UtcDateTime, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Index("ix_epochs_barrier_ts", "barrier_ts", "id"),
    sa.Index("ix_epochs_pipeline", "pipeline", "id"),
    sa.Index("ix_epochs_pipeline_barrier_ts", "pipeline", "barrier_ts", "id"),
)

source_slices_table = sa.Table(
    "source_slices",
    metadata,
    _name_column("source", primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("bounds", sa.Text, nullable=False),
    sa.Column("catch_up", sa.Boolean, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
)

_STATES = tuple(state.value for state in EpochState)

table_epochs_table = sa.Table(
    "table_epochs",
    metadata,
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("delta_version", sa.BigInteger),
    _name_column("job"),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger),
    _epoch_column("coalesced_into"),
    sa.Column("rows", sa.BigInteger),
    sa.Column("reason", sa.Text),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.CheckConstraint(f"state IN {_STATES!r}", name="ck_table_epochs_state"),
    # max(epoch) for one (table, state) is one descent of this index: latest_written and
    # latest_processed stay O(log history) per table.
    sa.Index("ix_table_epochs_state", "table_name", "state", "epoch"),
    sqlite_with_rowid=False,
)

epoch_history_table = sa.Table(
    "epoch_history",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    _name_column("table_name", nullable=False),
    _epoch_column("epoch", nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("delta_version", sa.BigInteger),
    _name_column("job"),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger),
    _epoch_column("coalesced_into"),
    sa.Column("rows", sa.BigInteger),
    sa.Column("reason", sa.Text),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.Index("ix_epoch_history_table_epoch", "table_name", "epoch"),
)

commits_table = sa.Table(
    "commits",
    metadata,
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("barrier_ts", UtcDateTime, nullable=False),
    sa.Column("committed_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Index("ix_commits_pipeline", "pipeline", "epoch"),
)

leases_table = sa.Table(
    "leases",
    metadata,
    _name_column("job", sa.ForeignKey("jobs.name"), primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.Column("acquired_at", UtcDateTime, nullable=False),
)

validations_table = sa.Table(
    "validations",
    metadata,
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("success", sa.Boolean, nullable=False),
    sa.Column("policy", sa.String(32), nullable=False),
    sa.Column("results", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
)

job_failures_table = sa.Table(
    "job_failures",
    metadata,
    _serial_column("id"),
    _name_column("job", sa.ForeignKey("jobs.name"), nullable=False),
    _name_column("pipeline", nullable=False),
    _epoch_column("epoch", sa.ForeignKey("epochs.id")),
    sa.Column("attempt", sa.Integer),
    sa.Column("error_class", sa.String(256), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("generation", sa.BigInteger),
    sa.Column("failed_at", UtcDateTime, nullable=False),
    # max(id) per job is one index descent: last_failures stays O(jobs * log failures).
    sa.Index("ix_job_failures_job", "job", "id"),
    sa.Index("ix_job_failures_epoch", "epoch", "id"),
)

_ACTIONS = tuple(action.value for action in ResolutionAction)

resolutions_table = sa.Table(
    "resolutions",
    metadata,
    _serial_column("id"),
    _name_column("table_name", sa.ForeignKey("tables.name"), nullable=False),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.CheckConstraint(f"action IN {_ACTIONS!r}", name="ck_resolutions_action"),
    sa.Index("ix_resolutions_table_epoch", "table_name", "epoch", "id"),
)

pins_table = sa.Table(
    "pins",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    _name_column("pipeline"),
    _epoch_column("epoch", sa.ForeignKey("epochs.id")),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.Index("ix_pins_epoch", "epoch", "expires_at"),
    sa.Index("ix_pins_expires_at", "expires_at"),
)

tags_table = sa.Table(
    "tags",
    metadata,
    _name_column("name", primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), nullable=False),
    _name_column("pipeline"),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Index("ix_tags_epoch", "epoch"),
)

epoch_expiries_table = sa.Table(
    "epoch_expiries",
    metadata,
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("rule", sa.Text, nullable=False),
    sa.Column("expired_at", UtcDateTime, nullable=False),
)

_REVISION_STATES = tuple(state.value for state in RevisionState)

revisions_table = sa.Table(
    "revisions",
    metadata,
    _serial_column("id"),
    _pipeline_column(),
    sa.Column("tables", sa.Text, nullable=False),
    _epoch_column("from_epoch", nullable=False),
    _epoch_column("through_epoch"),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("note", sa.Text),
    sa.CheckConstraint(f"state IN {_REVISION_STATES!r}", name="ck_revisions_state"),
    sa.Index("ix_revisions_pipeline", "pipeline", "id"),
)

# The epoch states a switched revision replaced: what readers resolved before the switch.
revision_states_table = sa.Table(
    "revision_states",
    metadata,
    sa.Column(
        "revision",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        sa.ForeignKey("revisions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    _name_column("table_name", primary_key=True),
    _epoch_column("epoch", primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("delta_version", sa.BigInteger),
    _name_column("job"),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger),
    _epoch_column("coalesced_into"),
    sa.Column("rows", sa.BigInteger),
    sa.Column("reason", sa.Text),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

Migration = Callable[[sa.Connection], None]


def _add_columns(conn: sa.Connection, table: sa.Table, *names: str) -> None:
    """ALTER TABLE ... ADD COLUMN, rendered from the column's current definition."""
    quoted = conn.dialect.identifier_preparer.format_table(table)
    for name in names:
        column = sa.schema.CreateColumn(table.c[name]).compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD COLUMN {column}")


def _migrate_1_to_2(conn: sa.Connection) -> None:
    """Schema v2: pipelines, retirement, failures, resolutions, pins, tags, expiries.

    Everything that exists is kept and belongs to pipeline "default" (the server default
    of the new ``pipeline`` columns); new tables are created empty.
    """
    for table in (
        pipelines_table,
        job_failures_table,
        resolutions_table,
        pins_table,
        tags_table,
        epoch_expiries_table,
    ):
        table.create(conn)
    _add_columns(conn, tables_table, "pipeline", "retired_at")
    _add_columns(conn, jobs_table, "pipeline", "retired_at")
    _add_columns(conn, epochs_table, "pipeline")
    _add_columns(conn, commits_table, "pipeline")
    new_indexes = {"ix_tables_pipeline", "ix_jobs_pipeline", "ix_epochs_pipeline"}
    new_indexes |= {"ix_epochs_pipeline_barrier_ts", "ix_commits_pipeline"}
    for table in (tables_table, jobs_table, epochs_table, commits_table):
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            if index.name in new_indexes:
                index.create(conn)
    conn.execute(
        pipelines_table.insert().values(name=PIPELINE_DEFAULT, created_at=datetime.now(UTC))
    )


def _migrate_2_to_3(conn: sa.Connection) -> None:
    """Schema v3: revisions (etl recompute) and the epoch states they replaced; nothing
    existing changes."""
    revisions_table.create(conn)
    revision_states_table.create(conn)


MIGRATIONS: dict[int, Migration] = {2: _migrate_1_to_2, 3: _migrate_2_to_3}
"""Schema migrations by the version they produce: ``MIGRATIONS[v]`` turns v-1 into v.

A new catalog is created from ``metadata`` at SCHEMA_VERSION; a schema change bumps
SCHEMA_VERSION and registers its migration here. Each runs inside the upgrade's one
write transaction (PostgreSQL and SQLite both have transactional DDL).
"""


# -- URLs --------------------------------------------------------------------------------

_USER_COLON = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/]*):(?P<rest>.*)$", re.S)


def url_password(url: str) -> str | None:
    """The password in ``url`` as written, or None: everything between ``scheme://user:``
    (a user name may hold ``@``) and the URL's last ``@``. A password holding unencoded
    ``@ : / # ? %`` is found whole; where a query holds an ``@`` this takes in more than
    the password, never less."""
    match = _USER_COLON.match(url)
    if match is None or "@" not in match["rest"]:
        return None
    return match["rest"].rsplit("@", 1)[0] or None


def mask_url(url: str) -> str:
    """``url`` with its password (see :func:`url_password`) replaced by ``***``, even if
    the URL does not parse."""
    match = _USER_COLON.match(url)
    if match is None or url_password(url) is None:
        return url
    return f"{match['head']}:***@{match['rest'].rsplit('@', 1)[1]}"


def normalize_url(url: str | sa.URL) -> tuple[Backend, sa.URL]:
    """The backend and SQLAlchemy URL of a catalog URL (see SUPPORTED_URLS)."""
    text = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    if text.startswith("memory://"):
        return "sqlite", sa.make_url("sqlite://")
    password = url_password(text)
    if password is not None and "@" in password:
        # SQLAlchemy (like libpq) would end the password at its first @ and take the rest
        # for the host, which then appears in messages.
        raise CatalogUrlError(
            url=mask_url(text),
            reason="an @ in the password (or in the query) is not percent-encoded: "
            "write it as %40 (and a % as %25)",
        )
    try:
        parsed = sa.make_url(text)
    except sa.exc.ArgumentError:
        # The driver's message repeats the URL, password included: never pass it on.
        raise CatalogUrlError(
            url=text.split("://", 1)[0] + "://..." if "://" in text else "(not shown)",
            reason="it is not a URL; use one of " + "; ".join(SUPPORTED_URLS),
        ) from None
    scheme = parsed.drivername.split("+", 1)[0]
    if scheme == "sqlite":
        if parsed.database == ":memory:":
            return "sqlite", sa.make_url("sqlite://")
        return "sqlite", parsed.set(drivername="sqlite")
    if scheme in ("postgresql", "postgres"):
        return "postgresql", parsed.set(drivername="postgresql+psycopg")
    raise CatalogUrlError(
        url=parsed.render_as_string(hide_password=True),
        reason=f"unsupported scheme {parsed.drivername!r}; use one of " + "; ".join(SUPPORTED_URLS),
    )


CATALOG_FILE_NAME = "_catalog.sqlite"
"""The embedded catalog's file name inside the warehouse."""


def catalog_url(url: str | None, *, warehouse: str | os.PathLike[str] | None) -> str:
    """``url``, or when it is None the embedded SQLite catalog of a local ``warehouse``."""
    if url is not None:
        return url
    if warehouse is None:
        raise CatalogUrlError(
            url="",
            reason="give a catalog URL or a local warehouse directory; supported URLs: "
            + "; ".join(SUPPORTED_URLS),
        )
    location = os.fspath(warehouse)
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    elif "://" in location:
        raise CatalogUrlError(
            url=mask_url(location),
            reason="the embedded SQLite catalog needs a local warehouse directory; "
            "for a warehouse on object storage give a PostgreSQL catalog URL",
        )
    return f"sqlite:///{Path(location).expanduser().resolve() / CATALOG_FILE_NAME}"


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# -- the catalog -------------------------------------------------------------------------


class SqlCatalog(Catalog):
    """The catalog in a SQLite file, SQLite in memory, or a PostgreSQL schema.

    Opening a database created by another schema version raises SchemaVersionError;
    :meth:`open_for_upgrade` (or ``check_schema=False``) opens it only to call
    :meth:`upgrade`.

    With ``create=False`` a missing catalog raises CatalogNotFoundError and nothing is
    created. A SQLite file that this process cannot write (file or directory
    permissions), or any SQLite file with ``read_only=True``, is opened read-only
    (``mode=ro``): every read works, every write raises CatalogReadOnlyError.
    """

    def __init__(
        self,
        url: str | sa.URL,
        *,
        check_schema: bool = True,
        create: bool = True,
        read_only: bool | None = None,
    ):
        backend, sa_url = normalize_url(url)
        self.backend: Backend = backend
        self.url = sa_url.render_as_string(hide_password=True)
        self._sa_url = sa_url
        self._in_memory = backend == "sqlite" and not sa_url.database
        self._create = create
        self.read_only = self._decide_read_only(read_only)
        # One shared connection in memory: operations from several threads take turns.
        self._thread_lock = threading.RLock() if self._in_memory else nullcontext()
        self._engine = self._create_engine()
        # PostgreSQL reads of one statement need no transaction: autocommit saves the
        # BEGIN and ROLLBACK round trips on every snapshot resolution.
        self._autocommit_engine = (
            self._engine.execution_options()
            if backend == "sqlite"
            else sa.create_engine(
                sa_url,
                isolation_level="AUTOCOMMIT",
                connect_args={"connect_timeout": _PG_CONNECT_TIMEOUT_SECONDS},
                pool_pre_ping=True,
            )
        )
        self._latest_statements = self._build_latest_statements()
        try:
            self._open_schema(check_schema)
        except BaseException:
            self.close()
            raise

    # -- engine and transactions ---------------------------------------------------------

    def _decide_read_only(self, requested: bool | None) -> bool:
        if self.backend != "sqlite" or self._in_memory:
            if requested:
                raise CatalogUrlError(
                    url=self.url, reason="only a SQLite catalog file can be opened read-only"
                )
            if self._in_memory and not self._create:
                raise CatalogNotFoundError(
                    backend="sqlite", where="an in-memory catalog (always new and empty)"
                )
            return False
        path = Path(self._sa_url.database or "")
        if not path.exists():
            if not self._create:
                raise CatalogNotFoundError(backend="sqlite", where=f"the SQLite file {path}")
            return bool(requested)
        if requested is not None:
            return requested
        # WAL mode needs to create the -wal and -shm files beside the database.
        return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))

    def _sqlite_read_only_connection(self) -> Any:
        import sqlite3
        from urllib.parse import quote

        uri = "file:" + quote(str(Path(self._sa_url.database or "").resolve()))
        conn = sqlite3.connect(
            f"{uri}?mode=ro",
            uri=True,
            timeout=_SQLITE_BUSY_TIMEOUT_SECONDS,
            check_same_thread=False,
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

    def _create_engine(self) -> sa.Engine:
        if self.backend == "postgresql":
            # pool_pre_ping: a pooled session the server ended (a restart, a failover, an
            # idle timeout) is replaced at checkout instead of failing the next statement.
            engine = sa.create_engine(
                self._sa_url,
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
                        "SET idle_in_transaction_session_timeout = "
                        f"'{_PG_IDLE_IN_TRANSACTION_SECONDS}s'"
                    )
                dbapi_connection.commit()

            return engine
        if self._in_memory:
            engine = sa.create_engine(
                "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        elif self.read_only:
            engine = sa.create_engine(
                "sqlite://", creator=self._sqlite_read_only_connection, poolclass=QueuePool
            )
        else:
            path = Path(self._sa_url.database or "")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._unavailable(exc) from None
            engine = sa.create_engine(
                self._sa_url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_SECONDS}
            )

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: object) -> None:
            # Take transaction control away from the sqlite3 module (which would not BEGIN
            # before SELECTs) so that the "begin" hook below decides how to begin.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys = ON")
            if not self._in_memory and not self.read_only:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            # IMMEDIATE takes the write lock now, not at the first write: a transaction
            # that reads then writes cannot be overtaken by another writer in between.
            write = conn.get_execution_options().get("catalog_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def _unavailable(self, exc: BaseException) -> CatalogUnavailableError:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        text = reason[0] if reason else type(exc).__name__
        password = self._sa_url.password
        if password:
            for written in {str(password), quote(str(password), safe="")}:
                text = text.replace(written, "***")
        return CatalogUnavailableError(
            backend=self.backend,
            host=None
            if self._sa_url.host is None
            else f"{self._sa_url.host}:{self._sa_url.port or 5432}",
            database=self._sa_url.database or ":memory:",
            reason=text,
        )

    def _read_only_error(self, exc: BaseException | None = None) -> CatalogReadOnlyError | None:
        """CatalogReadOnlyError if ``exc`` (or, without one, this catalog) is read-only."""
        if exc is None:
            return CatalogReadOnlyError(url=self.url) if self.read_only else None
        text = str(getattr(exc, "orig", None) or exc).lower()
        if "readonly" in text or "read-only" in text:
            return CatalogReadOnlyError(url=self.url)
        return None

    @contextmanager
    def _connect(self, *, write: bool, snapshot: bool = False) -> Iterator[sa.Connection]:
        if write and self.read_only:
            raise CatalogReadOnlyError(url=self.url)
        with self._thread_lock:
            try:
                engine = self._engine if write or snapshot else self._autocommit_engine
                conn = engine.connect()
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
                raise self._unavailable(exc) from None
            with conn:
                if write:
                    conn.execution_options(catalog_write=True)
                try:
                    transaction = conn.begin()
                except sa.exc.OperationalError as exc:
                    # SQLite: another writer held the lock for longer than the busy timeout,
                    # or the file cannot be written at all.
                    raise (self._read_only_error(exc) or self._unavailable(exc)) from None
                with transaction, self._translate_read_only(write):
                    if snapshot and self.backend == "postgresql":
                        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    if write and self.backend == "postgresql":
                        conn.execute(
                            sa.select(
                                sa.func.pg_advisory_xact_lock(
                                    _PG_LOCK_CLASS, sa.func.hashtext(sa.func.current_schema())
                                )
                            )
                        )
                    yield conn

    @contextmanager
    def _translate_read_only(self, write: bool) -> Iterator[None]:
        """The database's operational errors inside a transaction as catalog errors: a
        read-only catalog, or one that is unavailable (a lost connection: PostgreSQL ends
        the transaction of a process that froze inside it; a lock held too long)."""
        try:
            yield
        except sa.exc.OperationalError as exc:
            error = self._read_only_error(exc) if write else None
            raise (error or self._unavailable(exc)) from None
        except sa.exc.DBAPIError as exc:
            # The server ended the session (psycopg reports an idle-in-transaction timeout
            # as an InternalError): the connection is gone, not the statement wrong.
            if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
                raise self._unavailable(exc) from None
            raise

    def _write(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction, serialized with every other writer of the catalog."""
        return self._connect(write=True)

    def _read(self, *, snapshot: bool = False) -> AbstractContextManager[sa.Connection]:
        """A read; with ``snapshot`` its statements all see the same committed state."""
        return self._connect(write=False, snapshot=snapshot)

    def _now(self, conn: sa.Connection) -> datetime:
        if self.backend == "postgresql":
            return as_utc(conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one())
        return datetime.now(UTC)

    # -- schema --------------------------------------------------------------------------

    def _open_schema(self, check: bool) -> None:
        with self._read() as conn:
            exists = sa.inspect(conn).has_table(meta_table.name)
            found = self._stored_version(conn) if exists else None
            if found is None and not self._create:
                raise CatalogNotFoundError(backend=self.backend, where=self._where(conn))
        if found is None:
            with self._write() as conn:
                if sa.inspect(conn).has_table(meta_table.name):
                    found = self._stored_version(conn)
                else:
                    metadata.create_all(conn)
                    conn.execute(
                        meta_table.insert().values(
                            key=_META_SCHEMA_VERSION, value=str(SCHEMA_VERSION)
                        )
                    )
                    self._pipeline_row(conn, PIPELINE_DEFAULT, create=True)
                    found = SCHEMA_VERSION
        if check and found != SCHEMA_VERSION:
            raise SchemaVersionError(found=found, expected=SCHEMA_VERSION)

    def _where(self, conn: sa.Connection) -> str:
        """Where this catalog lives, for messages (never with a password)."""
        if self.backend == "sqlite":
            return f"the SQLite file {self._sa_url.database}"
        schema = conn.execute(sa.select(sa.func.current_schema())).scalar_one()
        host = f"{self._sa_url.host or 'localhost'}:{self._sa_url.port or 5432}"
        return (
            f"PostgreSQL database {self._sa_url.database!r} on {host}, schema {schema!r} "
            "(it has no catalog tables)"
        )

    @staticmethod
    def _stored_version(conn: sa.Connection) -> int:
        value = conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == _META_SCHEMA_VERSION)
        ).scalar_one()
        return int(value)

    def upgrade(self) -> int:
        with self._write() as conn:
            found = self._stored_version(conn)
            if found > SCHEMA_VERSION:
                raise SchemaVersionError(found=found, expected=SCHEMA_VERSION)
            for version in range(found + 1, SCHEMA_VERSION + 1):
                migrate = MIGRATIONS.get(version)
                if migrate is None:
                    raise CatalogError(
                        f"no migration from catalog schema version {version - 1} to {version}; "
                        "this catalog cannot be upgraded in place: recreate it"
                    )
                migrate(conn)
            conn.execute(
                meta_table.update()
                .where(meta_table.c.key == _META_SCHEMA_VERSION)
                .values(value=str(SCHEMA_VERSION))
            )
        return found

    def close(self) -> None:
        self._engine.dispose()
        self._autocommit_engine.dispose()

    @classmethod
    def open_for_upgrade(
        cls, url: str | None = None, *, warehouse: str | os.PathLike[str] | None = None
    ) -> SqlCatalog:
        """Open an existing catalog whatever its schema version, only to call :meth:`upgrade`
        (CatalogNotFoundError where there is none: nothing is created)."""
        return cls(catalog_url(url, warehouse=warehouse), check_schema=False, create=False)

    def __repr__(self) -> str:
        return f"SqlCatalog({self.url!r})"

    # -- tables and jobs -----------------------------------------------------------------

    def register_pipeline(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> PipelineInfo:
        table_specs, job_specs = self._pipeline_specs(name, tables, jobs)
        with self._write() as conn:
            self._refuse_foreign_names(conn, name, table_specs, job_specs)
            self._refuse_foreign_inputs(conn, job_specs)
            self._pipeline_row(conn, name, create=True)
            for table_spec in table_specs:
                self._register_table(conn, table_spec)
            for job_spec in job_specs:
                self._register_job(conn, job_spec)
            return self._pipeline_info(self._pipeline_row(conn, name))

    def check_registration(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> None:
        table_specs, job_specs = self._pipeline_specs(name, tables, jobs)
        with self._read(snapshot=True) as conn:
            self._refuse_foreign_names(conn, name, table_specs, job_specs)
            self._refuse_foreign_inputs(conn, job_specs)

    def _pipeline_specs(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> tuple[list[TableSpec], list[JobSpec]]:
        validate_name(name, kind="pipeline")
        return (
            [self._checked_table(dataclasses.replace(spec, pipeline=name)) for spec in tables],
            [self._normalized_job(dataclasses.replace(spec, pipeline=name)) for spec in jobs],
        )

    @staticmethod
    def _refuse_foreign_inputs(conn: sa.Connection, jobs: Sequence[JobSpec]) -> None:
        """PipelineMismatchError for the first input table of a job that another pipeline
        registered (it can only be read as a source)."""
        t = tables_table
        for spec in jobs:
            for table, owner, location in conn.execute(
                sa.select(t.c.name, t.c.pipeline, t.c.location).where(
                    t.c.name.in_(spec.inputs), t.c.pipeline != spec.pipeline
                )
            ):
                raise PipelineMismatchError(
                    job=spec.name,
                    table=table,
                    job_pipeline=spec.pipeline,
                    table_pipeline=owner,
                    role="input",
                    location=location,
                )

    def _refuse_foreign_names(
        self,
        conn: sa.Connection,
        pipeline: str,
        tables: Sequence[TableSpec],
        jobs: Sequence[JobSpec],
    ) -> None:
        """NameOwnedError for every job, source or table name another pipeline owns: a job
        (retired too) or table registered in it, or a source one of its jobs reads or whose
        slices it recorded. Checked under the write lock, so two registrations cannot race."""
        j, t, ss, e = jobs_table, tables_table, source_slices_table, epochs_table
        conflicts: list[tuple[str, str, str]] = []
        job_names = [spec.name for spec in jobs]
        for name, owner in conn.execute(
            sa.select(j.c.name, j.c.pipeline)
            .where(j.c.name.in_(job_names), j.c.pipeline != pipeline)
            .order_by(j.c.name)
        ):
            conflicts.append(("job", name, owner))
        sources = sorted({spec.source for spec in jobs if spec.source is not None})
        owned_sources = sa.union(
            sa.select(j.c.source.label("source"), j.c.pipeline.label("owner")).where(
                j.c.source.in_(sources), j.c.pipeline != pipeline
            ),
            sa.select(ss.c.source.label("source"), e.c.pipeline.label("owner"))
            .join(e, e.c.id == ss.c.epoch)
            .where(ss.c.source.in_(sources), e.c.pipeline != pipeline),
        ).subquery()
        seen_sources: set[str] = set()
        for source, owner in conn.execute(
            sa.select(owned_sources.c.source, owned_sources.c.owner).order_by(
                owned_sources.c.source, owned_sources.c.owner
            )
        ):
            if source not in seen_sources:
                seen_sources.add(source)
                conflicts.append(("source", source, owner))
        for name, owner in conn.execute(
            sa.select(t.c.name, t.c.pipeline)
            .where(t.c.name.in_([spec.name for spec in tables]), t.c.pipeline != pipeline)
            .order_by(t.c.name)
        ):
            conflicts.append(("table", name, owner))
        if conflicts:
            raise NameOwnedError(pipeline=pipeline, conflicts=conflicts)

    @staticmethod
    def _checked_table(spec: TableSpec) -> TableSpec:
        validate_name(spec.name, kind="table")
        validate_name(spec.pipeline, kind="pipeline")
        if spec.kind not in get_args(TableKind):
            raise RegistrationError(
                f"table {spec.name!r} has kind {spec.kind!r}; use one of {get_args(TableKind)}"
            )
        if not spec.location:
            raise RegistrationError(f"table {spec.name!r} needs a location")
        return spec

    def register_table(self, spec: TableSpec) -> TableInfo:
        spec = self._checked_table(spec)
        with self._write() as conn:
            self._refuse_foreign_names(conn, spec.pipeline, [spec], [])
            return self._register_table(conn, spec)

    def _register_table(self, conn: sa.Connection, spec: TableSpec) -> TableInfo:
        partition_by = list(spec.partition_by)
        row = self._table_row(conn, spec.name, missing_ok=True)
        if row is not None:
            existing = self._table_info(row)
            for field, old, new in (
                ("location", existing.location, spec.location),
                ("kind", existing.kind, spec.kind),
                ("partition_by", existing.partition_by, tuple(partition_by)),
                ("pipeline", existing.pipeline, spec.pipeline),
            ):
                if old != new:
                    raise TableConflictError(table=spec.name, field=field, existing=old, new=new)
            changes: dict[str, Any] = {}
            if spec.schema_json is not None and existing.schema_json is None:
                changes["schema_json"] = spec.schema_json
            if existing.retired_at is not None:
                changes["retired_at"] = None  # registering a retired table revives it
            if not changes:
                return existing
            conn.execute(
                tables_table.update().where(tables_table.c.name == spec.name).values(**changes)
            )
            return self._table_info(self._table_row(conn, spec.name))
        self._pipeline_row(conn, spec.pipeline, create=True)
        conn.execute(
            tables_table.insert().values(
                name=spec.name,
                location=spec.location,
                kind=spec.kind,
                schema_json=spec.schema_json,
                partition_by=_json(partition_by),
                first_epoch=self._next_epoch_id(conn),
                writer_job=None,
                created_at=self._now(conn),
                pipeline=spec.pipeline,
                retired_at=None,
            )
        )
        return self._table_info(self._table_row(conn, spec.name))

    def update_table_schema(self, table: str, schema_json: str) -> None:
        with self._write() as conn:
            self._table_row(conn, table)
            self._set_schema(conn, table, schema_json)

    @staticmethod
    def _set_schema(conn: sa.Connection, table: str, schema_json: str) -> None:
        conn.execute(
            tables_table.update()
            .where(tables_table.c.name == table)
            .values(schema_json=schema_json)
        )

    def register_job(self, spec: JobSpec) -> JobInfo:
        spec = self._normalized_job(spec)
        with self._write() as conn:
            self._refuse_foreign_names(conn, spec.pipeline, [], [spec])
            return self._register_job(conn, spec)

    def _register_job(self, conn: sa.Connection, spec: JobSpec) -> JobInfo:
        existing = self._job_row(conn, spec.name, missing_ok=True)
        if existing is not None:
            current = self._job_info(existing, self._job_inputs(conn, spec.name))
            if self._same_job(current, spec) and current.retired_at is None:
                return current
        table_rows = {}
        for table in (spec.output, *spec.side_outputs, *spec.inputs):
            table_rows[table] = self._table_row(conn, table, job=spec.name)
        outputs = (spec.output, *spec.side_outputs)
        for table, row in table_rows.items():
            role = "output" if table in outputs else "input"
            if row.pipeline != spec.pipeline:
                raise PipelineMismatchError(
                    job=spec.name,
                    table=table,
                    job_pipeline=spec.pipeline,
                    table_pipeline=row.pipeline,
                    role=role,
                    location=row.location,
                )
            if row.retired_at is not None:
                raise RetiredError(
                    kind="table", name=table, retired_at=row.retired_at, job=spec.name
                )
        for table in outputs:
            writer = table_rows[table].writer_job
            if writer is not None and writer != spec.name:
                raise DuplicateWriterError(table=table, existing_job=writer, new_job=spec.name)
        cycle = self._find_cycle(conn, spec)
        if cycle:
            raise LineageCycleError(job=spec.name, cycle=cycle)

        now = self._now(conn)
        self._pipeline_row(conn, spec.pipeline, create=True)
        values = dict(
            output=spec.output,
            mode=spec.mode,
            source=spec.source,
            keys=_json(list(spec.keys)),
            side_outputs=_json(list(spec.side_outputs)),
            pipeline=spec.pipeline,
            retired_at=None,  # registering a retired job revives it
        )
        if existing is None:
            conn.execute(jobs_table.insert().values(name=spec.name, created_at=now, **values))
        else:
            conn.execute(jobs_table.update().where(jobs_table.c.name == spec.name).values(**values))
            conn.execute(job_inputs_table.delete().where(job_inputs_table.c.job == spec.name))
            conn.execute(
                tables_table.update()
                .where(
                    tables_table.c.writer_job == spec.name,
                    tables_table.c.name.not_in(outputs),
                )
                .values(writer_job=None)
            )
        if spec.inputs:
            conn.execute(
                job_inputs_table.insert(),
                [
                    {"job": spec.name, "table_name": table, "position": position}
                    for position, table in enumerate(spec.inputs)
                ],
            )
        conn.execute(
            tables_table.update()
            .where(tables_table.c.name.in_(outputs))
            .values(writer_job=spec.name)
        )
        sealed = self._latest_rows(conn, "written", [spec.output])
        first: int | None = None
        if sealed:
            # A table an existing job gains (a new side output) is responsible from the
            # first epoch the job has not sealed: it has no state at the job's earlier
            # epochs, and must not hold their COMMIT back.
            first = sealed[0].epoch + 1
        elif spec.inputs:
            # A new job catches up over its inputs' history: its outputs are responsible
            # from the newest first epoch among the inputs, unless they already hold states.
            first = max(table_rows[table].first_epoch for table in spec.inputs)
        if first is not None:
            for table in outputs:
                if not self._has_states(conn, table):
                    conn.execute(
                        tables_table.update()
                        .where(tables_table.c.name == table)
                        .values(first_epoch=first)
                    )
        return self._job_info(self._job_row(conn, spec.name), spec.inputs)

    @staticmethod
    def _normalized_job(spec: JobSpec) -> JobSpec:
        validate_name(spec.name, kind="job")
        for table in (spec.output, *spec.inputs, *spec.side_outputs):
            validate_name(table, kind="table")
        if spec.source is not None:
            validate_name(spec.source, kind="source")
        validate_name(spec.pipeline, kind="pipeline")
        if spec.mode not in get_args(WriteMode):
            raise RegistrationError(
                f"job {spec.name!r} has write mode {spec.mode!r}; use one of {get_args(WriteMode)}"
            )
        side_outputs = tuple(t for t in dict.fromkeys(spec.side_outputs) if t != spec.output)
        return JobSpec(
            name=spec.name,
            output=spec.output,
            mode=spec.mode,
            inputs=tuple(dict.fromkeys(spec.inputs)),
            source=spec.source,
            keys=tuple(spec.keys),
            side_outputs=side_outputs,
            pipeline=spec.pipeline,
        )

    @staticmethod
    def _same_job(info: JobInfo, spec: JobSpec) -> bool:
        return JobSpec(
            name=info.name,
            output=info.output,
            mode=info.mode,
            inputs=info.inputs,
            source=info.source,
            keys=info.keys,
            side_outputs=info.side_outputs,
            pipeline=info.pipeline,
        ) == JobSpec(
            name=spec.name,
            output=spec.output,
            mode=spec.mode,
            inputs=spec.inputs,
            source=spec.source,
            keys=spec.keys,
            side_outputs=spec.side_outputs,
            pipeline=spec.pipeline,
        )

    def _find_cycle(self, conn: sa.Connection, spec: JobSpec) -> list[str] | None:
        """The path job -> output -> ... -> input -> job if the new edges close a cycle."""
        readers: dict[str, list[str]] = {}
        for job, table in conn.execute(
            sa.select(job_inputs_table.c.job, job_inputs_table.c.table_name)
            .where(job_inputs_table.c.job != spec.name)
            .order_by(job_inputs_table.c.job, job_inputs_table.c.position)
        ):
            readers.setdefault(table, []).append(job)
        writes: dict[str, list[str]] = {}
        for job, output, side_outputs in conn.execute(
            sa.select(jobs_table.c.name, jobs_table.c.output, jobs_table.c.side_outputs).where(
                jobs_table.c.name != spec.name
            )
        ):
            writes[job] = [output, *json.loads(side_outputs)]

        inputs = set(spec.inputs)
        parent: dict[str, str | None] = {}
        frontier = []
        for table in (spec.output, *spec.side_outputs):
            if table not in parent:
                parent[table] = None
                frontier.append(table)
        # Breadth-first over table -> reading job -> written table: the shortest cycle.
        while frontier:
            next_frontier = []
            for table in frontier:
                if table in inputs:
                    path = [table]
                    node = parent[table]
                    while node is not None:
                        path.append(node)
                        node = parent[node]
                    return [spec.name, *reversed(path), spec.name]
                for job in readers.get(table, ()):
                    if job in parent:
                        continue
                    parent[job] = table
                    for written in writes.get(job, ()):
                        if written not in parent:
                            parent[written] = job
                            next_frontier.append(written)
            frontier = next_frontier
        return None

    def get_table(self, name: str) -> TableInfo:
        with self._read() as conn:
            return self._table_info(self._table_row(conn, name))

    def list_tables(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[TableInfo]:
        t = tables_table
        query = sa.select(t).order_by(t.c.name)
        if not include_retired:
            query = query.where(t.c.retired_at.is_(None))
        if pipeline is not None:
            query = query.where(t.c.pipeline == pipeline)
        with self._read() as conn:
            return [self._table_info(row) for row in conn.execute(query)]

    def get_job(self, name: str) -> JobInfo:
        with self._read(snapshot=True) as conn:
            return self._job_info(self._job_row(conn, name), self._job_inputs(conn, name))

    def list_jobs(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[JobInfo]:
        j = jobs_table
        query = sa.select(j).order_by(j.c.name)
        if not include_retired:
            query = query.where(j.c.retired_at.is_(None))
        if pipeline is not None:
            query = query.where(j.c.pipeline == pipeline)
        with self._read(snapshot=True) as conn:
            inputs = self._all_job_inputs(conn)
            return [self._job_info(row, inputs.get(row.name, ())) for row in conn.execute(query)]

    # -- pipelines and retirement --------------------------------------------------------

    def _pipeline_row(self, conn: sa.Connection, name: str, *, create: bool = False) -> Any:
        """The pipeline's row; with ``create`` (and always for the default) made if missing.

        Call ``create=True`` only inside a write transaction.
        """
        p = pipelines_table
        row = conn.execute(sa.select(p).where(p.c.name == name)).first()
        if row is not None:
            return row
        if not create and name != PIPELINE_DEFAULT:
            raise UnknownPipelineError(name)
        conn.execute(p.insert().values(name=name, created_at=self._now(conn)))
        return conn.execute(sa.select(p).where(p.c.name == name)).first()

    @staticmethod
    def _pipeline_info(row: Any) -> PipelineInfo:
        return PipelineInfo(
            name=row.name, created_at=row.created_at, retention_policy=row.retention_policy
        )

    def list_pipelines(self) -> list[PipelineInfo]:
        p = pipelines_table
        with self._read() as conn:
            return [
                self._pipeline_info(row) for row in conn.execute(sa.select(p).order_by(p.c.name))
            ]

    def retire_pipeline(self, name: str) -> RetiredPipeline:
        j, t, e, le = jobs_table, tables_table, epochs_table, leases_table
        with self._write() as conn:
            self._pipeline_row(conn, name)
            now = self._now(conn)
            live = conn.execute(
                sa.select(le)
                .join(j, j.c.name == le.c.job)
                .where(j.c.pipeline == name, le.c.expires_at > now)
                .order_by(le.c.job)
            ).all()
            if live:
                held = "; ".join(
                    f"job {row.job!r} by {row.owner} until {row.expires_at}" for row in live
                )
                raise RetirementBlockedError(
                    kind="pipeline",
                    name=name,
                    blockers=[row.job for row in live],
                    reason=f"a run of it holds live leases ({held}); stop that run (or wait "
                    "for its leases to expire) and retire it again",
                )
            job_rows = conn.execute(sa.select(j).where(j.c.pipeline == name)).all()
            jobs = [row.name for row in job_rows]
            tables = [
                self._table_info(row)
                for row in conn.execute(sa.select(t).where(t.c.pipeline == name).order_by(t.c.name))
            ]
            table_names = [info.name for info in tables]
            epochs = sa.select(e.c.id).where(e.c.pipeline == name)
            ss = source_slices_table
            sources = sorted(
                {row.source for row in job_rows if row.source is not None}
                | set(conn.execute(sa.select(ss.c.source).where(ss.c.epoch.in_(epochs))).scalars())
            )
            epoch_count = conn.execute(
                sa.select(sa.func.count()).select_from(e).where(e.c.pipeline == name)
            ).scalar_one()
            self._keep_epoch_high_water(conn)
            for statement in (
                ss.delete().where(ss.c.epoch.in_(epochs)),
                le.delete().where(le.c.job.in_(jobs)),
                job_failures_table.delete().where(
                    sa.or_(
                        job_failures_table.c.job.in_(jobs),
                        job_failures_table.c.epoch.in_(epochs),
                    )
                ),
                job_inputs_table.delete().where(job_inputs_table.c.job.in_(jobs)),
                validations_table.delete().where(validations_table.c.table_name.in_(table_names)),
                resolutions_table.delete().where(resolutions_table.c.table_name.in_(table_names)),
                table_epochs_table.delete().where(table_epochs_table.c.table_name.in_(table_names)),
                revision_states_table.delete().where(
                    revision_states_table.c.table_name.in_(table_names)
                ),
                revisions_table.delete().where(revisions_table.c.pipeline == name),
                epoch_history_table.delete().where(
                    epoch_history_table.c.table_name.in_(table_names)
                ),
                pins_table.delete().where(
                    sa.or_(pins_table.c.pipeline == name, pins_table.c.epoch.in_(epochs))
                ),
                tags_table.delete().where(
                    sa.or_(tags_table.c.pipeline == name, tags_table.c.epoch.in_(epochs))
                ),
                epoch_expiries_table.delete().where(epoch_expiries_table.c.epoch.in_(epochs)),
                commits_table.delete().where(commits_table.c.epoch.in_(epochs)),
                j.delete().where(j.c.pipeline == name),
                t.delete().where(t.c.pipeline == name),
                e.delete().where(e.c.pipeline == name),
                pipelines_table.delete().where(
                    pipelines_table.c.name == name, pipelines_table.c.name != PIPELINE_DEFAULT
                ),
            ):
                conn.execute(statement)
            return RetiredPipeline(
                pipeline=name,
                jobs=tuple(sorted(jobs)),
                sources=tuple(sources),
                tables=tuple(tables),
                epochs=epoch_count,
            )

    def _keep_epoch_high_water(self, conn: sa.Connection) -> None:
        """Record the newest epoch id issued, so that ids stay unique after the epochs of a
        retired pipeline are deleted (Delta logs kept on disk still name them)."""
        m = meta_table
        newest = self._next_epoch_id(conn) - 1
        conn.execute(m.delete().where(m.c.key == _META_EPOCH_HIGH_WATER))
        conn.execute(m.insert().values(key=_META_EPOCH_HIGH_WATER, value=str(newest)))

    def _active_readers(self, conn: sa.Connection, tables: Sequence[str], *, but: str) -> list[str]:
        ji, j = job_inputs_table, jobs_table
        return list(
            conn.execute(
                sa.select(ji.c.job)
                .join(j, j.c.name == ji.c.job)
                .where(ji.c.table_name.in_(list(tables)), j.c.retired_at.is_(None), j.c.name != but)
                .distinct()
                .order_by(ji.c.job)
            ).scalars()
        )

    def retire_job(self, name: str) -> JobInfo:
        with self._write() as conn:
            row = self._job_row(conn, name)
            if row.retired_at is None:
                outputs = [row.output, *json.loads(row.side_outputs)]
                readers = self._active_readers(conn, outputs, but=name)
                if readers:
                    raise RetirementBlockedError(
                        kind="job",
                        name=name,
                        blockers=readers,
                        reason=f"active job(s) {', '.join(map(repr, readers))} read its "
                        f"output(s) {', '.join(map(repr, outputs))}; retire them first",
                    )
                conn.execute(
                    jobs_table.update()
                    .where(jobs_table.c.name == name)
                    .values(retired_at=self._now(conn))
                )
            return self._job_info(self._job_row(conn, name), self._job_inputs(conn, name))

    def retire_table(self, name: str) -> TableInfo:
        with self._write() as conn:
            row = self._table_row(conn, name)
            if row.retired_at is None:
                if row.writer_job is not None:
                    writer = self._job_row(conn, row.writer_job)
                    if writer.retired_at is None:
                        raise RetirementBlockedError(
                            kind="table",
                            name=name,
                            blockers=[writer.name],
                            reason=f"its writer job {writer.name!r} is active; retire the job "
                            "first",
                        )
                readers = self._active_readers(conn, [name], but="")
                if readers:
                    raise RetirementBlockedError(
                        kind="table",
                        name=name,
                        blockers=readers,
                        reason=f"active job(s) {', '.join(map(repr, readers))} read it; "
                        "retire them first",
                    )
                conn.execute(
                    tables_table.update()
                    .where(tables_table.c.name == name)
                    .values(retired_at=self._now(conn))
                )
            return self._table_info(self._table_row(conn, name))

    def lineage(self) -> list[LineageEdge]:
        edges = []
        for job in self.list_jobs():
            if job.source is not None:
                edges.append(LineageEdge(src=job.source, dst=job.name, kind="source"))
            edges.extend(LineageEdge(src=t, dst=job.name, kind="input") for t in job.inputs)
            edges.extend(
                LineageEdge(src=job.name, dst=t, kind="output")
                for t in (job.output, *job.side_outputs)
            )
        return edges

    def _table_row(
        self, conn: sa.Connection, name: str, *, job: str | None = None, missing_ok: bool = False
    ) -> Any:
        row = conn.execute(sa.select(tables_table).where(tables_table.c.name == name)).first()
        if row is None and not missing_ok:
            raise UnknownTableError(name, job=job)
        return row

    @staticmethod
    def _table_info(row: Any) -> TableInfo:
        return TableInfo(
            name=row.name,
            location=row.location,
            kind=row.kind,
            schema_json=row.schema_json,
            partition_by=tuple(json.loads(row.partition_by)),
            first_epoch=row.first_epoch,
            writer_job=row.writer_job,
            created_at=row.created_at,
            pipeline=row.pipeline,
            retired_at=row.retired_at,
        )

    @staticmethod
    def _job_row(conn: sa.Connection, name: str, *, missing_ok: bool = False) -> Any:
        row = conn.execute(sa.select(jobs_table).where(jobs_table.c.name == name)).first()
        if row is None and not missing_ok:
            raise UnknownJobError(name)
        return row

    @staticmethod
    def _job_inputs(conn: sa.Connection, job: str) -> tuple[str, ...]:
        return tuple(
            conn.execute(
                sa.select(job_inputs_table.c.table_name)
                .where(job_inputs_table.c.job == job)
                .order_by(job_inputs_table.c.position)
            ).scalars()
        )

    @staticmethod
    def _all_job_inputs(conn: sa.Connection) -> dict[str, tuple[str, ...]]:
        inputs: dict[str, list[str]] = {}
        for job, table in conn.execute(
            sa.select(job_inputs_table.c.job, job_inputs_table.c.table_name).order_by(
                job_inputs_table.c.job, job_inputs_table.c.position
            )
        ):
            inputs.setdefault(job, []).append(table)
        return {job: tuple(tables) for job, tables in inputs.items()}

    @staticmethod
    def _job_info(row: Any, inputs: Sequence[str]) -> JobInfo:
        return JobInfo(
            name=row.name,
            output=row.output,
            mode=row.mode,
            inputs=tuple(inputs),
            source=row.source,
            keys=tuple(json.loads(row.keys)),
            side_outputs=tuple(json.loads(row.side_outputs)),
            created_at=row.created_at,
            pipeline=row.pipeline,
            retired_at=row.retired_at,
        )

    @staticmethod
    def _has_states(conn: sa.Connection, table: str) -> bool:
        return (
            conn.execute(
                sa.select(table_epochs_table.c.epoch)
                .where(table_epochs_table.c.table_name == table)
                .limit(1)
            ).first()
            is not None
        )

    # -- epochs and slices ---------------------------------------------------------------

    def open_epoch(
        self, barrier_ts: datetime | None = None, *, pipeline: str = PIPELINE_DEFAULT
    ) -> Epoch:
        validate_name(pipeline, kind="pipeline")
        e = epochs_table
        with self._write() as conn:
            self._pipeline_row(conn, pipeline, create=pipeline == PIPELINE_DEFAULT)
            now = self._now(conn)
            # Barrier timestamps never decrease within a pipeline; another pipeline's
            # clock (say, event time) does not move this one's.
            last_ts = conn.execute(
                sa.select(e.c.barrier_ts)
                .where(e.c.pipeline == pipeline)
                .order_by(e.c.id.desc())
                .limit(1)
            ).scalar_one_or_none()
            ts = now if barrier_ts is None else as_utc(barrier_ts)
            if last_ts is not None and ts < last_ts:
                ts = last_ts
            epoch = Epoch(
                id=self._next_epoch_id(conn), barrier_ts=ts, created_at=now, pipeline=pipeline
            )
            conn.execute(
                e.insert().values(
                    id=epoch.id,
                    barrier_ts=epoch.barrier_ts,
                    created_at=epoch.created_at,
                    pipeline=pipeline,
                )
            )
            return epoch

    @staticmethod
    def _next_epoch_id(conn: sa.Connection) -> int:
        newest = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(epochs_table.c.id), 0))
        ).scalar_one()
        high_water = conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == _META_EPOCH_HIGH_WATER)
        ).scalar_one_or_none()
        return max(newest, int(high_water or 0)) + 1

    @staticmethod
    def _epoch(row: Any) -> Epoch:
        return Epoch(
            id=row.id, barrier_ts=row.barrier_ts, created_at=row.created_at, pipeline=row.pipeline
        )

    def get_epoch(self, epoch: int) -> Epoch:
        with self._read() as conn:
            return self._epoch(self._epoch_row(conn, epoch))

    @staticmethod
    def _epoch_row(conn: sa.Connection, epoch: int) -> Any:
        row = conn.execute(sa.select(epochs_table).where(epochs_table.c.id == epoch)).first()
        if row is None:
            raise UnknownEpochError(epoch)
        return row

    def latest_epoch(self, *, pipeline: str | None = None) -> Epoch | None:
        e = epochs_table
        query = sa.select(e).order_by(e.c.id.desc()).limit(1)
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._epoch(row)

    def epochs(
        self, *, after: int = 0, up_to: int | None = None, pipeline: str | None = None
    ) -> list[Epoch]:
        e = epochs_table
        query = sa.select(e).where(e.c.id > after)
        if up_to is not None:
            query = query.where(e.c.id <= up_to)
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            return [self._epoch(row) for row in conn.execute(query.order_by(e.c.id))]

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        e = epochs_table
        query = (
            sa.select(e)
            .where(e.c.barrier_ts <= as_utc(ts))
            .order_by(e.c.barrier_ts.desc(), e.c.id.desc())
            .limit(1)
        )
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._epoch(row)

    @staticmethod
    def _check_epoch_pipeline(
        epoch_row: Any, pipeline: str, *, table: str | None = None, job: str | None = None
    ) -> None:
        """A table's (or job's) epochs are those of its pipeline."""
        if epoch_row.pipeline != pipeline:
            raise ForeignEpochError(
                epoch=epoch_row.id,
                epoch_pipeline=epoch_row.pipeline,
                pipeline=pipeline,
                table=table,
                job=job,
            )

    def record_slice(
        self,
        source: str,
        epoch: int,
        bounds: Mapping[str, object],
        *,
        job: str,
        generation: int,
        catch_up: bool = False,
    ) -> SourceSlice:
        validate_name(source, kind="source")
        encoded = _json(bounds)
        with self._write() as conn:
            job_row = self._job_row(conn, job)
            self._check_lease(conn, job, generation)
            self._check_epoch_pipeline(self._epoch_row(conn, epoch), job_row.pipeline, job=job)
            row = self._slice_row(conn, source, epoch)
            if row is not None:
                recorded = json.loads(row.bounds)
                if recorded != json.loads(encoded):
                    raise SliceConflictError(
                        source=source, epoch=epoch, recorded=recorded, attempted=bounds
                    )
                return self._slice(row)
            conn.execute(
                source_slices_table.insert().values(
                    source=source,
                    epoch=epoch,
                    bounds=encoded,
                    catch_up=catch_up,
                    recorded_at=self._now(conn),
                )
            )
            return self._slice(self._slice_row(conn, source, epoch))

    @staticmethod
    def _slice_row(conn: sa.Connection, source: str, epoch: int) -> Any:
        return conn.execute(
            sa.select(source_slices_table).where(
                source_slices_table.c.source == source, source_slices_table.c.epoch == epoch
            )
        ).first()

    @staticmethod
    def _slice(row: Any) -> SourceSlice:
        return SourceSlice(
            source=row.source,
            epoch=row.epoch,
            bounds=json.loads(row.bounds),
            catch_up=row.catch_up,
            recorded_at=row.recorded_at,
        )

    def get_slice(self, source: str, epoch: int) -> SourceSlice | None:
        with self._read() as conn:
            row = self._slice_row(conn, source, epoch)
        return None if row is None else self._slice(row)

    def latest_slice(self, source: str) -> SourceSlice | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(source_slices_table)
                .where(source_slices_table.c.source == source)
                .order_by(source_slices_table.c.epoch.desc())
                .limit(1)
            ).first()
        return None if row is None else self._slice(row)

    def slices(self, source: str, *, after: int = 0, up_to: int | None = None) -> list[SourceSlice]:
        ss = source_slices_table
        query = sa.select(ss).where(ss.c.source == source, ss.c.epoch > after)
        if up_to is not None:
            query = query.where(ss.c.epoch <= up_to)
        with self._read() as conn:
            rows = conn.execute(query.order_by(ss.c.epoch)).all()
        return [self._slice(row) for row in rows]

    # -- epoch states --------------------------------------------------------------------

    def record_processed(
        self,
        table: str,
        epoch: int,
        *,
        delta_version: int,
        job: str,
        attempt: int,
        generation: int,
        rows: int | None = None,
    ) -> TableEpoch:
        requested = EpochState.PROCESSED
        with self._write() as conn:
            self._check_lease(conn, job, generation)
            table_row = self._check_writer(conn, table, epoch, job, requested)
            self._check_epoch_pipeline(
                self._epoch_row(conn, epoch), table_row.pipeline, table=table
            )
            current = self._state_row(conn, table, epoch)
            check_transition(
                table,
                epoch,
                None if current is None else EpochState(current.state),
                requested,
                attempt=attempt,
                current_attempt=None if current is None else current.attempt,
            )
            return self._set_state(
                conn,
                TableEpoch(
                    table=table,
                    epoch=epoch,
                    state=requested,
                    delta_version=delta_version,
                    job=job,
                    attempt=attempt,
                    generation=generation,
                    rows=rows,
                    updated_at=self._now(conn),
                ),
                exists=current is not None,
            )

    def seal(
        self, job: str, generation: int, requests: Sequence[SealRequest]
    ) -> CommitManifest | None:
        with self._write() as conn:
            self._check_lease(conn, job, generation)
            now = self._now(conn)
            for request in requests:
                self._seal_one(conn, now, job, generation, request)
            manifest = None
            for epoch in sorted({request.epoch for request in requests}):
                manifest = self._record_commit(conn, now, epoch) or manifest
            return manifest

    def _seal_one(
        self, conn: sa.Connection, now: datetime, job: str, generation: int, request: SealRequest
    ) -> None:
        table, epoch = request.table, request.epoch
        written = EpochState.WRITTEN
        table_row = self._check_writer(conn, table, epoch, job, written)
        self._check_epoch_pipeline(self._epoch_row(conn, epoch), table_row.pipeline, table=table)
        current = self._state_row(conn, table, epoch)
        current_state = None if current is None else EpochState(current.state)
        check_transition(
            table,
            epoch,
            current_state,
            written,
            attempt=request.attempt,
            current_attempt=None if current is None else current.attempt,
        )
        latest = self._latest_rows(conn, "written", [table])
        if latest and latest[0].epoch > epoch:
            raise EpochStateError(
                table=table,
                epoch=epoch,
                current=current_state,
                requested=written,
                why=f"epoch {latest[0].epoch} is already WRITTEN and WRITTEN epochs must increase",
            )
        first = epoch if request.first_epoch is None else request.first_epoch
        if not 1 <= first <= epoch:
            raise EpochStateError(
                table=table,
                epoch=epoch,
                current=current_state,
                requested=written,
                why=f"a batch must start at an epoch between 1 and {epoch}, not {first}",
            )
        if first < epoch:
            self._coalesce(conn, now, job, generation, request, first, table_row.pipeline)
        self._set_state(
            conn,
            TableEpoch(
                table=table,
                epoch=epoch,
                state=written,
                delta_version=request.delta_version,
                job=job,
                attempt=request.attempt,
                generation=generation,
                rows=request.rows,
                updated_at=now,
            ),
            exists=current is not None,
        )

    def _coalesce(
        self,
        conn: sa.Connection,
        now: datetime,
        job: str,
        generation: int,
        request: SealRequest,
        first: int,
        pipeline: str,
    ) -> None:
        """Record the pipeline's epochs first..request.epoch-1 COALESCED into request.epoch."""
        te, e = table_epochs_table, epochs_table
        coalesced = list(
            conn.execute(
                sa.select(e.c.id)
                .where(e.c.pipeline == pipeline, e.c.id >= first, e.c.id < request.epoch)
                .order_by(e.c.id)
            ).scalars()
        )
        existing = {
            row.epoch: EpochState(row.state)
            for row in conn.execute(
                sa.select(te.c.epoch, te.c.state)
                .where(
                    te.c.table_name == request.table,
                    te.c.epoch >= first,
                    te.c.epoch < request.epoch,
                )
                .order_by(te.c.epoch)
            )
        }
        for epoch, state in existing.items():
            check_transition(request.table, epoch, state, EpochState.COALESCED)
        values = [
            {
                "table_name": request.table,
                "epoch": epoch,
                "state": EpochState.COALESCED.value,
                "delta_version": None,
                "job": job,
                "attempt": request.attempt,
                "generation": generation,
                "coalesced_into": request.epoch,
                "rows": None,
                "reason": None,
                "updated_at": now,
            }
            for epoch in coalesced
        ]
        if not values:
            return
        if existing:
            conn.execute(
                te.delete().where(
                    te.c.table_name == request.table,
                    te.c.epoch.in_(list(existing)),
                )
            )
        conn.execute(te.insert(), values)
        conn.execute(
            epoch_history_table.insert(),
            [self._history_values(v) for v in values],
        )

    def _record_commit(
        self, conn: sa.Connection, now: datetime, epoch: int
    ) -> CommitManifest | None:
        """Record ``epoch`` COMMIT if every active table of its pipeline responsible for it
        has it WRITTEN."""
        if conn.execute(
            sa.select(commits_table.c.epoch).where(commits_table.c.epoch == epoch)
        ).first():
            return None
        epoch_row = self._epoch_row(conn, epoch)
        t, te = tables_table, table_epochs_table
        rows = conn.execute(
            sa.select(t.c.name, te.c.state, te.c.delta_version)
            .select_from(t.outerjoin(te, sa.and_(te.c.table_name == t.c.name, te.c.epoch == epoch)))
            .where(
                t.c.pipeline == epoch_row.pipeline,
                t.c.retired_at.is_(None),
                t.c.first_epoch <= epoch,
            )
        ).all()
        if not rows or any(row.state != EpochState.WRITTEN.value for row in rows):
            return None
        manifest = CommitManifest(
            epoch=epoch,
            versions={row.name: row.delta_version for row in rows},
            barrier_ts=epoch_row.barrier_ts,
            committed_at=now,
            pipeline=epoch_row.pipeline,
        )
        conn.execute(
            commits_table.insert().values(
                epoch=epoch,
                versions=_json(manifest.versions),
                barrier_ts=manifest.barrier_ts,
                committed_at=now,
                pipeline=manifest.pipeline,
            )
        )
        return manifest

    def mark_rolled_back(
        self, table: str, epoch: int, *, job: str, generation: int, reason: str
    ) -> TableEpoch:
        requested = EpochState.ROLLED_BACK
        with self._write() as conn:
            self._check_lease(conn, job, generation)
            self._check_writer(conn, table, epoch, job, requested)
            current = self._state_row(conn, table, epoch)
            # Only a PROCESSED epoch can be rolled back.
            check_transition(
                table, epoch, None if current is None else EpochState(current.state), requested
            )
            return self._set_state(
                conn,
                TableEpoch(
                    table=table,
                    epoch=epoch,
                    state=requested,
                    delta_version=current.delta_version,
                    job=job,
                    attempt=current.attempt,
                    generation=generation,
                    rows=current.rows,
                    reason=reason,
                    updated_at=self._now(conn),
                ),
                exists=True,
            )

    def _check_lease(self, conn: sa.Connection, job: str, generation: int) -> None:
        current = conn.execute(
            sa.select(leases_table.c.generation).where(leases_table.c.job == job)
        ).scalar_one_or_none()
        if current != generation:
            raise StaleLeaseError(job=job, generation=generation, current_generation=current)

    def _check_writer(
        self, conn: sa.Connection, table: str, epoch: int, job: str, requested: EpochState
    ) -> Any:
        """The table's row, if ``job`` writes it; else EpochStateError."""
        row = self._table_row(conn, table, job=job)
        if row.writer_job != job:
            raise EpochStateError(
                table=table,
                epoch=epoch,
                current=None,
                requested=requested,
                why=f"the table is written by job {row.writer_job!r}, not {job!r}",
            )
        return row

    @staticmethod
    def _state_row(conn: sa.Connection, table: str, epoch: int) -> Any:
        te = table_epochs_table
        return conn.execute(
            sa.select(te).where(te.c.table_name == table, te.c.epoch == epoch)
        ).first()

    @staticmethod
    def _history_values(values: Mapping[str, Any]) -> dict[str, Any]:
        history = {k: v for k, v in values.items() if k != "updated_at"}
        history["recorded_at"] = values["updated_at"]
        return history

    def _set_state(self, conn: sa.Connection, state: TableEpoch, *, exists: bool) -> TableEpoch:
        te = table_epochs_table
        values = {
            "state": state.state.value,
            "delta_version": state.delta_version,
            "job": state.job,
            "attempt": state.attempt,
            "generation": state.generation,
            "coalesced_into": state.coalesced_into,
            "rows": state.rows,
            "reason": state.reason,
            "updated_at": state.updated_at,
        }
        if exists:
            conn.execute(
                te.update()
                .where(te.c.table_name == state.table, te.c.epoch == state.epoch)
                .values(**values)
            )
        else:
            conn.execute(te.insert().values(table_name=state.table, epoch=state.epoch, **values))
        conn.execute(
            epoch_history_table.insert().values(
                **self._history_values({"table_name": state.table, "epoch": state.epoch, **values})
            )
        )
        return state

    @staticmethod
    def _table_epoch(row: Any) -> TableEpoch:
        # On every snapshot's path: the table's columns are in TableEpoch's field order,
        # and positional unpacking is several times faster than named row access.
        table, epoch, state, *rest = row
        return TableEpoch(table, epoch, EpochState(state), *rest)

    def table_epoch(self, table: str, epoch: int) -> TableEpoch | None:
        with self._read() as conn:
            row = self._state_row(conn, table, epoch)
        return None if row is None else self._table_epoch(row)

    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]:
        te = table_epochs_table
        query = sa.select(te).where(te.c.table_name == table, te.c.epoch > after)
        if up_to is not None:
            query = query.where(te.c.epoch <= up_to)
        query = query.order_by(te.c.epoch).limit(limit)
        with self._read() as conn:
            return [self._table_epoch(row) for row in conn.execute(query)]

    def state_history(self, table: str, *, epoch: int | None = None) -> list[TableEpoch]:
        h = epoch_history_table
        query = sa.select(h).where(h.c.table_name == table)
        if epoch is not None:
            query = query.where(h.c.epoch == epoch)
        with self._read() as conn:
            return [
                TableEpoch(
                    table=row.table_name,
                    epoch=row.epoch,
                    state=EpochState(row.state),
                    delta_version=row.delta_version,
                    job=row.job,
                    attempt=row.attempt,
                    generation=row.generation,
                    coalesced_into=row.coalesced_into,
                    rows=row.rows,
                    reason=row.reason,
                    updated_at=row.recorded_at,
                )
                for row in conn.execute(query.order_by(h.c.id))
            ]

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        names = list(dict.fromkeys(tables))
        if not names:
            return {}
        te = table_epochs_table
        with self._read() as conn:
            rows = conn.execute(
                sa.select(te).where(te.c.epoch == epoch, te.c.table_name.in_(names))
            )
            return {row.table_name: self._table_epoch(row) for row in rows}

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        with self._read() as conn:
            if at_or_before is None:
                rows = self._latest_rows(conn, "written", tables)
            else:
                rows = self._latest_rows(
                    conn, "written_at_or_before", tables, at_or_before=at_or_before
                )
        return {row.table_name: self._table_epoch(row) for row in rows}

    def latest_processed(self, tables: Iterable[str]) -> dict[str, TableEpoch]:
        with self._read() as conn:
            rows = self._latest_rows(conn, "processed", tables)
        return {row.table_name: self._table_epoch(row) for row in rows}

    # The latest-state queries are one statement each, built once. For every requested
    # name, max(epoch) is one backward descent of an index (ix_table_epochs_state per
    # state, the primary key for validations), then the row is fetched by primary key:
    # O(tables * log history), never a scan or a GROUP BY over the history.

    def _build_latest_statements(self) -> dict[LatestQuery, sa.Select[Any]]:
        requested: sa.TableValuedAlias
        if self.backend == "postgresql":
            names = sa.bindparam("names", type_=sa.ARRAY(sa.Text))
            requested = sa.func.unnest(names).table_valued("name").render_derived("requested")
            name = requested.c.name
        else:
            names = sa.bindparam("names", type_=sa.Text)
            requested = sa.func.json_each(names).table_valued("value").alias("requested")
            name = requested.c.value

        def newest(state: EpochState, *, bounded: bool = False) -> sa.Select[Any]:
            x = table_epochs_table.alias("x")
            conditions = [x.c.table_name == name, x.c.state == state.value]
            if bounded:
                conditions.append(x.c.epoch <= sa.bindparam("at_or_before", type_=sa.BigInteger))
            return (
                sa.select(sa.func.max(x.c.epoch).label("epoch"))
                .where(*conditions)
                .correlate(requested)
            )

        # "Any state but ROLLED_BACK": the largest of one descent per such state.
        greatest = sa.func.greatest if self.backend == "postgresql" else sa.func.max
        processed = sa.select(
            greatest(
                *(
                    sa.func.coalesce(newest(state).scalar_subquery(), 0)
                    for state in EpochState
                    if state is not EpochState.ROLLED_BACK
                )
            ).label("epoch")
        )
        v = validations_table.alias("v")
        validated = (
            sa.select(sa.func.max(v.c.epoch).label("epoch"))
            .where(v.c.table_name == name)
            .correlate(requested)
        )

        def fetch(target: sa.Table, epoch: sa.Select[Any]) -> sa.Select[Any]:
            if self.backend == "postgresql":
                # LATERAL runs the descents once per name inside the join.
                found = epoch.lateral("newest")
                return (
                    sa.select(target)
                    .select_from(requested)
                    .join(found, sa.true())
                    .join(
                        target,
                        sa.and_(target.c.table_name == name, target.c.epoch == found.c.epoch),
                    )
                )
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

        return {
            "written": fetch(table_epochs_table, newest(EpochState.WRITTEN)),
            "written_at_or_before": fetch(
                table_epochs_table, newest(EpochState.WRITTEN, bounded=True)
            ),
            "processed": fetch(table_epochs_table, processed),
            "validation": fetch(validations_table, validated),
        }

    def _latest_rows(
        self,
        conn: sa.Connection,
        query: LatestQuery,
        tables: Iterable[str],
        *,
        at_or_before: int | None = None,
    ) -> Sequence[sa.Row[Any]]:
        names = list(dict.fromkeys(tables))
        if not names:
            return []
        params: dict[str, Any] = {
            "names": names if self.backend == "postgresql" else json.dumps(names)
        }
        if at_or_before is not None:
            params["at_or_before"] = at_or_before
        return conn.execute(self._latest_statements[query], params).all()

    def get_commit(self, epoch: int) -> CommitManifest | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(commits_table).where(commits_table.c.epoch == epoch)
            ).first()
        return None if row is None else self._commit(row)

    def latest_commit(self, *, pipeline: str | None = None) -> CommitManifest | None:
        c = commits_table
        query = sa.select(c).order_by(c.c.epoch.desc()).limit(1)
        if pipeline is not None:
            query = query.where(c.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._commit(row)

    @staticmethod
    def _commit(row: Any) -> CommitManifest:
        return CommitManifest(
            epoch=row.epoch,
            versions=json.loads(row.versions),
            barrier_ts=row.barrier_ts,
            committed_at=row.committed_at,
            pipeline=row.pipeline,
        )

    def max_attempt(self, tables: Iterable[str], epoch: int) -> int:
        names = list(dict.fromkeys(tables))
        if not names:
            return 0
        te, h = table_epochs_table, epoch_history_table
        with self._read(snapshot=True) as conn:
            current = conn.execute(
                sa.select(sa.func.max(te.c.attempt)).where(
                    te.c.table_name.in_(names), te.c.epoch == epoch
                )
            ).scalar_one_or_none()
            history = conn.execute(
                sa.select(sa.func.max(h.c.attempt)).where(
                    h.c.table_name.in_(names), h.c.epoch == epoch
                )
            ).scalar_one_or_none()
        return max(current or 0, history or 0)

    # -- leases --------------------------------------------------------------------------

    @staticmethod
    def _ttl(job: str, ttl_seconds: float) -> timedelta:
        if not ttl_seconds > 0:
            raise LeaseError(
                f"lease of job {job!r}: ttl_seconds must be positive, not {ttl_seconds}"
            )
        return timedelta(seconds=ttl_seconds)

    @staticmethod
    def _lease(row: Any) -> Lease:
        return Lease(
            job=row.job,
            owner=row.owner,
            generation=row.generation,
            expires_at=row.expires_at,
            acquired_at=row.acquired_at,
        )

    def _leasable_job(self, conn: sa.Connection, job: str) -> None:
        row = self._job_row(conn, job)
        if row.retired_at is not None:
            raise RetiredError(kind="job", name=job, retired_at=row.retired_at)

    @staticmethod
    def _lease_row(conn: sa.Connection, job: str) -> Any:
        return conn.execute(sa.select(leases_table).where(leases_table.c.job == job)).first()

    def acquire_lease(self, job: str, owner: str, *, ttl_seconds: float) -> Lease:
        ttl = self._ttl(job, ttl_seconds)
        with self._write() as conn:
            self._leasable_job(conn, job)
            now = self._now(conn)
            row = self._lease_row(conn, job)
            if row is None:
                generation, acquired_at = 1, now
            elif row.owner == owner:
                generation, acquired_at = row.generation, row.acquired_at
            elif row.expires_at <= now:
                # Taking over bumps the generation: the old owner can no longer seal anything.
                generation, acquired_at = row.generation + 1, now
            else:
                raise LeaseHeldError(
                    job=job, owner=row.owner, acquired_at=row.acquired_at, expires_at=row.expires_at
                )
            return self._put_lease(
                conn,
                Lease(job, owner, generation, expires_at=now + ttl, acquired_at=acquired_at),
                exists=row is not None,
            )

    @staticmethod
    def _put_lease(conn: sa.Connection, lease: Lease, *, exists: bool) -> Lease:
        values = dict(
            owner=lease.owner,
            generation=lease.generation,
            expires_at=lease.expires_at,
            acquired_at=lease.acquired_at,
        )
        if exists:
            conn.execute(
                leases_table.update().where(leases_table.c.job == lease.job).values(**values)
            )
        else:
            conn.execute(leases_table.insert().values(job=lease.job, **values))
        return lease

    def take_over_lease(
        self,
        job: str,
        owner: str,
        *,
        expected_owner: str,
        expected_generation: int,
        ttl_seconds: float,
    ) -> Lease:
        ttl = self._ttl(job, ttl_seconds)
        with self._write() as conn:
            self._leasable_job(conn, job)
            now = self._now(conn)
            row = self._lease_row(conn, job)
            if row is None or (row.owner, row.generation) != (expected_owner, expected_generation):
                if row is not None and row.expires_at > now:
                    raise LeaseHeldError(
                        job=job,
                        owner=row.owner,
                        acquired_at=row.acquired_at,
                        expires_at=row.expires_at,
                    )
                raise StaleLeaseError(
                    job=job,
                    generation=expected_generation,
                    current_generation=None if row is None else row.generation,
                )
            return self._put_lease(
                conn,
                Lease(job, owner, row.generation + 1, expires_at=now + ttl, acquired_at=now),
                exists=True,
            )

    def renew_lease(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        ttl = self._ttl(lease.job, ttl_seconds)
        with self._write() as conn:
            row = self._lease_row(conn, lease.job)
            if row is None or row.generation != lease.generation or row.owner != lease.owner:
                raise StaleLeaseError(
                    job=lease.job,
                    generation=lease.generation,
                    current_generation=None if row is None else row.generation,
                )
            renewed = Lease(
                job=lease.job,
                owner=lease.owner,
                generation=lease.generation,
                expires_at=self._now(conn) + ttl,
                acquired_at=row.acquired_at,
            )
            conn.execute(
                leases_table.update()
                .where(leases_table.c.job == lease.job)
                .values(expires_at=renewed.expires_at)
            )
            return renewed

    def release_lease(self, lease: Lease) -> None:
        # The row stays, so the generation never restarts: a later owner gets a higher one.
        with self._write() as conn:
            conn.execute(
                leases_table.update()
                .where(
                    leases_table.c.job == lease.job,
                    leases_table.c.generation == lease.generation,
                    leases_table.c.owner == lease.owner,
                )
                .values(expires_at=self._now(conn))
            )

    def get_lease(self, job: str) -> Lease | None:
        with self._read() as conn:
            row = self._lease_row(conn, job)
        return None if row is None else self._lease(row)

    # -- data quality --------------------------------------------------------------------

    def record_validation(self, record: ValidationRecord, *, job: str, generation: int) -> None:
        v = validations_table
        with self._write() as conn:
            table_row = self._table_row(conn, record.table, job=job)
            self._check_lease(conn, job, generation)
            if table_row.writer_job != job:
                raise WriterMismatchError(table=record.table, job=job, writer=table_row.writer_job)
            self._check_epoch_pipeline(
                self._epoch_row(conn, record.epoch), table_row.pipeline, table=record.table
            )
            conn.execute(
                v.delete().where(v.c.table_name == record.table, v.c.epoch == record.epoch)
            )
            conn.execute(
                v.insert().values(
                    table_name=record.table,
                    epoch=record.epoch,
                    success=record.success,
                    policy=record.policy,
                    results=_json(record.results),
                    recorded_at=self._now(conn),
                )
            )

    @staticmethod
    def _validation(row: Any) -> ValidationRecord:
        return ValidationRecord(
            table=row.table_name,
            epoch=row.epoch,
            success=row.success,
            policy=row.policy,
            results=json.loads(row.results),
            recorded_at=row.recorded_at,
        )

    def validations(self, table: str, *, epoch: int | None = None) -> list[ValidationRecord]:
        v = validations_table
        query = sa.select(v).where(v.c.table_name == table)
        if epoch is not None:
            query = query.where(v.c.epoch == epoch)
        with self._read() as conn:
            return [self._validation(row) for row in conn.execute(query.order_by(v.c.epoch))]

    # -- failures and resolutions --------------------------------------------------------

    @staticmethod
    def _one_line(message: str) -> str:
        line = " / ".join(part.strip() for part in str(message).splitlines() if part.strip())
        if len(line) > FAILURE_MESSAGE_MAX_CHARS:
            line = line[: FAILURE_MESSAGE_MAX_CHARS - 1] + "…"
        return line

    def record_failure(self, failure: JobFailureRecord) -> JobFailureRecord:
        f = job_failures_table
        with self._write() as conn:
            job_row = self._job_row(conn, failure.job)
            if failure.pipeline is not None and failure.pipeline != job_row.pipeline:
                raise PipelineMismatchError(
                    job=failure.job,
                    table="(failure record)",
                    job_pipeline=job_row.pipeline,
                    table_pipeline=failure.pipeline,
                    role="failure",
                )
            if failure.epoch is not None:
                self._epoch_row(conn, failure.epoch)
            values = dict(
                job=failure.job,
                pipeline=job_row.pipeline,
                epoch=failure.epoch,
                attempt=failure.attempt,
                error_class=failure.error_class[:256],
                message=self._one_line(failure.message),
                owner=failure.owner,
                generation=failure.generation,
                failed_at=self._now(conn),
            )
            new_id = conn.execute(f.insert().values(**values).returning(f.c.id)).scalar_one()
            return JobFailureRecord(id=new_id, **values)

    @staticmethod
    def _failure(row: Any) -> JobFailureRecord:
        return JobFailureRecord(
            job=row.job,
            error_class=row.error_class,
            message=row.message,
            owner=row.owner,
            epoch=row.epoch,
            attempt=row.attempt,
            generation=row.generation,
            pipeline=row.pipeline,
            failed_at=row.failed_at,
            id=row.id,
        )

    def failures(
        self, *, job: str | None = None, epoch: int | None = None, limit: int | None = None
    ) -> list[JobFailureRecord]:
        f = job_failures_table
        query = sa.select(f).order_by(f.c.id.desc()).limit(limit)
        if job is not None:
            query = query.where(f.c.job == job)
        if epoch is not None:
            query = query.where(f.c.epoch == epoch)
        with self._read() as conn:
            return [self._failure(row) for row in conn.execute(query)]

    @staticmethod
    def _last_failures_query() -> sa.Select[Any]:
        # One index descent of ix_job_failures_job per job, then rows by primary key.
        f, inner = job_failures_table, job_failures_table.alias("f2")
        newest = (
            sa.select(sa.func.max(inner.c.id))
            .where(inner.c.job == jobs_table.c.name)
            .scalar_subquery()
        )
        return sa.select(f).where(f.c.id.in_(sa.select(newest).select_from(jobs_table)))

    def last_failures(self) -> dict[str, JobFailureRecord]:
        with self._read() as conn:
            return {
                row.job: self._failure(row) for row in conn.execute(self._last_failures_query())
            }

    def record_resolution(
        self,
        table: str,
        epoch: int,
        *,
        action: ResolutionAction | str,
        actor: str,
        reason: str,
    ) -> Resolution:
        try:
            action = ResolutionAction(action)
        except ValueError:
            raise CatalogError(
                f"resolution of table {table!r} epoch {epoch}: unknown action {action!r}; "
                f"use one of {', '.join(_ACTIONS)}"
            ) from None
        with self._write() as conn:
            table_row = self._table_row(conn, table)
            self._check_epoch_pipeline(
                self._epoch_row(conn, epoch), table_row.pipeline, table=table
            )
            resolution = Resolution(
                table=table,
                epoch=epoch,
                action=action,
                actor=actor,
                reason=reason,
                at=self._now(conn),
            )
            conn.execute(
                resolutions_table.insert().values(
                    table_name=table,
                    epoch=epoch,
                    action=action.value,
                    actor=actor,
                    reason=reason,
                    recorded_at=resolution.at,
                )
            )
            return resolution

    def resolutions(self, table: str, *, epoch: int | None = None) -> list[Resolution]:
        r = resolutions_table
        query = sa.select(r).where(r.c.table_name == table)
        if epoch is not None:
            query = query.where(r.c.epoch == epoch)
        with self._read() as conn:
            return [
                Resolution(
                    table=row.table_name,
                    epoch=row.epoch,
                    action=ResolutionAction(row.action),
                    actor=row.actor,
                    reason=row.reason,
                    at=row.recorded_at,
                )
                for row in conn.execute(query.order_by(r.c.id))
            ]

    # -- revisions (etl recompute) -------------------------------------------------------

    @staticmethod
    def _revision(row: Any) -> Revision:
        return Revision(
            id=row.id,
            pipeline=row.pipeline,
            tables=tuple(json.loads(row.tables)),
            from_epoch=row.from_epoch,
            reason=row.reason,
            actor=row.actor,
            owner=row.owner,
            state=RevisionState(row.state),
            started_at=row.started_at,
            finished_at=row.finished_at,
            through_epoch=row.through_epoch,
            note=row.note,
        )

    def _revision_row(self, conn: sa.Connection, revision: int) -> Any:
        row = conn.execute(
            sa.select(revisions_table).where(revisions_table.c.id == revision)
        ).first()
        if row is None:
            raise UnknownRevisionError(revision)
        return row

    def begin_revision(
        self,
        *,
        pipeline: str,
        tables: Sequence[str],
        from_epoch: int,
        reason: str,
        actor: str,
        owner: str,
    ) -> Revision:
        r = revisions_table
        with self._write() as conn:
            self._pipeline_row(conn, pipeline)
            for table in tables:
                self._table_row(conn, table)
            values = dict(
                pipeline=pipeline,
                tables=_json(list(tables)),
                from_epoch=from_epoch,
                reason=reason,
                actor=actor,
                owner=owner,
                state=RevisionState.BUILDING.value,
                started_at=self._now(conn),
            )
            new_id = conn.execute(r.insert().values(**values).returning(r.c.id)).scalar_one()
            return self._revision(self._revision_row(conn, new_id))

    def _finish_revision(
        self, conn: sa.Connection, row: Any, state: RevisionState, **values: Any
    ) -> Revision:
        if row.state != RevisionState.BUILDING.value:
            raise RevisionStateError(revision=row.id, state=row.state, requested=state.value)
        conn.execute(
            revisions_table.update()
            .where(revisions_table.c.id == row.id)
            .values(state=state.value, finished_at=self._now(conn), **values)
        )
        return self._revision(self._revision_row(conn, row.id))

    def switch_revision(
        self,
        revision: int,
        *,
        generations: Mapping[str, int],
        seals: Sequence[SealRequest],
        schemas: Mapping[str, str] | None = None,
    ) -> Revision:
        te, e = table_epochs_table, epochs_table
        with self._write() as conn:
            row = self._revision_row(conn, revision)
            if row.state != RevisionState.BUILDING.value:
                raise RevisionStateError(
                    revision=revision, state=row.state, requested=RevisionState.SWITCHED.value
                )
            for job, generation in generations.items():
                self._check_lease(conn, job, generation)
            now = self._now(conn)
            epochs = list(
                conn.execute(
                    sa.select(e.c.id)
                    .where(e.c.pipeline == row.pipeline, e.c.id >= row.from_epoch)
                    .order_by(e.c.id)
                ).scalars()
            )
            through = row.from_epoch
            for table in json.loads(row.tables):
                requests = sorted((s for s in seals if s.table == table), key=lambda s: s.epoch)
                if not requests:
                    continue
                table_row = self._table_row(conn, table)
                job = table_row.writer_job
                last = requests[-1].epoch
                through = max(through, last)
                replaced = (
                    te.c.table_name == table,
                    te.c.epoch >= row.from_epoch,
                    te.c.epoch <= last,
                )
                old = conn.execute(sa.select(te).where(*replaced)).all()
                if old:
                    conn.execute(
                        revision_states_table.insert(),
                        [{"revision": revision, **old_row._asdict()} for old_row in old],
                    )
                    conn.execute(te.delete().where(*replaced))
                values = []
                for request in requests:
                    first = request.first_epoch or request.epoch
                    common = {
                        "table_name": table,
                        "job": job,
                        "attempt": request.attempt,
                        "generation": generations.get(job) if job else None,
                        "reason": f"revision {revision}",
                        "updated_at": now,
                    }
                    values += [
                        {
                            **common,
                            "epoch": epoch,
                            "state": EpochState.COALESCED.value,
                            "delta_version": None,
                            "coalesced_into": request.epoch,
                            "rows": None,
                        }
                        for epoch in epochs
                        if first <= epoch < request.epoch
                    ]
                    values.append(
                        {
                            **common,
                            "epoch": request.epoch,
                            "state": EpochState.WRITTEN.value,
                            "delta_version": request.delta_version,
                            "coalesced_into": None,
                            "rows": request.rows,
                        }
                    )
                conn.execute(te.insert(), values)
                conn.execute(
                    epoch_history_table.insert(), [self._history_values(v) for v in values]
                )
            for table, schema_json in (schemas or {}).items():
                self._set_schema(conn, table, schema_json)
            # The manifests of the recomputed epochs name the replaced versions: record
            # them again from the new states (a now COALESCED epoch has none).
            conn.execute(
                commits_table.delete().where(
                    commits_table.c.pipeline == row.pipeline,
                    commits_table.c.epoch >= row.from_epoch,
                    commits_table.c.epoch <= through,
                )
            )
            for epoch in epochs:
                if epoch <= through:
                    self._record_commit(conn, now, epoch)
            return self._finish_revision(conn, row, RevisionState.SWITCHED, through_epoch=through)

    def discard_revision(self, revision: int, *, note: str) -> Revision:
        with self._write() as conn:
            row = self._revision_row(conn, revision)
            return self._finish_revision(conn, row, RevisionState.DISCARDED, note=note)

    def revisions(self, *, pipeline: str | None = None, table: str | None = None) -> list[Revision]:
        r = revisions_table
        query = sa.select(r).order_by(r.c.id)
        if pipeline is not None:
            query = query.where(r.c.pipeline == pipeline)
        with self._read() as conn:
            found = [self._revision(row) for row in conn.execute(query)]
        return [rev for rev in found if table is None or table in rev.tables]

    def superseded_states(self, revision: int) -> list[TableEpoch]:
        rs = revision_states_table
        columns = [c for c in rs.c if c.name != "revision"]
        with self._read() as conn:
            self._revision_row(conn, revision)
            rows = conn.execute(
                sa.select(*columns)
                .where(rs.c.revision == revision)
                .order_by(rs.c.table_name, rs.c.epoch)
            )
            return [self._table_epoch(row) for row in rows]

    # -- retention -----------------------------------------------------------------------

    @staticmethod
    def _expiry_row(conn: sa.Connection, epoch: int) -> Any:
        x = epoch_expiries_table
        return conn.execute(sa.select(x).where(x.c.epoch == epoch)).first()

    def _check_not_expired(self, conn: sa.Connection, epoch: int) -> None:
        self._epoch_row(conn, epoch)
        expired = self._expiry_row(conn, epoch)
        if expired is not None:
            raise EpochExpiredError(epoch=epoch, rule=expired.rule, expired_at=expired.expired_at)

    @staticmethod
    def _versions(versions: Mapping[str, int]) -> dict[str, int]:
        return {str(table): int(version) for table, version in versions.items()}

    @staticmethod
    def _pin(row: Any) -> Pin:
        return Pin(
            id=row.id,
            pipeline=row.pipeline,
            epoch=row.epoch,
            versions=json.loads(row.versions),
            holder=row.holder,
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin:
        import uuid

        ttl = self._pin_ttl(ttl_seconds)
        encoded = self._versions(versions)
        with self._write() as conn:
            if epoch is not None:
                self._check_not_expired(conn, epoch)
            now = self._now(conn)
            pin = Pin(
                id=uuid.uuid4().hex,
                pipeline=pipeline,
                epoch=epoch,
                versions=encoded,
                holder=holder,
                created_at=now,
                expires_at=now + ttl,
            )
            conn.execute(
                pins_table.insert().values(
                    id=pin.id,
                    pipeline=pipeline,
                    epoch=epoch,
                    versions=_json(encoded),
                    holder=holder,
                    created_at=now,
                    expires_at=pin.expires_at,
                )
            )
            return pin

    @staticmethod
    def _pin_ttl(ttl_seconds: float) -> timedelta:
        if not ttl_seconds > 0:
            raise CatalogError(f"a pin's ttl_seconds must be positive, not {ttl_seconds}")
        return timedelta(seconds=ttl_seconds)

    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin:
        ttl = self._pin_ttl(ttl_seconds)
        with self._write() as conn:
            row = conn.execute(sa.select(pins_table).where(pins_table.c.id == pin.id)).first()
            now = self._now(conn)
            if row is None or row.expires_at <= now:
                raise PinExpiredError(
                    pin_id=pin.id,
                    holder=pin.holder,
                    expired_at=None if row is None else row.expires_at,
                )
            conn.execute(
                pins_table.update().where(pins_table.c.id == pin.id).values(expires_at=now + ttl)
            )
            return dataclasses.replace(self._pin(row), expires_at=now + ttl)

    def release_pin(self, pin: Pin) -> None:
        with self._write() as conn:
            conn.execute(pins_table.delete().where(pins_table.c.id == pin.id))

    def active_pins(self, *, now: datetime | None = None) -> list[Pin]:
        p = pins_table
        with self._read() as conn:
            at = self._now(conn) if now is None else as_utc(now)
            rows = conn.execute(sa.select(p).where(p.c.expires_at > at).order_by(p.c.created_at))
            return [self._pin(row) for row in rows]

    def purge_expired_pins(self) -> int:
        with self._write() as conn:
            return conn.execute(
                pins_table.delete().where(pins_table.c.expires_at <= self._now(conn))
            ).rowcount

    @staticmethod
    def _tag(row: Any) -> Tag:
        return Tag(
            name=row.name,
            epoch=row.epoch,
            versions=json.loads(row.versions),
            pipeline=row.pipeline,
            created_at=row.created_at,
        )

    def create_tag(
        self, name: str, *, epoch: int, versions: Mapping[str, int], pipeline: str | None
    ) -> Tag:
        validate_tag_name(name)
        encoded = self._versions(versions)
        with self._write() as conn:
            existing = conn.execute(sa.select(tags_table).where(tags_table.c.name == name)).first()
            if existing is not None:
                raise TagExistsError(name=name, epoch=existing.epoch)
            self._check_not_expired(conn, epoch)
            tag = Tag(
                name=name,
                epoch=epoch,
                versions=encoded,
                pipeline=pipeline,
                created_at=self._now(conn),
            )
            conn.execute(
                tags_table.insert().values(
                    name=name,
                    epoch=epoch,
                    pipeline=pipeline,
                    versions=_json(encoded),
                    created_at=tag.created_at,
                )
            )
            return tag

    def get_tag(self, name: str) -> Tag:
        with self._read() as conn:
            row = conn.execute(sa.select(tags_table).where(tags_table.c.name == name)).first()
        if row is None:
            raise UnknownTagError(name)
        return self._tag(row)

    def list_tags(self) -> list[Tag]:
        with self._read() as conn:
            return [
                self._tag(row)
                for row in conn.execute(sa.select(tags_table).order_by(tags_table.c.name))
            ]

    def delete_tag(self, name: str) -> None:
        with self._write() as conn:
            deleted = conn.execute(tags_table.delete().where(tags_table.c.name == name)).rowcount
        if not deleted:
            raise UnknownTagError(name)

    def expire_epochs(
        self, epochs: Sequence[int], *, rule: str, pipeline: str | None = None
    ) -> list[int]:
        wanted = sorted(set(epochs))
        if not wanted:
            return []
        e, x, p, t = epochs_table, epoch_expiries_table, pins_table, tags_table
        with self._write() as conn:
            now = self._now(conn)
            found = dict(
                conn.execute(sa.select(e.c.id, e.c.pipeline).where(e.c.id.in_(wanted))).all()
            )
            for epoch in wanted:
                if epoch not in found:
                    raise UnknownEpochError(epoch)
                if pipeline is not None and found[epoch] != pipeline:
                    raise ForeignEpochError(
                        epoch=epoch, epoch_pipeline=found[epoch], pipeline=pipeline
                    )
            # Under the write lock: a pin or tag made before this point protects its epoch;
            # one made after it sees the expiry and fails with EpochExpiredError.
            kept = set(
                conn.execute(
                    sa.select(p.c.epoch).where(p.c.epoch.in_(wanted), p.c.expires_at > now)
                ).scalars()
            )
            kept |= set(conn.execute(sa.select(t.c.epoch).where(t.c.epoch.in_(wanted))).scalars())
            kept |= set(conn.execute(sa.select(x.c.epoch).where(x.c.epoch.in_(wanted))).scalars())
            expired = [epoch for epoch in wanted if epoch not in kept]
            if expired:
                conn.execute(
                    x.insert(), [{"epoch": ep, "rule": rule, "expired_at": now} for ep in expired]
                )
            return expired

    def _expiry_query(self) -> sa.Select[Any]:
        x, e = epoch_expiries_table, epochs_table
        return sa.select(x.c.epoch, e.c.pipeline, x.c.rule, x.c.expired_at).join(
            e, e.c.id == x.c.epoch
        )

    def expiry_of(self, epoch: int) -> EpochExpiry | None:
        with self._read() as conn:
            row = conn.execute(
                self._expiry_query().where(epoch_expiries_table.c.epoch == epoch)
            ).first()
        return None if row is None else EpochExpiry(*row)

    def expired_epochs(self, *, pipeline: str | None = None) -> list[EpochExpiry]:
        query = self._expiry_query().order_by(epoch_expiries_table.c.epoch)
        if pipeline is not None:
            query = query.where(epochs_table.c.pipeline == pipeline)
        with self._read() as conn:
            return [EpochExpiry(*row) for row in conn.execute(query)]

    def set_retention_policy(self, pipeline: str | None, policy_json: str | None) -> None:
        if policy_json is not None:
            try:
                json.loads(policy_json)
            except ValueError as exc:
                raise InvalidRetentionPolicyError(pipeline=pipeline, reason=str(exc)) from None
        m = meta_table
        with self._write() as conn:
            if pipeline is not None:
                self._pipeline_row(conn, pipeline)
                conn.execute(
                    pipelines_table.update()
                    .where(pipelines_table.c.name == pipeline)
                    .values(retention_policy=policy_json)
                )
                return
            conn.execute(m.delete().where(m.c.key == _META_RETENTION_POLICY))
            if policy_json is not None:
                conn.execute(m.insert().values(key=_META_RETENTION_POLICY, value=policy_json))

    def retention_policy(self, pipeline: str | None) -> str | None:
        m, p = meta_table, pipelines_table
        with self._read(snapshot=True) as conn:
            if pipeline is not None:
                row = conn.execute(sa.select(p).where(p.c.name == pipeline)).first()
                if row is None and pipeline != PIPELINE_DEFAULT:
                    raise UnknownPipelineError(pipeline)
                if row is not None and row.retention_policy is not None:
                    return row.retention_policy
            return conn.execute(
                sa.select(m.c.value).where(m.c.key == _META_RETENTION_POLICY)
            ).scalar_one_or_none()

    # -- status --------------------------------------------------------------------------

    def table_status(self) -> list[TableStatus]:
        # A fixed number of statements whatever the history: latest-state lookups are
        # index descents per table, per-pipeline newest rows are descents per pipeline.
        p, e, c = pipelines_table, epochs_table, commits_table
        newest_epoch = (
            sa.select(sa.func.max(e.c.id)).where(e.c.pipeline == p.c.name).scalar_subquery()
        )
        cx = c.alias("cx")
        newest_commit = (
            sa.select(sa.func.max(cx.c.epoch)).where(cx.c.pipeline == p.c.name).scalar_subquery()
        )
        with self._read(snapshot=True) as conn:
            tables = [
                self._table_info(row)
                for row in conn.execute(sa.select(tables_table).order_by(tables_table.c.name))
            ]
            names = [table.name for table in tables]
            processed = {
                row.table_name: self._table_epoch(row)
                for row in self._latest_rows(conn, "processed", names)
            }
            written = {
                row.table_name: self._table_epoch(row)
                for row in self._latest_rows(conn, "written", names)
            }
            checked = {
                row.table_name: self._validation(row)
                for row in self._latest_rows(conn, "validation", names)
            }
            writers = sorted({t.writer_job for t in tables if t.writer_job is not None})
            leases = {
                row.job: self._lease(row)
                for row in conn.execute(
                    sa.select(leases_table).where(leases_table.c.job.in_(writers))
                )
            }
            failed = {
                row.job: self._failure(row) for row in conn.execute(self._last_failures_query())
            }
            pipeline_epochs = {
                row.pipeline: self._epoch(row)
                for row in conn.execute(
                    sa.select(e).where(e.c.id.in_(sa.select(newest_epoch).select_from(p)))
                )
            }
            pipeline_commits = {
                row.pipeline: self._commit(row)
                for row in conn.execute(
                    sa.select(c).where(c.c.epoch.in_(sa.select(newest_commit).select_from(p)))
                )
            }
            written_ids = sorted({state.epoch for state in written.values()})
            barrier = dict(
                conn.execute(sa.select(e.c.id, e.c.barrier_ts).where(e.c.id.in_(written_ids))).all()
            )
        statuses = []
        for table in tables:
            latest_written = written.get(table.name)
            writer = table.writer_job
            statuses.append(
                TableStatus(
                    table=table.name,
                    kind=table.kind,
                    writer_job=writer,
                    latest_processed=processed.get(table.name),
                    latest_written=latest_written,
                    latest_validation=checked.get(table.name),
                    pipeline=table.pipeline,
                    retired=table.retired_at is not None,
                    writer_lease=None if writer is None else leases.get(writer),
                    writer_last_failure=None if writer is None else failed.get(writer),
                    pipeline_latest_epoch=pipeline_epochs.get(table.pipeline),
                    latest_written_barrier_ts=None
                    if latest_written is None
                    else barrier.get(latest_written.epoch),
                    pipeline_latest_commit=pipeline_commits.get(table.pipeline),
                )
            )
        return statuses
