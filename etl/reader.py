"""Consistent reads: resolve a snapshot for some tables (or the tables a SQL text names)
and read every table through it, from Spark or from lighter engines.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from catalog import Catalog, CatalogReadOnlyError, DeltaBarrierError, UnknownTableError, as_utc
from consistency import (
    EpochHistory,
    HistoryAt,
    Level,
    Snapshot,
    parse_level,
    resolve_snapshot,
    switched_after,
)
from etl.delta import read_arrow, read_table, table_version
from etl.delta.maintenance import same_rows_version
from etl.delta.read import missing_files
from etl.errors import FilesRemovedError, SqlTablesError, UsageError
from etl.storage import duckdb_secret, is_local, object_store

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    from duckdb import DuckDBPyConnection
    from pyspark.sql import DataFrame, SparkSession

    from etl.retention.pins import PinHolder


@dataclass(frozen=True)
class ParsedQuery:
    """A read query: its text, its parsed form (Spark SQL) and the tables it reads."""

    text: str
    expression: exp.Query
    tables: tuple[str, ...]
    """Real tables the query reads, in order of appearance, as written (case kept)."""

    def for_duckdb(self, schema: Mapping[str, Mapping[str, str]] | None = None) -> str:
        """The query in DuckDB's dialect (Spark hints, which DuckDB has none of, dropped).

        With the tables' ``schema`` ({table: {column: Spark type}}), Spark's typing rules
        that DuckDB lacks are applied: AVG of DECIMAL(p, s) is DECIMAL(p+4, s+4) in Spark
        (a DOUBLE in DuckDB), so the DuckDB answer is cast to it.
        """
        from sqlglot.errors import ErrorLevel

        expression = self.expression
        if schema:
            expression = _spark_decimal_averages(expression, schema)
        return expression.sql(dialect="duckdb", unsupported_level=ErrorLevel.IGNORE)

    def column_names(self, returned: Sequence[str]) -> list[str]:
        """The result's column names, the same whichever engine ran the query: an output
        column the query does not name (``count(*)``) is named as Spark names it
        (``count(1)``), not as the engine that ran it did (DuckDB: ``count_star()``).
        ``returned``: the names the engine gave, star columns included."""
        select = self.expression
        while isinstance(select, exp.SetOperation):
            select = select.left  # a UNION's columns are named by its first query
        if not isinstance(select, exp.Select):
            return list(returned)
        projections = select.expressions
        stars = [i for i, p in enumerate(projections) if p.is_star]
        if not stars and len(projections) != len(returned):
            return list(returned)
        names = list(returned)
        for index, projection in enumerate(projections):
            if projection.is_star:
                continue
            # Spark names a column as the query writes it (DuckDB as its schema does)
            if isinstance(projection, exp.Alias | exp.Column):
                name = projection.alias_or_name
            else:
                name = _spark_column_name(projection)
            if not stars or index < stars[0]:
                names[index] = name
            elif index > stars[-1]:
                names[len(names) - (len(projections) - index)] = name
        return names


def _spark_column_name(expression: exp.Expression) -> str:
    """The name Spark gives an unnamed output column: its SQL with functions in lower case,
    ``count(*)`` as ``count(1)``, binary operations parenthesized, string literals unquoted
    and columns without their table (``max(c.cnt) + 1`` -> ``(max(cnt) + 1)``)."""

    def spark_form(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
            return exp.Count(this=exp.Literal.number(1))
        if isinstance(node, exp.Column) and node.table:
            return exp.column(node.this.copy())
        if isinstance(node, exp.Literal) and node.is_string:
            return exp.Var(this=node.this)
        return node

    if isinstance(expression, exp.Literal) and expression.is_string:
        return expression.this
    holder = exp.Tuple(expressions=[expression.copy().transform(spark_form)])
    for binary in reversed(list(holder.find_all(exp.Binary))):  # innermost first
        if not isinstance(binary.parent, exp.Paren):
            binary.replace(exp.Paren(this=binary.copy()))
    return holder.expressions[0].sql(dialect="spark", normalize_functions="lower")


def _spark_decimal_averages(
    expression: exp.Query, schema: Mapping[str, Mapping[str, str]]
) -> exp.Query:
    from sqlglot.optimizer.annotate_types import annotate_types
    from sqlglot.optimizer.qualify import qualify

    try:
        typed = qualify(
            expression.copy(),
            schema={k: dict(v) for k, v in schema.items()},
            dialect="spark",
            validate_qualify_columns=False,
            quote_identifiers=False,
        )
        annotate_types(typed, schema={k: dict(v) for k, v in schema.items()}, dialect="spark")
    except Exception:  # noqa: BLE001 - typing is best effort; the query still runs
        return expression
    types = [avg.this.type for avg in typed.find_all(exp.Avg, bfs=False)]
    result = expression.copy()
    originals = list(result.find_all(exp.Avg, bfs=False))
    if len(types) != len(originals):
        return expression
    for avg, kind in zip(originals, types, strict=True):
        if kind is None or not kind.is_type(exp.DataType.Type.DECIMAL):
            continue
        params = [p.this.name if hasattr(p.this, "name") else p.name for p in kind.expressions]
        try:
            precision, scale = (int(params[0]), int(params[1])) if len(params) == 2 else (10, 0)
        except ValueError:
            continue
        scale_out = min(scale + 4, 38)
        target = exp.DataType.build(f"DECIMAL({min(precision + 4, 38)}, {scale_out})")
        name = f"avg({avg.this.sql(dialect='spark')})"
        cast = exp.Cast(this=avg.copy(), to=target)
        if isinstance(avg.parent, exp.Select):
            avg.replace(exp.alias_(cast, name, quoted=True))
        else:
            avg.replace(cast)
    return result


def parse_query(sql: str) -> ParsedQuery:
    """Parse one read query (Spark SQL) and find the tables it reads by scope analysis.

    A name counts as a table when a query scope selects from it and it is not a CTE or
    derived table visible in that scope: so a CTE hides a table of the same name only
    where the CTE is in scope, a hint's arguments (``/*+ BROADCAST(w) */``) and aliases
    are not tables, and table-valued functions are not tables. Raises SqlTablesError for
    text that does not parse (the message says where, without sqlglot's internals), for
    more than one statement, and for anything but a query (INSERT, DROP, ...).
    """
    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise SqlTablesError(sql=sql, problem=_parse_problem(exc)) from None
    except sqlglot.errors.TokenError as exc:
        raise SqlTablesError(sql=sql, problem=f"cannot read the SQL: {_plain(str(exc))}") from None
    if not statements:
        raise SqlTablesError(sql=sql, problem="the SQL is empty")
    if len(statements) > 1:
        raise SqlTablesError(sql=sql, problem="give one query, not several statements")
    (statement,) = statements
    if not isinstance(statement, exp.Query):
        kind = statement.key.upper()
        raise SqlTablesError(
            sql=sql, problem=f"only queries (SELECT, WITH ... SELECT) are read, not {kind}"
        )
    root = build_scope(statement)
    names: list[str] = []
    seen: set[str] = set()
    if root is not None:
        for scope in root.traverse():
            for source in scope.sources.values():
                if not isinstance(source, exp.Table) or not source.name:
                    continue  # a CTE, a derived table, a table-valued function
                if not isinstance(source.this, exp.Identifier):
                    continue
                name = ".".join(part.name for part in source.parts)
                if name.lower() not in seen:
                    seen.add(name.lower())
                    names.append(name)
    # Scopes are visited innermost first; report tables in the order the text names them.
    names.sort(key=lambda n: _position(statement, n))
    return ParsedQuery(text=sql, expression=statement, tables=tuple(names))


def _position(statement: exp.Expression | exp.Query, name: str) -> int:
    for index, table in enumerate(statement.find_all(exp.Table, bfs=False)):
        if ".".join(part.name for part in table.parts).lower() == name.lower():
            return index
    return 0


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def _parse_problem(exc: sqlglot.errors.ParseError) -> str:
    """A parse error in words: where, and what (never sqlglot's class names or ANSI codes)."""
    if not exc.errors:
        return f"cannot parse the SQL: {_plain(str(exc)).splitlines()[0]}"
    first = exc.errors[0]
    description = str(first.get("description") or "syntax error")
    if description.startswith("Required keyword") or "missing for <class" in description:
        description = "incomplete expression"
    description = re.sub(r"\s*for <class [^>]*>", "", description)
    near = _plain(str(first.get("highlight") or "")).strip()
    before = _plain(str(first.get("start_context") or "")).strip()
    where = f"line {first.get('line')}, column {first.get('col')}"
    if near:
        where += f", at {near!r}"
    elif before:
        where += f", after {before[-30:]!r}"
    return f"cannot parse the SQL: {description} ({where})"


def tables_in_sql(sql: str) -> list[str]:
    """The table names a SQL query reads (CTEs, aliases, hints excluded), in order of appearance."""
    tables = list(parse_query(sql).tables)
    if not tables:
        raise SqlTablesError(sql=sql, problem="the SQL reads no table")
    return tables


class SnapshotClosedError(UsageError):
    """A read through a snapshot after it was closed (its versions are no longer protected)."""

    def __init__(self) -> None:
        super().__init__(
            "the snapshot is closed: read inside `with snapshot(...) as snap:`, "
            "or resolve a new snapshot"
        )


class SnapshotReader:
    """Reads tables at the versions of one resolved snapshot.

    Every read through it uses the snapshot's versions, so a repeatable-read snapshot
    returns the same answer every time it is asked. Use it as a context manager
    (``with snapshot(...) as snap:``): it holds what the snapshot needs while open (a
    catalog pin once retention protects cuts) and :meth:`close` releases it, closing the
    DuckDB connections it handed out.

    Engines: Spark (:meth:`table`, :meth:`sql`), and without Spark DuckDB
    (:meth:`duckdb`, :meth:`query`), Arrow (:meth:`arrow`), Polars (:meth:`polars`) and
    pandas (:meth:`pandas`). :meth:`describe` gives the cut as data for any Delta reader.
    """

    def __init__(
        self,
        *,
        catalog: Catalog,
        snapshot: Snapshot,
        spark: SparkSession | None,
        pin: PinHolder | None = None,
    ) -> None:
        self.catalog = catalog
        self.snapshot = snapshot
        self._spark = spark
        self._locations = {t: catalog.get_table(t).location for t in snapshot.versions}
        # Retention: the pin protecting the snapshot's files while it is open.
        self.pin = pin
        self._release_pin = weakref.finalize(self, pin.close) if pin is not None else None
        self._connections: list[duckdb.DuckDBPyConnection] = []
        self._attached: list[str] = []
        self._closed = False
        self._read_at: dict[str, int] = {}

    # -- lifetime ----------------------------------------------------------------------

    def __enter__(self) -> SnapshotReader:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the snapshot: its retention pin (maintenance may then clean up what it
        read), the DuckDB connections from :meth:`duckdb`; reads through it raise
        SnapshotClosedError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for connection in self._connections:
            with contextlib.suppress(Exception):
                connection.close()
        self._connections.clear()
        _detach(self._attached)
        self._attached.clear()
        if self._release_pin is not None:
            self._release_pin()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SnapshotClosedError()

    def use_spark(self, spark: SparkSession) -> None:
        """Read through ``spark`` (for example one built for a cluster master) from now on."""
        self._spark = spark

    # -- the cut -----------------------------------------------------------------------

    @property
    def level(self) -> Level:
        return self.snapshot.level

    @property
    def epoch(self) -> int | None:
        return self.snapshot.epoch

    @property
    def barrier_ts(self) -> datetime | None:
        """The barrier timestamp of the snapshot's epoch (repeatable-read): how old the cut is."""
        return self.snapshot.barrier_ts

    @property
    def versions(self):
        return self.snapshot.versions

    @property
    def locations(self) -> Mapping[str, str]:
        """Per table, where its Delta log lives."""
        return dict(self._locations)

    def describe(self) -> dict[str, Any]:
        """The cut as data: what any Delta reader needs to read the same snapshot.

        ``{"level", "epoch", "barrier_ts", "tables": [{"table", "location", "uri",
        "version", "epoch"}]}``; ``version`` None means the table has nothing visible at
        this level (read it as empty). A repeatable-read cut over tables of several
        pipelines has no one epoch (``epoch`` null, ``barrier_ts`` the oldest cut's) and
        adds ``"aligned_at"`` and ``"pipelines": [{"pipeline", "epoch", "barrier_ts",
        "tables"}]``.
        """
        described: dict[str, Any] = {
            "level": self.level.value,
            "epoch": self.epoch,
            "barrier_ts": _iso(self.snapshot.barrier_ts),
            "tables": [
                {
                    "table": name,
                    "location": location,
                    "uri": _uri(location),
                    "version": self.snapshot.versions[name],
                    "epoch": self.snapshot.epochs.get(name),
                }
                for name, location in self._locations.items()
            ],
        }
        if any(not is_local(location) for location in self._locations.values()):
            described["object_store"] = object_store().describe()
        if self.snapshot.pipelines:
            described["aligned_at"] = _iso(self.snapshot.aligned_at)
            described["pipelines"] = [
                {
                    "pipeline": cut.pipeline,
                    "epoch": cut.epoch,
                    "barrier_ts": _iso(cut.barrier_ts),
                    "tables": list(cut.tables),
                }
                for cut in self.snapshot.pipelines
            ]
        return described

    def _check(self, table: str) -> str:
        self._check_open()
        if table not in self._locations:
            raise UnknownTableError(table)
        return self._locations[table]

    # -- Spark -------------------------------------------------------------------------

    def _spark_session(self) -> SparkSession:
        if self._spark is None:
            from etl.spark import build_spark

            self._spark = build_spark()
        return self._spark

    def table(self, name: str) -> DataFrame:
        """The table as a Spark DataFrame at the snapshot's version."""
        return self._read(self._spark_session(), name)

    def read_version(self, name: str) -> int | None:
        """The version ``name`` is read at: the snapshot's, or the newest one after it
        whose commits changed no row (compaction), which holds the same rows in fewer
        files and is kept whenever the snapshot's is (etl/delta/maintenance.py)."""
        version = self.snapshot.versions[name]
        if version is None:
            return None
        if name not in self._read_at:
            self._read_at[name] = same_rows_version(self._locations[name], version)
        return self._read_at[name]

    def _read(self, session: SparkSession, name: str) -> DataFrame:
        location = self._check(name)
        version = self.read_version(name)
        if version is None:
            # Nothing of the table is visible at this level yet (e.g. read-committed before
            # its first sealed epoch): empty, never its uncommitted latest version.
            from pyspark.sql.types import StructType

            return session.createDataFrame([], StructType.fromJson(self._schema(name)))
        try:
            return read_table(session, location, version=version)
        except FilesRemovedError as exc:
            raise self._files_removed(name, exc.version, exc.missing) from exc

    # -- a cut whose files were removed outside Delta Barrier ----------------------------

    def _check_files(self) -> None:
        """Raise FilesRemovedError (naming the table, version, epoch and what still reads)
        if files of a table at its read version are gone from storage."""
        for name, location in self._locations.items():
            version = self.read_version(name)
            if version is not None and (missing := missing_files(location, version)):
                raise self._files_removed(name, version, missing)

    def _files_removed(self, name: str, version: int, missing: Sequence[str]) -> FilesRemovedError:
        return FilesRemovedError(
            table=name,
            version=version,
            missing=missing,
            epoch=self.snapshot.epochs.get(name),
            still_readable=self._intact_cuts(),
        )

    def _intact_cuts(self, *, tries: int = 10) -> str | None:
        """What of this snapshot's tables still reads: the nearest later epoch whose files
        are all there (of the next ``tries``), and the latest cut at this level."""
        names = list(self._locations)

        def intact(cut: Snapshot) -> bool:
            return all(
                v is None or not missing_files(self._locations[t], v)
                for t, v in cut.versions.items()
            )

        def resolved(**kwargs: Any) -> Snapshot | None:
            try:
                return snapshot(self.catalog, names, pin=False, **kwargs).snapshot
            except DeltaBarrierError:
                return None

        found = []
        latest = resolved(level=self.level)
        if self.epoch is not None:
            last = latest.epoch if latest is not None and latest.epoch else self.epoch + tries
            for epoch in range(self.epoch + 1, min(last, self.epoch + tries + 1)):
                cut = resolved(as_of_epoch=epoch)
                if cut is not None and intact(cut):
                    found.append(f"epoch {epoch}, the nearest intact cut after it")
                    break
        if latest is not None and latest.versions != self.snapshot.versions and intact(latest):
            at = f" (epoch {latest.epoch})" if latest.epoch is not None else ""
            found.append(
                f"the latest {self.level.value} cut{at}, read without --as-of-epoch, "
                "--as-of-time or --as-of-tag"
            )
        return "; ".join(found) or None

    def _schema(self, name: str) -> dict:
        schema_json = self.catalog.get_table(name).schema_json
        if schema_json is None:
            raise SqlTablesError(
                sql=name, problem=f"table {name!r} has no data and no schema at this snapshot yet"
            )
        return json.loads(schema_json)

    def sql(self, query: str) -> DataFrame:
        """Run SQL over temporary views of the snapshot's tables (in a private Spark session)."""
        parsed = parse_query(query)
        session = self._spark_session().newSession()
        for name in self._names_in(parsed):
            self._read(session, name).createOrReplaceTempView(name)
        return session.sql(query)

    def _names_in(self, parsed: ParsedQuery) -> list[str]:
        by_lower = {t.lower(): t for t in self._locations}
        return [by_lower[n.lower()] for n in parsed.tables if n.lower() in by_lower]

    # -- without Spark -----------------------------------------------------------------

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """A new DuckDB connection with one view per table of the snapshot, each at the
        snapshot's Delta version (through DuckDB's Delta extension). Closed with the
        snapshot; session time zone UTC, as in Spark. Its views are its own (temporary);
        it shares the process's in-memory DuckDB database, where the extension is loaded
        once. Files of the cut removed outside Delta Barrier (another tool's VACUUM) raise
        FilesRemovedError here, not at a query's first read."""
        self._check_open()
        self._check_files()
        return self._duckdb_views()

    def _duckdb_views(self) -> DuckDBPyConnection:  # (in the class, `duckdb` is the method)
        """:meth:`duckdb` without checking the files (a failing query checks them)."""
        self._check_open()
        connection = _duckdb_connection()
        self._connections.append(connection)
        remote = [location for location in self._locations.values() if not is_local(location)]
        if remote:
            _load_httpfs()
            secret = duckdb_secret(remote[0], with_credentials=True)
            if secret is not None:
                connection.execute(secret)
        for name, location in self._locations.items():
            version = self.read_version(name)
            view = _quote_duckdb(name)
            if version is None:
                empty = self.arrow(name)
                connection.register(f"__empty_{name}", empty)
                connection.execute(
                    f"CREATE TEMP VIEW {view} AS SELECT * FROM {_quote_duckdb('__empty_' + name)}"
                )
                continue
            # An attached database is seen by every connection of the database: the name is
            # unique, and it is detached when the snapshot closes.
            alias = f"__delta_{name}_{next(_ATTACH_IDS)}"
            attached = _quote_duckdb(alias)
            uri = _uri(location).replace("'", "''")
            connection.execute(f"ATTACH '{uri}' AS {attached} (TYPE delta)")
            self._attached.append(alias)
            connection.execute(
                f"CREATE TEMP VIEW {view} AS SELECT * FROM {attached} AT (VERSION => {int(version)})"
            )
        return connection

    def query(self, sql: str, *, engine: str = "duckdb", limit: int | None = None) -> pa.Table:
        """Run a read query (Spark SQL) on the snapshot and return the rows as Arrow.

        ``engine``: ``duckdb`` (no Spark; the query is translated to DuckDB's dialect) or
        ``spark``. For one snapshot both engines give the same answer.
        """
        parsed = parse_query(sql)
        if engine == "spark":
            frame = self.sql(sql)
            if limit is not None:
                frame = frame.limit(limit)
            result = frame.toArrow()
            return result.rename_columns(parsed.column_names(result.column_names))
        if engine != "duckdb":
            raise UsageError(f"unknown engine {engine!r}; use duckdb or spark")
        import duckdb

        attached_before = len(self._attached)
        connection = self._duckdb_views()
        try:
            text = parsed.for_duckdb(self._spark_types(self._names_in(parsed)))
            try:
                # The relation's limit keeps the result's column names; a subquery
                # (SELECT * FROM (...) LIMIT n) would rename duplicates to word_1.
                relation = connection.sql(text)
                if limit is not None:
                    relation = relation.limit(int(limit))
                result = relation.fetch_arrow_table()
                return result.rename_columns(parsed.column_names(result.column_names))
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.IOException):
                    self._check_files()
                problem = _plain(str(exc)).strip().splitlines()[0]
                raise UsageError(f"DuckDB cannot run the query: {problem}") from None
        finally:
            connection.close()
            with contextlib.suppress(ValueError):
                self._connections.remove(connection)
            _detach(self._attached[attached_before:])
            del self._attached[attached_before:]

    def _spark_types(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """Per table, column -> Spark SQL type (from the catalog's Delta schema)."""
        types: dict[str, dict[str, str]] = {}
        for name in names:
            schema_json = self.catalog.get_table(name).schema_json
            if not schema_json:
                continue
            fields = json.loads(schema_json).get("fields", [])
            types[name] = {
                f["name"]: f["type"] if isinstance(f["type"], str) else "STRUCT<>" for f in fields
            }
        return types

    def arrow(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        """The table as Arrow through delta-rs, without Spark (small data)."""
        location = self._check(name)
        version = self.read_version(name)
        if version is None:
            import pyarrow as pa
            from deltalake import Schema

            empty = Schema.from_json(json.dumps(self._schema(name))).to_arrow()
            schema = pa.schema(empty)
            if columns is not None:
                schema = pa.schema([schema.field(c) for c in columns])
            return schema.empty_table()
        try:
            return read_arrow(location, version=version, columns=columns)
        except FilesRemovedError as exc:
            raise self._files_removed(name, exc.version, exc.missing) from exc

    def polars(self, name: str, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """The table as a Polars DataFrame at the snapshot's version, without Spark."""
        import polars as pl

        frame = pl.from_arrow(self.arrow(name, columns=columns))
        assert isinstance(frame, pl.DataFrame)
        return frame

    def pandas(self, name: str, *, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self.arrow(name, columns=columns).to_pandas()


def _uri(location: str) -> str:
    if "://" in location:
        return location
    return Path(location).resolve().as_uri()


def _quote_duckdb(name: str) -> str:
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
        f"LOAD '{_sql_text(delta_extension_path())}';",
    ]
    remote = [t["location"] for t in cut["tables"] if not is_local(t["location"])]
    if remote:
        lines += [
            f"LOAD '{_sql_text(httpfs_extension_path())}';",
            "-- credentials: add KEY_ID and SECRET to this secret, or create one of your own",
            f"{duckdb_secret(remote[0], with_credentials=False)};",
        ]
    for table in cut["tables"]:
        attached = _quote_duckdb(f"__delta_{table['table']}")
        lines.append(f"ATTACH '{_sql_text(table['uri'])}' AS {attached} (TYPE delta);")
        read = (
            f"SELECT * FROM {attached} WHERE false"
            if table["version"] is None
            else f"SELECT * FROM {attached} AT (VERSION => {int(table['version'])})"
        )
        lines.append(f"CREATE OR REPLACE VIEW {_quote_duckdb(table['table'])} AS {read};")
    return "\n".join(lines) + "\n"


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


_DUCKDB: duckdb.DuckDBPyConnection | None = None
_DUCKDB_LOCK = threading.Lock()
_ATTACH_IDS = itertools.count(1)


def _duckdb_connection() -> duckdb.DuckDBPyConnection:
    """A new connection to the process's one in-memory DuckDB database (opening one and
    loading the Delta extension into it cost more than a whole warm read)."""
    global _DUCKDB
    with _DUCKDB_LOCK:
        if _DUCKDB is None:
            import duckdb

            database = duckdb.connect(config={"allow_unsigned_extensions": "true"})
            path = delta_extension_path().replace("'", "''")
            database.execute(f"LOAD '{path}'")
            _DUCKDB = database
        connection = _DUCKDB.cursor()
    connection.execute("SET TimeZone = 'UTC'")
    return connection


_HTTPFS_LOADED = False


def _load_httpfs() -> None:
    """Load the object-store extension into the process's DuckDB database, once."""
    global _HTTPFS_LOADED
    with _DUCKDB_LOCK:
        if not _HTTPFS_LOADED and _DUCKDB is not None:
            _DUCKDB.execute(f"LOAD '{_sql_text(httpfs_extension_path())}'")
            _HTTPFS_LOADED = True


def _detach(aliases: Iterable[str]) -> None:
    if _DUCKDB is None:
        return
    with _DUCKDB_LOCK:
        for alias in aliases:
            with contextlib.suppress(Exception):
                _DUCKDB.execute(f"DETACH {_quote_duckdb(alias)}")


def snapshot(
    catalog: Catalog,
    tables_or_sql: str | Iterable[str],
    level: Level | str = Level.REPEATABLE_READ,
    *,
    spark: SparkSession | None = None,
    as_of_epoch: int | None = None,
    as_of_time: datetime | None = None,
    as_of_tag: str | None = None,
    pin: bool = True,
) -> SnapshotReader:
    """Resolve a snapshot for tables (or the tables a SQL text names) at a level.

    ``as_of_epoch``/``as_of_time``/``as_of_tag`` give the repeatable-read snapshot of a
    past epoch (a tag names one). An expired epoch raises EpochExpiredError naming it and
    its rule. Table names match the catalog's without regard to case, as in Spark SQL.
    Use the result as a context manager: ``with snapshot(catalog, sql) as snap: ...``;
    with ``pin`` (the default) it holds a retention pin while open, so maintenance never
    removes what it reads, and ``close()`` (or leaving the ``with``) releases it.
    """
    if as_of_tag is not None and (as_of_epoch is not None or as_of_time is not None):
        raise SqlTablesError(
            sql=str(tables_or_sql), problem="give one of as_of_epoch, as_of_time, as_of_tag"
        )
    # The catalog as readers saw it then: a cut named before a recompute's switch reads
    # the revision it named (docs/design.md, "Recompute: revisions").
    seen_at = as_of_time
    if as_of_tag is not None:
        tag = catalog.get_tag(as_of_tag)
        as_of_epoch, seen_at = tag.epoch, tag.created_at
    if isinstance(tables_or_sql, str):
        if _looks_like_sql(tables_or_sql):
            tables = tables_in_sql(tables_or_sql)
            where = tables_or_sql
        else:
            tables = [tables_or_sql]
            where = tables_or_sql
    else:
        tables = list(tables_or_sql)
        where = ", ".join(tables)
    pipelines = {t.name: t.pipeline for t in catalog.list_tables()}
    known = set(pipelines)
    by_lower = {name.lower(): name for name in known}
    unknown = [t for t in tables if t not in known and t.lower() not in by_lower]
    if unknown:
        raise SqlTablesError(
            sql=where,
            problem=f"unknown table(s) {unknown}; the catalog has {sorted(known)}",
        )
    tables = list(dict.fromkeys(t if t in known else by_lower[t.lower()] for t in tables))
    parsed = parse_level(level)
    latest_versions = None
    if parsed is Level.READ_UNCOMMITTED:
        latest_versions = {t: table_version(catalog.get_table(t).location) for t in tables}
    history: EpochHistory = catalog
    if seen_at is not None and switched_after(catalog.revisions(), seen_at):
        history = HistoryAt(catalog, seen_at)
    resolved = resolve_snapshot(
        history,
        tables,
        parsed,
        latest_versions=latest_versions,
        as_of_epoch=as_of_epoch,
        as_of_time=as_of_time,
        pipelines={t: pipelines[t] for t in tables},
    )
    holder = _pin(catalog, resolved, tables) if pin else None
    return SnapshotReader(catalog=catalog, snapshot=resolved, spark=spark, pin=holder)


def _pin(catalog: Catalog, resolved: Snapshot, tables: Sequence[str]) -> PinHolder | None:
    """The retention pin of the snapshot; None when nothing is to be pinned, or when the
    catalog is read-only (a read-only warehouse is still readable: a file that maintenance
    elsewhere removed meanwhile fails the read, it never changes the answer)."""
    from etl.retention.pins import PinHolder

    if not any(v is not None for v in resolved.versions.values()):
        return None
    pipelines = {catalog.get_table(t).pipeline for t in tables}
    try:
        return PinHolder(
            catalog,
            versions=resolved.versions,
            epoch=resolved.epoch,
            epochs=resolved.epochs,
            pipeline=pipelines.pop() if len(pipelines) == 1 else None,
        )
    except CatalogReadOnlyError:
        log.info("the catalog is read-only: this snapshot holds no retention pin")
        return None


def _iso(ts: datetime | None) -> str | None:
    return as_utc(ts).isoformat() if ts is not None else None


def _looks_like_sql(text: str) -> bool:
    return any(ch.isspace() for ch in text.strip())


__all__ = [
    "ParsedQuery",
    "SnapshotClosedError",
    "SnapshotReader",
    "delta_extension_path",
    "parse_query",
    "snapshot",
    "tables_in_sql",
]
