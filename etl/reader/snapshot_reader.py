"""The Python snapshot API: :func:`snapshot` resolves a cut (:mod:`etl.reader.cut`) and
returns a :class:`SnapshotReader`, which reads every table at the cut's versions through
Spark (``table``, ``sql``), DuckDB (``duckdb``, ``query``), Arrow, Polars or pandas.

Each engine is imported when first used: a DuckDB read imports no PySpark, and a read of
named tables no sqlglot."""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from catalog import DeltaBarrierError, UnknownTableError, as_utc
from consistency import Level, Snapshot
from etl.errors import FilesRemovedError, SqlTablesError, UsageError
from etl.reader.cut import pin_cut, resolve_cut
from etl.reader.duckdb_session import (
    attach_alias,
    connect,
    detach,
    load_httpfs,
    quote_identifier,
    sql_text,
    table_uri,
)
from etl.storage import duckdb_secret, is_local

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    from duckdb import DuckDBPyConnection, DuckDBPyRelation
    from pyspark.sql import DataFrame, SparkSession

    from catalog import CatalogReads, TableInfo
    from etl.reader.translation import TranslatedQuery
    from etl.retention.pins import PinHolder


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
        catalog: CatalogReads,
        snapshot: Snapshot,
        spark: SparkSession | None,
        pin: PinHolder | None = None,
        tables: Mapping[str, TableInfo] | None = None,
    ) -> None:
        """``tables``: the snapshot's tables as the catalog registers them (looked up
        when not given)."""
        self.catalog = catalog
        self.snapshot = snapshot
        self._spark = spark
        self._tables = (
            dict(tables)
            if tables is not None
            else {t: catalog.get_table(t) for t in snapshot.versions}
        )
        self._locations = {t: self._tables[t].location for t in snapshot.versions}
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
        detach(self._attached)
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
                    "uri": table_uri(location),
                    "version": self.snapshot.versions[name],
                    "epoch": self.snapshot.epochs.get(name),
                }
                for name, location in self._locations.items()
            ],
        }
        if any(not is_local(location) for location in self._locations.values()):
            from etl.storage import object_store

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
        from etl.spark import answer_without_delay, build_spark

        if self._spark is None:
            self._spark = build_spark()
        answer_without_delay(self._spark)  # the reading thread may not be the builder's
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
            from etl.delta.logfile import same_rows_version

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
        from etl.delta import read_table

        try:
            return read_table(session, location, version=version)
        except FilesRemovedError as exc:
            raise self._files_removed(name, exc.version, exc.missing) from exc

    # -- a cut whose files were removed outside Delta Barrier ----------------------------

    def _check_files(self) -> None:
        """Raise FilesRemovedError (naming the table, version, epoch and what still reads)
        if files of a table at its read version are gone from storage."""
        from etl.delta.read import missing_files

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
        from etl.delta.read import missing_files

        names = list(self._locations)

        def intact(cut: Snapshot) -> bool:
            return all(
                v is None or not missing_files(self._locations[t], v)
                for t, v in cut.versions.items()
            )

        def resolved(**kwargs: Any) -> Snapshot | None:
            try:
                return resolve_cut(self.catalog, names, **kwargs).snapshot
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
        schema_json = self._tables[name].schema_json
        if schema_json is None:
            raise SqlTablesError(
                sql=name, problem=f"table {name!r} has no data and no schema at this snapshot yet"
            )
        return json.loads(schema_json)

    def sql(self, query: str) -> DataFrame:
        """Run SQL over temporary views of the snapshot's tables (in a private Spark session)."""
        from etl.reader.translation import translate

        parsed = translate(query)
        session = self._spark_session().newSession()
        for name in self._names_in(parsed):
            self._read(session, name).createOrReplaceTempView(name)
        return session.sql(query)

    def _names_in(self, parsed: TranslatedQuery) -> list[str]:
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
        connection = connect()
        self._connections.append(connection)
        remote = [location for location in self._locations.values() if not is_local(location)]
        if remote:
            load_httpfs()
            secret = duckdb_secret(remote[0], with_credentials=True)
            if secret is not None:
                connection.execute(secret)
        for name, location in self._locations.items():
            version = self.read_version(name)
            view = quote_identifier(name)
            if version is None:
                empty = self.arrow(name)
                connection.register(f"__empty_{name}", empty)
                connection.execute(
                    f"CREATE TEMP VIEW {view} AS SELECT * FROM {quote_identifier('__empty_' + name)}"
                )
                continue
            # An attached database is seen by every connection of the database: the name is
            # unique, and it is detached when the snapshot closes.
            alias = attach_alias(name)
            attached = quote_identifier(alias)
            uri = sql_text(table_uri(location))
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
        if engine == "spark":
            from etl.reader.translation import translate

            parsed = translate(sql)
            frame = self.sql(sql)
            if limit is not None:
                frame = frame.limit(limit)
            result = frame.toArrow()
            return result.rename_columns(parsed.column_names(result.column_names))
        if engine != "duckdb":
            raise UsageError(f"unknown engine {engine!r}; use duckdb or spark")
        return self._on_duckdb(sql, limit, _arrow_result)

    def query_rows(self, sql: str, *, limit: int | None = None) -> QueryRows:
        """:meth:`query` on DuckDB, its rows as Python values, without Arrow where DuckDB's
        values are Arrow's (:func:`_python_rows`): what ``etl sql`` prints, importing no
        pyarrow."""
        return self._on_duckdb(sql, limit, _python_rows)

    def _on_duckdb(
        self,
        sql: str,
        limit: int | None,
        fetch: Callable[[DuckDBPyRelation, TranslatedQuery], _Result],
    ) -> _Result:
        """``fetch`` of the query's relation on a connection with the snapshot's views;
        DuckDB's errors as UsageError (FilesRemovedError for files removed outside Delta
        Barrier)."""
        import duckdb

        from etl.errors import without_ansi
        from etl.reader.translation import translate

        parsed = translate(sql)
        attached_before = len(self._attached)
        connection = self._duckdb_views()
        try:
            text = parsed.for_duckdb(lambda: self._spark_types(self._names_in(parsed)))
            try:
                # The relation's limit keeps the result's column names; a subquery
                # (SELECT * FROM (...) LIMIT n) would rename duplicates to word_1.
                relation = connection.sql(text)
                if limit is not None:
                    relation = relation.limit(int(limit))
                return fetch(relation, parsed)
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.IOException):
                    self._check_files()
                problem = without_ansi(str(exc)).strip().splitlines()[0]
                raise UsageError(f"DuckDB cannot run the query: {problem}") from None
        finally:
            connection.close()
            with contextlib.suppress(ValueError):
                self._connections.remove(connection)
            detach(self._attached[attached_before:])
            del self._attached[attached_before:]

    def _spark_types(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """Per table, column -> Spark SQL type (from the catalog's Delta schema)."""
        types: dict[str, dict[str, str]] = {}
        for name in names:
            schema_json = self._tables[name].schema_json
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
        from etl.delta import read_arrow

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


def snapshot(
    catalog: CatalogReads,
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
    cut = resolve_cut(
        catalog,
        tables_or_sql,
        level,
        as_of_epoch=as_of_epoch,
        as_of_time=as_of_time,
        as_of_tag=as_of_tag,
    )
    holder = pin_cut(catalog, cut) if pin else None
    return SnapshotReader(
        catalog=catalog, snapshot=cut.snapshot, spark=spark, pin=holder, tables=cut.tables
    )


@dataclass(frozen=True)
class QueryRows:
    """A query's result as Python values: its columns by position (a result may name two
    the same) and its rows, each a tuple of ``len(columns)`` values."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    @classmethod
    def from_arrow(cls, table: pa.Table) -> QueryRows:
        """The rows of an Arrow table, as its ``to_pylist`` gives the values."""
        if not table.num_columns:
            return cls((), tuple(() for _ in range(table.num_rows)))
        columns = [column.to_pylist() for column in table.columns]
        return cls(tuple(table.column_names), tuple(zip(*columns, strict=True)))


_Result = TypeVar("_Result")

_AS_ARROW: dict[str, Callable[[Any], Any] | None] = {
    **dict.fromkeys(
        (
            "boolean", "tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint",
            "uinteger", "ubigint", "float", "double", "decimal", "varchar", "blob", "date",
            "time", "timestamp", "timestamp with time zone", "list", "struct",
        ),
        None,
    ),
    # Arrow has no 128-bit integer (DuckDB's SUM of integers): DuckDB gives it to Arrow as
    # DECIMAL(38, 0).
    "hugeint": Decimal,
}  # fmt: skip
"""DuckDB's types (``DuckDBPyType.id``) whose Python values from ``fetchall`` are the ones
Arrow's ``to_pylist`` gives for the same result, or become them by the function given.
Not here, read through Arrow: MAP (DuckDB: a dict, Arrow: (key, value) pairs), INTERVAL
(timedelta, MonthDayNano), TIME WITH TIME ZONE (Arrow drops the zone), BIT, UUID (a UUID,
text), and every type not compared by tests/etl/reader/test_query_rows.py."""


def _same_in_python(kind: Any, *, nested: bool = False) -> bool:
    """Whether DuckDB's Python values of type ``kind`` are Arrow's (with no conversion
    inside a list or struct)."""
    if kind.id not in _AS_ARROW or (nested and _AS_ARROW[kind.id] is not None):
        return False
    if kind.id in ("list", "struct"):
        children = kind.children
        if kind.id == "list":
            children = [child for child in children if child[0] == "child"]
        return all(_same_in_python(child, nested=True) for _, child in children)
    return True


def _arrow_result(relation: DuckDBPyRelation, parsed: TranslatedQuery) -> pa.Table:
    result = relation.fetch_arrow_table()
    return result.rename_columns(parsed.column_names(result.column_names))


def _python_rows(relation: DuckDBPyRelation, parsed: TranslatedQuery) -> QueryRows:
    """The relation's rows as Arrow's ``to_pylist`` would give them: fetched as Python
    values where every column's type is in :data:`_AS_ARROW`, else through Arrow."""
    types = relation.types
    if not all(_same_in_python(kind) for kind in types):
        return QueryRows.from_arrow(_arrow_result(relation, parsed))
    columns = tuple(parsed.column_names(relation.columns))
    rows = relation.fetchall()
    converters = [_AS_ARROW[kind.id] for kind in types]
    if any(converters):
        rows = [
            tuple(
                value if value is None or convert is None else convert(value)
                for convert, value in zip(converters, row, strict=True)
            )
            for row in rows
        ]
    return QueryRows(columns, tuple(rows))


def _iso(ts: datetime | None) -> str | None:
    return as_utc(ts).isoformat() if ts is not None else None


__all__ = ["QueryRows", "SnapshotClosedError", "SnapshotReader", "snapshot"]
