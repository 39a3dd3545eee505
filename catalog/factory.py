"""Open the catalog a URL (or a warehouse directory) names."""

from __future__ import annotations

import os

from catalog.base import Catalog
from catalog.sql import SqlCatalog
from catalog.urls import catalog_url


def load_catalog(
    url: str | None = None,
    *,
    warehouse: str | os.PathLike[str] | None = None,
    create: bool = True,
) -> Catalog:
    """Open (creating it if needed, unless ``create`` is False) the catalog at ``url``.

    - None: the SQLite file ``<warehouse>/_catalog.sqlite`` (directories are created);
    - ``sqlite://`` or ``memory://``: SQLite in memory, private to this process (one
      connection, shared safely by its threads);
    - ``sqlite:///PATH``: a SQLite file;
    - ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE`` (or ``postgres://``,
      ``postgresql+psycopg://``): a PostgreSQL database shared by many processes.

    With ``create=False`` (status and query commands) a missing catalog -- no SQLite
    file, or no catalog tables in the PostgreSQL schema -- raises CatalogNotFoundError
    and nothing is created: no directory, no file, no table. A SQLite file this process
    cannot write (file or directory permissions) is opened read-only: reads work, writes
    raise CatalogReadOnlyError.

    Raises CatalogUrlError for an unsupported URL, CatalogUnavailableError (never
    showing the password) when the database cannot be reached, and SchemaVersionError
    when it has another schema version (see :meth:`SqlCatalog.open_for_upgrade`).
    """
    return SqlCatalog(catalog_url(url, warehouse=warehouse), create=create)
