"""Read queries translated once and kept: what a read needs of its Spark SQL, without
sqlglot when the query was translated before.

A read on DuckDB needs three things of its query: the tables it reads, its text in
DuckDB's dialect and the names Spark gives its output columns. :mod:`etl.reader.query`
finds them with sqlglot, whose import costs a command more CPU than the rest of
``etl sql``. They depend only on the query's text, on the column types of its tables when
it takes an average (Spark's DECIMAL rules), on sqlglot's version and on our translator's
code: so a translation is written to a file of the user's cache directory, and a query run
again is read back from it without importing sqlglot.

The cache is ``$DELTA_BARRIER_CACHE_DIR/queries`` (default
``$XDG_CACHE_HOME/delta-barrier/queries``, else ``~/.cache/delta-barrier/queries``); an
empty ``DELTA_BARRIER_CACHE_DIR`` turns it off. An entry is used only when it was written
by the same translator code and sqlglot version for the same text; anything else (an
unreadable, foreign or damaged file, a cache directory that cannot be written) is a miss,
and the query is translated as if there were no cache. Entries are written atomically,
readable by their owner only, and the oldest are dropped past :data:`MAX_ENTRIES`.
Queries that do not parse are never kept.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from etl.reader.names import OutputNames, spark_column_names

if TYPE_CHECKING:
    from etl.reader.query import ParsedQuery

log = logging.getLogger(__name__)

CACHE_ENV = "DELTA_BARRIER_CACHE_DIR"
"""Where the cache of translations lives (under ``queries``); empty: no cache."""
MAX_ENTRIES = 1000
"""Translations kept; past it the oldest written are removed."""
ENTRY_FORMAT = 1

Schema = Mapping[str, Mapping[str, str]]
"""Per table, column -> Spark SQL type."""


@dataclass(frozen=True)
class TranslatedQuery:
    """A read query (Spark SQL) as a read needs it: the tables it reads and the names of
    its output columns; its DuckDB text from :meth:`for_duckdb`."""

    text: str
    tables: tuple[str, ...]
    """Real tables the query reads, in order of appearance, as written (case kept)."""
    output_names: OutputNames
    averages: bool
    """Whether the DuckDB text depends on the tables' column types."""

    def column_names(self, returned: Sequence[str]) -> list[str]:
        """See :func:`~etl.reader.names.spark_column_names`."""
        return spark_column_names(self.output_names, returned)

    def for_duckdb(self, column_types: Callable[[], Schema]) -> str:
        """The query in DuckDB's dialect, typed by Spark's rules with the tables' column
        types (``column_types`` is asked only for a query that averages)."""
        schema = column_types() if self.averages else {}
        typing_key = _digest(json.dumps(schema, sort_keys=True)) if schema else ""
        kept = _duckdb_texts(_kept_entry(self.text))
        if typing_key in kept:
            return kept[typing_key]
        text = _parsed(self.text).for_duckdb(schema or None)
        _write_entry(self, {**kept, typing_key: text})
        return text


@functools.lru_cache(maxsize=64)
def translate(sql: str) -> TranslatedQuery:
    """The query's translation: kept from an earlier run, made by :func:`translate_ahead`'s
    child, or made with sqlglot (and kept). Raises SqlTablesError for text that is not one
    query (see :func:`etl.reader.query.parse_query`)."""
    _take_ahead(sql)
    cached = _kept_entry(sql)
    if cached is not None:
        try:
            output = cached["output_names"]
            return TranslatedQuery(
                text=sql,
                tables=tuple(str(t) for t in cached["tables"]),
                output_names=None if output is None else tuple(output),
                averages=bool(cached["averages"]),
            )
        except (KeyError, TypeError):
            pass  # a damaged entry: translate again, and replace it
    parsed = _parsed(sql)
    translated = TranslatedQuery(
        text=sql,
        tables=parsed.tables,
        output_names=parsed.output_names,
        averages=parsed.averages,
    )
    _write_entry(translated, {})
    return translated


# -- translating ahead -----------------------------------------------------------------------

_AHEAD: dict[str, tuple[int, int]] = {}
"""Per query text, the child translating it: (process id, the read end of its pipe)."""
_TAKEN: dict[str, dict] = {}
"""Per query text, the entry this process took from a child (kept here too when the cache
is off)."""


