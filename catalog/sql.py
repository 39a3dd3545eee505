"""The SQL catalog: :class:`catalog.base.Catalog` for SQLite and PostgreSQL.

:class:`SqlCatalog` is the catalog's SQL stores (one per domain, ``catalog/<domain>/sql.py``)
over one :class:`~catalog.connection.Database`; it adds opening, creating and upgrading
the schema. The connection policy is in :mod:`catalog.connection`, the tables in
:mod:`catalog.schema`, the migrations in :mod:`catalog.migrations`, and what differs
between SQLite and PostgreSQL in :mod:`catalog.dialect`.
"""

from __future__ import annotations

import os

import sqlalchemy as sa

from catalog.base import META_SCHEMA_VERSION, SCHEMA_VERSION, Catalog
from catalog.connection import Database
from catalog.dialect import Backend
from catalog.epochs.sql import SqlEpochStore
from catalog.errors import CatalogNotFoundError, SchemaVersionError
from catalog.leases.sql import SqlLeaseStore
from catalog.migrations import migrate, stored_version
from catalog.records.sql import SqlRecordStore
from catalog.registry.sql import SqlRegistryStore
from catalog.retention.sql import SqlRetentionStore
from catalog.revisions.sql import SqlRevisionStore
from catalog.schema import meta_table, metadata
from catalog.states.sql import SqlStateStore
from catalog.store import latest_statements
from catalog.urls import CATALOG_FILE_NAME, catalog_url
from consistency.records import PIPELINE_DEFAULT

__all__ = ["CATALOG_FILE_NAME", "SqlCatalog"]


class SqlCatalog(
    SqlRegistryStore,
    SqlEpochStore,
    SqlStateStore,
    SqlLeaseStore,
    SqlRecordStore,
    SqlRetentionStore,
    SqlRevisionStore,
    Catalog,
):
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
        self._db = Database(url, create=create, read_only=read_only)
        self.url = self._db.url
        self.read_only = self._db.read_only
        self._latest_statements = latest_statements(self._db.dialect)
        try:
            self._open_schema(check_schema, create=create)
        except BaseException:
            self.close()
            raise

    @property
    def backend(self) -> Backend:
        return self._db.backend

    @property
    def _engine(self) -> sa.Engine:
        return self._db.engine

    def _open_schema(self, check: bool, *, create: bool) -> None:
        with self._read() as conn:
            exists = sa.inspect(conn).has_table(meta_table.name)
            found = stored_version(conn) if exists else None
            if found is None and not create:
                raise CatalogNotFoundError(backend=self.backend, where=self._db.where(conn))
        if found is None:
            with self._write() as conn:
                if sa.inspect(conn).has_table(meta_table.name):
                    found = stored_version(conn)
                else:
                    metadata.create_all(conn)
                    conn.execute(
                        meta_table.insert().values(
                            key=META_SCHEMA_VERSION, value=str(SCHEMA_VERSION)
                        )
                    )
                    self._pipeline_row(conn, PIPELINE_DEFAULT, create=True)
                    found = SCHEMA_VERSION
        if check and found != SCHEMA_VERSION:
            raise SchemaVersionError(found=found, expected=SCHEMA_VERSION)

    def upgrade(self) -> int:
        with self._write() as conn:
            return migrate(conn)

    def close(self) -> None:
        self._db.close()

    @classmethod
    def open_for_upgrade(
        cls, url: str | None = None, *, warehouse: str | os.PathLike[str] | None = None
    ) -> SqlCatalog:
        """Open an existing catalog whatever its schema version, only to call :meth:`upgrade`
        (CatalogNotFoundError where there is none: nothing is created)."""
        return cls(catalog_url(url, warehouse=warehouse), check_schema=False, create=False)

    def __repr__(self) -> str:
        return f"SqlCatalog({self.url!r})"
