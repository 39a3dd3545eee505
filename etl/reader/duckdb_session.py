"""The process's DuckDB database: one in-memory database with the bundled Delta extension
loaded once (``duckdb-ext-delta``; ``duckdb-ext-httpfs`` for object stores), connections
to it, and a cut as a DuckDB script any DuckDB process can run offline."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etl.errors import UsageError
from etl.storage import duckdb_secret, is_local

if TYPE_CHECKING:
    import duckdb


def table_uri(location: str) -> str:
    """A table's location as the URI DuckDB (and any Delta reader) attaches."""
    if "://" in location:
        return location
    return Path(location).resolve().as_uri()


def quote_identifier(name: str) -> str:
    """``name`` as a quoted DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def _extension_path(package: str, file_name: str, what: str) -> str:
    """Where a ``duckdb-ext-*`` package installed a DuckDB extension."""
    import importlib.metadata

    try:
        files = importlib.metadata.files(package) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    found = [f for f in files if f.name == file_name]
    if not found:
        raise UsageError(
            f"DuckDB's {what} is missing: pip install {package} (or use --engine spark)"
        )
    return str(found[0].locate())


@functools.cache
def delta_extension_path() -> str:
    """Where the ``duckdb-ext-delta`` package installed DuckDB's Delta extension."""
    return _extension_path("duckdb-ext-delta", "delta.duckdb_extension", "Delta extension")


@functools.cache
def httpfs_extension_path() -> str:
    """Where the ``duckdb-ext-httpfs`` package installed DuckDB's object-store extension."""
    return _extension_path("duckdb-ext-httpfs", "httpfs.duckdb_extension", "httpfs extension")


def duckdb_script(cut: Mapping[str, Any]) -> str:
    """A cut (:meth:`SnapshotReader.describe`) as a DuckDB SQL script that any DuckDB
    process can run offline: it loads the Delta extension this installation bundles
    (``duckdb-ext-delta``) and makes one view per table at the cut's version (a table
    with nothing visible: an empty view of its columns)."""
    lines = [
        f"-- Delta Barrier cut: level={cut['level']} epoch={cut['epoch']} "
        f"barrier_ts={cut['barrier_ts']}",
        f"LOAD '{sql_text(delta_extension_path())}';",
    ]
    remote = [t["location"] for t in cut["tables"] if not is_local(t["location"])]
    if remote:
        lines += [
            f"LOAD '{sql_text(httpfs_extension_path())}';",
            "-- credentials: add KEY_ID and SECRET to this secret, or create one of your own",
            f"{duckdb_secret(remote[0], with_credentials=False)};",
        ]
    for table in cut["tables"]:
        attached = quote_identifier(f"__delta_{table['table']}")
        lines.append(f"ATTACH '{sql_text(table['uri'])}' AS {attached} (TYPE delta);")
        read = (
            f"SELECT * FROM {attached} WHERE false"
            if table["version"] is None
            else f"SELECT * FROM {attached} AT (VERSION => {int(table['version'])})"
        )
        lines.append(f"CREATE OR REPLACE VIEW {quote_identifier(table['table'])} AS {read};")
    return "\n".join(lines) + "\n"


def sql_text(text: str) -> str:
    """``text`` escaped for a DuckDB string literal (without its quotes)."""
    return text.replace("'", "''")


_DUCKDB: duckdb.DuckDBPyConnection | None = None
_DUCKDB_LOCK = threading.Lock()
_ATTACH_IDS = itertools.count(1)


def attach_alias(table: str) -> str:
    """A name to attach ``table``'s Delta table under, unique in the process's database."""
    return f"__delta_{table}_{next(_ATTACH_IDS)}"


def connect() -> duckdb.DuckDBPyConnection:
    """A new connection to the process's one in-memory DuckDB database (opening one and
    loading the Delta extension into it cost more than a whole warm read)."""
    with _DUCKDB_LOCK:
        connection = _database().cursor()
    connection.execute("SET TimeZone = 'UTC'")
    return connection


def open_ahead() -> None:
    """Open the process's DuckDB database before a read needs it (while a query is being
    translated: :func:`etl.reader.translation.translate_ahead`). A failure (the Delta
    extension missing) is left for the read to report, in its turn."""
    with _DUCKDB_LOCK, contextlib.suppress(Exception):
        _database()


def _database() -> duckdb.DuckDBPyConnection:
    """The process's DuckDB database, opened with the Delta extension on first use (under
    ``_DUCKDB_LOCK``)."""
    global _DUCKDB
    if _DUCKDB is None:
        import duckdb

        database = duckdb.connect(config={"allow_unsigned_extensions": "true"})
        path = delta_extension_path().replace("'", "''")
        database.execute(f"LOAD '{path}'")
        _DUCKDB = database
    return _DUCKDB


_HTTPFS_LOADED = False


def load_httpfs() -> None:
    """Load the object-store extension into the process's DuckDB database, once."""
    global _HTTPFS_LOADED
    with _DUCKDB_LOCK:
        if not _HTTPFS_LOADED and _DUCKDB is not None:
            _DUCKDB.execute(f"LOAD '{sql_text(httpfs_extension_path())}'")
            _HTTPFS_LOADED = True


def detach(aliases: Iterable[str]) -> None:
    """Detach the databases a reader attached (an attached database is the database's,
    seen by every connection to it)."""
    if _DUCKDB is None:
        return
    with _DUCKDB_LOCK:
        for alias in aliases:
            with contextlib.suppress(Exception):
                _DUCKDB.execute(f"DETACH {quote_identifier(alias)}")


__all__ = [
    "attach_alias",
    "connect",
    "delta_extension_path",
    "detach",
    "duckdb_script",
    "httpfs_extension_path",
    "load_httpfs",
    "open_ahead",
    "quote_identifier",
    "sql_text",
    "table_uri",
]