def translate_ahead(sql: str) -> None:
    """Start translating ``sql`` in a child process, for a command that opens its catalog
    and DuckDB meanwhile: on a first run, importing sqlglot and translating are the longest
    step, on one core, while the other waits. The next :func:`translate` of ``sql`` takes
    the child's translation; when the child gives none (a query that does not parse, a
    child that failed), :func:`translate` translates as if it had not been started, and a
    query that does not parse is reported as always.

    Done only where it is safe and gains anything: not for a query whose translation is
    kept, and only on Linux by a process running one thread (a fork copies only the thread
    that forks: a lock another thread held would stay locked in the child). For a
    command's process, not a library's: the child is the caller's copy."""
    if (
        sql in _AHEAD
        or sys.platform != "linux"
        or threading.active_count() != 1
        or _kept_entry(sql) is not None
    ):
        return
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:  # no process to spare: translate() does it, as without a child
        log.debug("query not translated ahead: %s", exc)
        os.close(read_end)
        os.close(write_end)
        return
    if pid == 0:  # the child: its translation on the pipe, and nothing else of the parent's
        status = 1
        try:
            os.close(read_end)
            # Not the command's output: whoever reads it waits for the command alone.
            quiet = os.open(os.devnull, os.O_RDWR)
            for stream in (0, 1, 2):
                os.dup2(quiet, stream)
            translated = translate(sql)
            texts = {} if translated.averages else {"": translated.for_duckdb(dict)}
            with os.fdopen(write_end, "w") as out:
                json.dump(_entry(translated, texts), out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    _AHEAD[sql] = (pid, read_end)


def _take_ahead(sql: str) -> None:
    """Wait for the child translating ``sql``, if one was started, and keep what it gave."""
    started = _AHEAD.pop(sql, None)
    if started is None:
        return
    pid, read_end = started
    with os.fdopen(read_end) as pipe:
        given = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return
    try:
        entry = json.loads(given)
    except ValueError:
        return
    if _is_entry_of(entry, sql):
        _TAKEN[sql] = entry


def tables_in_sql(sql: str) -> list[str]:
    """The table names a SQL query reads (CTEs, aliases, hints excluded), in order of appearance."""
    from etl.errors import SqlTablesError

    tables = list(translate(sql).tables)
    if not tables:
        raise SqlTablesError(sql=sql, problem="the SQL reads no table")
    return tables


def _parsed(sql: str) -> ParsedQuery:
    from etl.reader.query import parse_query

    return parse_query(sql)


# -- the cache ------------------------------------------------------------------------------


def cache_directory() -> Path | None:
    """Where translations are kept (None: nowhere, also when there is no home directory)."""
    configured = os.environ.get(CACHE_ENV)
    try:
        if configured is not None:
            return Path(configured).expanduser() / "queries" if configured.strip() else None
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except RuntimeError:  # no home directory to expand "~" to
        return None
    return Path(base) / "delta-barrier" / "queries"


@functools.cache
def translator_fingerprint() -> str | None:
    """What a kept translation must have been made by: our translator's source and the
    installed sqlglot (its version file and package, found without importing it). None
    when either cannot be read: nothing is kept then."""
    try:
        spec = importlib.util.find_spec("sqlglot")
        if spec is None or spec.origin is None:
            return None
        package = Path(spec.origin).parent
        parts = [
            str(ENTRY_FORMAT),
            _digest_bytes(Path(__file__).with_name("query.py").read_bytes()),
            (package / "_version.py").read_text() if (package / "_version.py").exists() else "",
            repr(_identity(package / "__init__.py")),
        ]
    except (OSError, ImportError, ValueError):
        return None
    return _digest("\0".join(parts))


def _identity(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _digest(text: str) -> str:
    return _digest_bytes(text.encode())


def _digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry_path(sql: str) -> Path | None:
    """The file that keeps the translation of ``sql`` (None: none is kept)."""
    directory = cache_directory()
    fingerprint = translator_fingerprint()
    if directory is None or fingerprint is None:
        return None
    return directory / f"{_digest(fingerprint + chr(0) + sql)}.json"


def _kept_entry(sql: str) -> dict | None:
    """The entry of ``sql`` a child gave this process, else the one kept on disk."""
    return _TAKEN.get(sql) or _read_entry(sql)


def _read_entry(sql: str) -> dict | None:
    """The kept entry of ``sql``, if one was written for this text by this translator."""
    path = entry_path(sql)
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entry if _is_entry_of(entry, sql) else None


def _is_entry_of(entry: object, sql: str) -> bool:
    """Whether ``entry`` is a translation of ``sql`` made by this translator."""
    return (
        isinstance(entry, dict)
        and entry.get("format") == ENTRY_FORMAT
        and entry.get("fingerprint") == translator_fingerprint()
        and entry.get("text") == sql
    )


def _duckdb_texts(entry: dict | None) -> dict[str, str]:
    texts = (entry or {}).get("duckdb")
    if not isinstance(texts, dict):
        return {}
    return {k: v for k, v in texts.items() if isinstance(k, str) and isinstance(v, str)}


def _write_entry(query: TranslatedQuery, duckdb_texts: Mapping[str, str]) -> None:
    """Keep ``query``'s translation (a cache that cannot be written is skipped)."""
    path = entry_path(query.text)
    if path is None:
        return
    entry = _entry(query, duckdb_texts)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(entry, out)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        _drop_oldest(path.parent)
    except OSError as exc:
        log.debug("query translation not kept in %s: %s", path.parent, exc)


def _entry(query: TranslatedQuery, duckdb_texts: Mapping[str, str]) -> dict:
    return {
        "format": ENTRY_FORMAT,
        "fingerprint": translator_fingerprint(),
        "text": query.text,
        "tables": list(query.tables),
        "output_names": None if query.output_names is None else list(query.output_names),
        "averages": query.averages,
        "duckdb": dict(duckdb_texts),
    }


def _drop_oldest(directory: Path) -> None:
    written: list[tuple[int, Path]] = []
    for entry in directory.glob("*.json"):
        try:
            written.append((entry.stat().st_mtime_ns, entry))
        except OSError:
            continue  # another process dropped it
    for _, old in sorted(written)[: max(0, len(written) - MAX_ENTRIES)]:
        old.unlink(missing_ok=True)


__all__ = [
    "CACHE_ENV",
    "MAX_ENTRIES",
    "TranslatedQuery",
    "cache_directory",
    "entry_path",
    "tables_in_sql",
    "translate",
    "translate_ahead",
    "translator_fingerprint",
]
