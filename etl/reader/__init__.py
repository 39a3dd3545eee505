"""Consistent reads: resolve a snapshot for some tables (or the tables a SQL text names)
and read every table through it, from Spark or from lighter engines.

- :mod:`etl.reader.cut`: the cut of a read at a level, and its retention pin;
- :mod:`etl.reader.query`: Spark SQL read by sqlglot (tables, DuckDB's dialect, errors);
- :mod:`etl.reader.translation`: what a read needs of its query, kept on disk so that a
  query run again needs no sqlglot;
- :mod:`etl.reader.names`: the names Spark gives a query's output columns;
- :mod:`etl.reader.duckdb_session`: the process's DuckDB database, its Delta extension,
  and a cut as a DuckDB script;
- :mod:`etl.reader.snapshot_reader`: :func:`snapshot` and :class:`SnapshotReader`.

Names are imported on first use (as in :mod:`etl`), so that a read imports only the
engine it uses: ``etl snapshot words`` imports neither sqlglot nor DuckDB.
"""

from __future__ import annotations

from etl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ParsedQuery": "etl.reader.query",
    "parse_query": "etl.reader.query",
    "tables_in_sql": "etl.reader.translation",
    "TranslatedQuery": "etl.reader.translation",
    "translate": "etl.reader.translation",
    "QueryRows": "etl.reader.snapshot_reader",
    "SnapshotClosedError": "etl.reader.snapshot_reader",
    "SnapshotReader": "etl.reader.snapshot_reader",
    "snapshot": "etl.reader.snapshot_reader",
    "delta_extension_path": "etl.reader.duckdb_session",
    "duckdb_script": "etl.reader.duckdb_session",
    "httpfs_extension_path": "etl.reader.duckdb_session",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
