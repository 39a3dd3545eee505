"""Consistent reads: resolve a snapshot for some tables (or the tables a SQL text names)
and read every table through it, from Spark or from lighter engines.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from catalog import Catalog, UnknownTableError
from consistency import Level, Snapshot, parse_level, resolve_snapshot
from etl.delta import read_arrow, read_table, table_version
from etl.errors import SqlTablesError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from etl.retention.pins import PinHolder


def tables_in_sql(sql: str) -> list[str]:
    """The table names a SQL text reads (CTE names excluded), in order of appearance."""
    try:
        statements = sqlglot.parse(sql, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise SqlTablesError(sql=sql, problem=f"cannot parse the SQL: {exc}") from exc
    names: list[str] = []
    for statement in statements:
        if statement is None:
            continue
        ctes = {cte.alias_or_name for cte in statement.find_all(exp.CTE)}
        for table in statement.find_all(exp.Table):
            name = table.name
            if name and name not in ctes and name not in names:
                names.append(name)
    if not names:
        raise SqlTablesError(sql=sql, problem="the SQL reads no table")
    return names


class SnapshotReader:
    """Reads tables at the versions of one resolved snapshot.

    Every read through it uses the snapshot's versions, so a repeatable-read snapshot
    returns the same answer every time it is asked.
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
        # Retention (issue 11): the pin protecting the snapshot's files while it is open.
        self.pin = pin
        self._release_pin = weakref.finalize(self, pin.close) if pin is not None else None

    def close(self) -> None:
        """Release the snapshot's pin (retention may then clean up what it read)."""
        if self._release_pin is not None:
            self._release_pin()

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def level(self) -> Level:
        return self.snapshot.level

    @property
    def epoch(self) -> int | None:
        return self.snapshot.epoch

    @property
    def versions(self):
        return self.snapshot.versions

    def _spark_session(self) -> SparkSession:
        if self._spark is None:
            from etl.spark import build_spark

            self._spark = build_spark()
        return self._spark

    def _check(self, table: str) -> str:
        if table not in self._locations:
            raise UnknownTableError(table)
        return self._locations[table]

    def table(self, name: str) -> DataFrame:
        """The table as a Spark DataFrame at the snapshot's version."""
        return self._read(self._spark_session(), name)

    def _read(self, session: SparkSession, name: str) -> DataFrame:
        location = self._check(name)
        version = self.snapshot.versions[name]
        if version is None:
            # Nothing of the table is visible at this level yet (e.g. read-committed before
            # its first sealed epoch): empty, never its uncommitted latest version.
            from pyspark.sql.types import StructType

            return session.createDataFrame([], StructType.fromJson(self._schema(name)))
        return read_table(session, location, version=version)

    def _schema(self, name: str) -> dict:
        schema_json = self.catalog.get_table(name).schema_json
        if schema_json is None:
            raise SqlTablesError(
                sql=name, problem=f"table {name!r} has no data and no schema at this snapshot yet"
            )
        return json.loads(schema_json)

    def sql(self, query: str) -> DataFrame:
        """Run SQL over temporary views of the snapshot's tables (in a private Spark session)."""
        session = self._spark_session().newSession()
        for name in tables_in_sql(query):
            if name in self._locations:
                self._read(session, name).createOrReplaceTempView(name)
        return session.sql(query)

    def arrow(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        """The table as Arrow through delta-rs, without Spark (small data)."""
        location = self._check(name)
        version = self.snapshot.versions[name]
        if version is None:
            import pyarrow as pa
            from deltalake import Schema

            empty = Schema.from_json(json.dumps(self._schema(name))).to_arrow()
            schema = pa.schema(empty)
            if columns is not None:
                schema = pa.schema([schema.field(c) for c in columns])
            return schema.empty_table()
        return read_arrow(location, version=version, columns=columns)

    def pandas(self, name: str, *, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return self.arrow(name, columns=columns).to_pandas()


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
    its rule. ``pin``: hold a retention pin while the reader is open (``close()`` or
    ``with`` releases it), so maintenance never removes what it reads.
    """
    if as_of_tag is not None:
        if as_of_epoch is not None or as_of_time is not None:
            raise SqlTablesError(
                sql=str(tables_or_sql), problem="give one of as_of_epoch, as_of_time, as_of_tag"
            )
        as_of_epoch = catalog.get_tag(as_of_tag).epoch
    if isinstance(tables_or_sql, str):
        tables = tables_in_sql(tables_or_sql) if _looks_like_sql(tables_or_sql) else [tables_or_sql]
    else:
        tables = list(tables_or_sql)
    known = {t.name for t in catalog.list_tables()}
    unknown = [t for t in tables if t not in known]
    if unknown:
        raise SqlTablesError(
            sql=", ".join(tables),
            problem=f"unknown table(s) {unknown}; the catalog has {sorted(known)}",
        )
    parsed = parse_level(level)
    latest_versions = None
    if parsed is Level.READ_UNCOMMITTED:
        latest_versions = {t: table_version(catalog.get_table(t).location) for t in tables}
    resolved = resolve_snapshot(
        catalog,
        tables,
        parsed,
        latest_versions=latest_versions,
        as_of_epoch=as_of_epoch,
        as_of_time=as_of_time,
    )
    holder = _pin(catalog, resolved, tables) if pin else None
    return SnapshotReader(catalog=catalog, snapshot=resolved, spark=spark, pin=holder)


def _pin(catalog: Catalog, resolved: Snapshot, tables: Sequence[str]) -> PinHolder | None:
    from etl.retention.pins import PinHolder

    if not any(v is not None for v in resolved.versions.values()):
        return None
    pipelines = {catalog.get_table(t).pipeline for t in tables}
    return PinHolder(
        catalog,
        versions=resolved.versions,
        epoch=resolved.epoch,
        epochs=resolved.epochs,
        pipeline=pipelines.pop() if len(pipelines) == 1 else None,
    )


def _looks_like_sql(text: str) -> bool:
    return any(ch.isspace() for ch in text.strip())


__all__ = [
    "SnapshotReader",
    "snapshot",
    "tables_in_sql",
]
