"""Where the catalog lives and how it is connected to: URLs, engines, transactions.

URLs are parsed here (as text in :mod:`catalog.urls`). :class:`Database` holds the
engines and the connection policy: every state change is one write transaction, and
write transactions are serialized across processes -- SQLite takes the database write
lock at ``BEGIN IMMEDIATE`` (WAL mode, so readers are never blocked), PostgreSQL takes a
transaction-scoped advisory lock keyed on the catalog's schema as the first statement
(see :mod:`catalog.dialect`). Reads take no lock; a read of several statements shares
one snapshot. Database errors leave as catalog errors: CatalogUnavailableError,
CatalogReadOnlyError.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from urllib.parse import quote

import sqlalchemy as sa

from catalog.dialect import DIALECTS, Backend, Dialect
from catalog.errors import (
    CatalogReadOnlyError,
    CatalogUnavailableError,
    CatalogUrlError,
    driver_message,
    says_read_only,
)
from catalog.urls import (
    SUPPORTED_URLS,
    mask_url,
    url_password,
)
from catalog.write_gate import write_transaction


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


class Database:
    """The catalog's database: its engines, and transactions that follow the connection
    policy.

    With ``create=False`` a missing SQLite file raises CatalogNotFoundError. A SQLite
    file that this process cannot write (file or directory permissions), or any SQLite
    file with ``read_only=True``, is opened read-only (``mode=ro``): every read works,
    every write raises CatalogReadOnlyError.
    """

    def __init__(self, url: str | sa.URL, *, create: bool, read_only: bool | None):
        backend, sa_url = normalize_url(url)
        self.dialect: Dialect = DIALECTS[backend]
        self.url = sa_url.render_as_string(hide_password=True)
        self.sa_url = sa_url
        try:
            self.read_only = self.dialect.opens_read_only(
                sa_url, requested=read_only, create=create
            )
        except OSError as exc:
            raise self.unavailable(exc) from None
        # One shared connection in memory: operations from several threads take turns.
        in_memory = self.dialect.in_memory(sa_url)
        self._thread_lock = threading.RLock() if in_memory else nullcontext()
        self.engine, self._autocommit_engine = self.dialect.engines(
            sa_url, read_only=self.read_only
        )

    @property
    def backend(self) -> Backend:
        return self.dialect.name

    def unavailable(self, exc: BaseException) -> CatalogUnavailableError:
        """CatalogUnavailableError for a database error ``exc``, its password masked."""
        text = driver_message(exc)
        password = self.sa_url.password
        if password:
            for written in {str(password), quote(str(password), safe="")}:
                text = text.replace(written, "***")
        return CatalogUnavailableError(
            backend=self.backend,
            host=None
            if self.sa_url.host is None
            else f"{self.sa_url.host}:{self.sa_url.port or 5432}",
            database=self.sa_url.database or ":memory:",
            reason=text,
        )

    def _read_only_error(self, exc: BaseException) -> CatalogReadOnlyError | None:
        """CatalogReadOnlyError if ``exc`` says the database is read-only."""
        return CatalogReadOnlyError(url=self.url) if says_read_only(exc) else None

    @contextmanager
    def _connect(self, *, write: bool, snapshot: bool = False) -> Iterator[sa.Connection]:
        if write and self.read_only:
            raise CatalogReadOnlyError(url=self.url)
        with write_transaction() if write else nullcontext(), self._thread_lock:
            try:
                engine = self.engine if write or snapshot else self._autocommit_engine
                conn = engine.connect()
            except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
                raise self.unavailable(exc) from None
            with conn:
                if write:
                    conn.execution_options(catalog_write=True)
                try:
                    transaction = conn.begin()
                except sa.exc.OperationalError as exc:
                    # SQLite: another writer held the lock for longer than the busy timeout,
                    # or the file cannot be written at all.
                    raise (self._read_only_error(exc) or self.unavailable(exc)) from None
                with transaction, self._translate_errors(write):
                    self.dialect.begin(conn, write=write, snapshot=snapshot)
                    yield conn

    @contextmanager
    def _translate_errors(self, write: bool) -> Iterator[None]:
        """The database's operational errors inside a transaction as catalog errors: a
        read-only catalog, or one that is unavailable (a lost connection: PostgreSQL ends
        the transaction of a process that froze inside it; a lock held too long)."""
        try:
            yield
        except sa.exc.OperationalError as exc:
            error = self._read_only_error(exc) if write else None
            raise (error or self.unavailable(exc)) from None
        except sa.exc.DBAPIError as exc:
            # The server ended the session (psycopg reports an idle-in-transaction timeout
            # as an InternalError): the connection is gone, not the statement wrong.
            if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
                raise self.unavailable(exc) from None
            raise

    def write(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction, serialized with every other writer of the catalog."""
        return self._connect(write=True)

    def read(self, *, snapshot: bool = False) -> AbstractContextManager[sa.Connection]:
        """A read; with ``snapshot`` its statements all see the same committed state."""
        return self._connect(write=False, snapshot=snapshot)

    def now(self, conn: sa.Connection) -> datetime:
        """The catalog's clock: the database server's on PostgreSQL (shared by every
        machine), the local clock on SQLite."""
        return self.dialect.now(conn)

    def where(self, conn: sa.Connection) -> str:
        """Where this catalog lives, for messages (never with a password)."""
        return self.dialect.where(conn, self.sa_url)

    def close(self) -> None:
        self.engine.dispose()
        self._autocommit_engine.dispose()
