"""Writing Delta tables: Spark tasks write Parquet files, the driver commits them.

Each Spark task writes its rows with pyarrow into ``location/[col=val/...]/part-*.parquet``
(Hive-style partition directories; partition columns are not stored in the files, as the
Delta protocol says) and returns a small descriptor per file: path, size, partition values,
row count and Delta statistics. Only the descriptors reach the driver, which commits them
to the Delta log through delta-rs together with an app transaction (app id, version) that
makes the commit idempotent.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from consistency.models import BEFORE_FIRST_VERSION
from etl.delta_read import (
    FILE_PATH_COLUMN,
    META_APP_ID,
    META_COMMIT_ID,
    META_RESTORED_TO,
    META_TXN_VERSION,
    absolute_path,
    active_files,
    check_supported,
    find_commit,
    hive_directory,
    normalize_location,
    open_table,
    scan,
    serialize_partition_value,
    spark_file_path,
    spark_schema,
)
from etl.errors import (
    CommitConflictError,
    DeltaIOError,
    DuplicateMergeKeyError,
    InvalidWriteOptionError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Delta-Spark's default prefix length for string statistics (dataSkippingStringPrefixLength).
_STRING_STATS_PREFIX = 32
# Rows buffered per file before a Parquet row group is written. Spark hands Arrow batches
# of 10k rows, and a row group per batch would bloat footers and slow readers down; writing
# every ~128k rows (DuckDB's default row group size) overlaps the encoding with Spark
# still sending batches, where one row group at the end of the task would serialise them.
_ROW_GROUP_ROWS = 1 << 17
_ROW_GROUP_BYTES = 64 << 20
# pyarrow tries dictionary encoding on every column and falls back to plain encoding when
# the dictionary outgrows this limit. Its 1 MiB default spends that effort anew in each row
# group on high-cardinality columns (ids, amounts, timestamps), which doubled the encoding
# time and gave larger files; low-cardinality columns stay well under 128 KiB.
_DICTIONARY_PAGE_LIMIT = 1 << 17
_PARTITION_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})
_FILE_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+$")
_DESCRIPTOR_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("rows", pa.int64()),
        ("stats", pa.string()),
        ("modification_time", pa.int64()),
    ]
)
_DESCRIPTOR_DDL = (
    "path string, size long, partition_values string, rows long, stats string, "
    "modification_time long"
)


@dataclass(frozen=True)
class DataFile:
    """A Parquet data file written into a table directory, not necessarily committed."""

    path: str
    """Relative to the table root, as on storage (Hive-escaped directories, not URL-encoded)."""
    size: int
    partition_values: Mapping[str, str | None]
    """Delta-serialised partition values (None for null)."""
    rows: int
    stats: str
    """Delta per-file statistics, JSON (Delta protocol, "Per-file Statistics")."""
    modification_time: int
    """Milliseconds since the Unix epoch."""


# -- task side: writing files and statistics ------------------------------------------------


def _timestamp_text(micros: int, *, utc: bool) -> str:
    text = (datetime(1970, 1, 1) + timedelta(microseconds=micros)).isoformat(
        timespec="microseconds"
    )
    return text + "Z" if utc else text


def _string_upper_bound(value: str) -> str | None:
    """A string >= every string starting with ``value``'s prefix; None if there is none.

    Delta compares strings by UTF-8 bytes, i.e. by code point: bumping the last code point
    of the prefix gives a bound above every string with that prefix.
    """
    prefix = value[:_STRING_STATS_PREFIX]
    while prefix:
        code = ord(prefix[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000
        if code <= 0x10FFFF:
            return prefix[:-1] + chr(code)
        prefix = prefix[:-1]
    return None


class _ColumnStats:
    """Running min/max/null count of one column of one file."""

    def __init__(self, arrow_type: pa.DataType):
        self.type = arrow_type
        self.ordered = (
            pa.types.is_integer(arrow_type)
            or pa.types.is_floating(arrow_type)
            or pa.types.is_decimal(arrow_type)
            or pa.types.is_date(arrow_type)
            or pa.types.is_timestamp(arrow_type)
            or pa.types.is_string(arrow_type)
            or pa.types.is_large_string(arrow_type)
        )
        self.nulls = 0
        self.low: Any = None
        self.high: Any = None
        self.unbounded = False
        """True when min/max cannot be written (NaN or infinities in a float column)."""

    def update(self, column: pa.Array) -> None:
        self.nulls += column.null_count
        if not self.ordered or self.unbounded or column.null_count == len(column):
            return
        if pa.types.is_timestamp(self.type):
            column = column.cast(pa.int64())
        elif pa.types.is_floating(self.type) and not pc.all(pc.is_finite(column)).as_py():
            # JSON has no NaN/Infinity and NaN has no place in an order: no bounds.
            self.unbounded = True
            return
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def bounds(self) -> tuple[Any, Any]:
        """(min, max) in Delta's JSON form; None where no valid bound can be written."""
        if not self.ordered or self.unbounded or self.low is None:
            return None, None
        if pa.types.is_timestamp(self.type):
            utc = self.type.tz is not None
            return _timestamp_text(self.low, utc=utc), _timestamp_text(self.high, utc=utc)
        if pa.types.is_date(self.type):
            return self.low.isoformat(), self.high.isoformat()
        if isinstance(self.low, str):
            high = self.high
            if len(high) > _STRING_STATS_PREFIX:
                high = _string_upper_bound(high)
            return self.low[:_STRING_STATS_PREFIX], high
        return self.low, self.high


def _json(value: object) -> str:
    """JSON that keeps decimals exact (json.dumps would need floats)."""
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, allow_nan=False)


class _FileStats:
    """Delta per-file statistics of the top-level primitive columns of one file."""

    def __init__(self, schema: pa.Schema):
        self.rows = 0
        # Nested columns get no statistics at all (their nullCount would be nested too).
        self.columns = {
            field.name: _ColumnStats(field.type)
            for field in schema
            if not pa.types.is_nested(field.type)
        }

    def update(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for name, stats in self.columns.items():
            stats.update(batch.column(name))

    def to_json(self) -> str:
        low: dict[str, object] = {}
        high: dict[str, object] = {}
        for name, stats in self.columns.items():
            lo, hi = stats.bounds()
            if lo is not None:
                low[name] = lo
            if hi is not None:
                high[name] = hi
        nulls = {name: stats.nulls for name, stats in self.columns.items()}
        return _json(
            {"numRecords": self.rows, "minValues": low, "maxValues": high, "nullCount": nulls}
        )


class _OpenFile:
    """One Parquet file being written by a task."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        root: str,
        relative_path: str,
        partition_values: Mapping[str, str | None],
        schema: pa.Schema,
    ):
        self.fs = fs
        self.full_path = f"{root}/{relative_path}"
        self.relative_path = relative_path
        self.partition_values = dict(partition_values)
        parent = self.full_path.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        self.writer = pq.ParquetWriter(
            self.full_path,
            schema,
            filesystem=fs,
            compression="snappy",
            # The Delta `timestamp` type is microseconds since the epoch (UTC-adjusted).
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
            dictionary_pagesize_limit=_DICTIONARY_PAGE_LIMIT,
        )
        self.stats = _FileStats(schema)
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.pending_bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        self.stats.update(batch)
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.pending_rows >= _ROW_GROUP_ROWS or self.pending_bytes >= _ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(
                pa.Table.from_batches(self.pending), row_group_size=self.pending_rows
            )
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> dict[str, object]:
        self._flush()
        self.writer.close()
        return {
            "path": self.relative_path,
            "size": self.fs.get_file_info(self.full_path).size,
            "partition_values": json.dumps(self.partition_values),
            "rows": self.stats.rows,
            "stats": self.stats.to_json(),
            "modification_time": int(time.time() * 1000),
        }

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.fs.delete_file(self.full_path)


@dataclass(frozen=True)
class _TaskWriter:
    """The function each Spark task runs (via mapInArrow): write files, yield descriptors.

    A module-level class, so that workers import it from ``etl.delta_write`` rather than
    unpickling a closure.
    """

    location: str
    partition_by: tuple[str, ...]
    file_prefix: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.location.startswith("/"):
            fs, root = pafs.LocalFileSystem(), self.location
        else:
            fs, root = pafs.FileSystem.from_uri(self.location)
        files: dict[tuple, _OpenFile] = {}
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                for key, part in self._split(batch):
                    file = files.get(key)
                    if file is None:
                        file = files[key] = self._open(fs, root, key, part.schema)
                    file.add(part)
            descriptors = [file.close() for file in files.values()]
        except BaseException:
            # The task will be retried with new file names; leave no half-written files.
            for file in files.values():
                with contextlib.suppress(OSError):
                    file.abort()
            raise
        yield pa.RecordBatch.from_pylist(descriptors, schema=_DESCRIPTOR_SCHEMA)

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple, pa.RecordBatch]]:
        if not self.partition_by:
            yield (), batch
            return
        data = batch.select([n for n in batch.schema.names if n not in self.partition_by])
        keys = pa.Table.from_batches([batch.select(list(self.partition_by))])
        groups = (
            keys.append_column("__row", pa.array(np.arange(batch.num_rows)))
            .group_by(list(self.partition_by), use_threads=False)
            .aggregate([("__row", "list")])
        )
        key_columns = [groups.column(c).to_pylist() for c in self.partition_by]
        rows = groups.column("__row_list")
        for i in range(groups.num_rows):
            key = tuple(serialize_partition_value(column[i]) for column in key_columns)
            yield key, data.take(rows[i].values)

    def _open(self, fs: pafs.FileSystem, root: str, key: tuple, schema: pa.Schema) -> _OpenFile:
        values = dict(zip(self.partition_by, key, strict=True))
        directory = hive_directory(self.partition_by, values)
        name = f"part-{self.file_prefix}-{uuid.uuid4()}.parquet"
        relative = f"{directory}/{name}" if directory else name
        return _OpenFile(fs, root, relative, values, schema)


def write_files(
    df: DataFrame, location: str, *, partition_by: Sequence[str] = (), file_prefix: str
) -> list[DataFile]:
    """Write ``df`` as Parquet files into the table directory, from Spark tasks.

    Returns the descriptors of the files, not yet committed (see :func:`commit_files`).
    Each task writes one file per partition it holds, named
    ``part-<file_prefix>-<uuid>.parquet`` under Hive-style ``col=value/`` directories;
    partition columns are not stored in the files. Timestamps are written as microseconds.
    Each descriptor carries the file's Delta statistics (numRecords, and minValues,
    maxValues, nullCount of top-level primitive columns). No data row reaches the driver.

    Partition columns must be strings, integers, booleans or dates; an empty string
    partition value is stored as null (Delta protocol, "Partition Value Serialization").
    """
    location = normalize_location(location)
    partition_by = tuple(partition_by)
    _check_write_options(df, location, partition_by=partition_by, file_prefix=file_prefix)
    writer = _TaskWriter(location=location, partition_by=partition_by, file_prefix=file_prefix)
    rows = df.mapInArrow(writer, _DESCRIPTOR_DDL).collect()
    files = [
        DataFile(
            path=row["path"],
            size=row["size"],
            partition_values=json.loads(row["partition_values"]),
            rows=row["rows"],
            stats=row["stats"],
            modification_time=row["modification_time"],
        )
        for row in rows
    ]
    return sorted(files, key=lambda f: f.path)


def _check_write_options(
    df: DataFrame, location: str, *, partition_by: tuple[str, ...], file_prefix: str
) -> None:
    if not _FILE_PREFIX.match(file_prefix):
        raise InvalidWriteOptionError(
            table=location,
            option="file_prefix",
            reason=f"{file_prefix!r} must be letters, digits, '_', '.' or '-'",
        )
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    for column in partition_by:
        if column not in types:
            raise InvalidWriteOptionError(
                table=location,
                option="partition_by",
                reason=f"column {column!r} is not in the rows' columns {list(types)}",
            )
        if types[column] not in _PARTITION_TYPES:
            raise InvalidWriteOptionError(
                table=location,
                option="partition_by",
                reason=f"column {column!r} has type {types[column]}; partition columns must "
                f"be one of {sorted(_PARTITION_TYPES)}",
            )
    if len(set(partition_by)) == len(types):
        raise InvalidWriteOptionError(
            table=location,
            option="partition_by",
            reason="every column is a partition column; at least one must be stored in files",
        )


# -- driver side: committing -----------------------------------------------------------------


def _column_types(schema_json: str) -> dict[str, str]:
    """Column name -> Delta type, nullability and field metadata left out."""

    def strip(node: object) -> object:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    fields = json.loads(schema_json)["fields"]
    return {
        f["name"]: f["type"] if isinstance(f["type"], str) else json.dumps(strip(f["type"]))
        for f in fields
    }


def _check_schema(table: DeltaTable, location: str, schema: pa.Schema) -> None:
    expected = _column_types(table.schema().to_json())
    got = _column_types(Schema.from_arrow(schema).to_json())
    if expected != got:
        raise SchemaMismatchError(location, expected, got)


def _remove_actions(
    table: DeltaTable, location: str, removes: Sequence[DataFile | str]
) -> list[RemoveAction]:
    current = {f.path: f for f in active_files(table)}
    paths = [remove if isinstance(remove, str) else remove.path for remove in removes]
    missing = [path for path in paths if path not in current]
    if missing:
        # Another commit removed them since the caller read the table: committing now
        # would lose that commit's rows or duplicate ours.
        raise CommitConflictError(
            table=location,
            reason=f"files to remove are not in the current version {table.version()}: {missing}",
        )
    now = int(time.time() * 1000)
    return [
        RemoveAction(
            path,
            True,
            now,
            current[path].size,
            _serialized_partition_values(current[path].partition_values),
        )
        for path in paths
    ]


def _serialized_partition_values(values: Mapping[str, object]) -> dict[str, str | None] | None:
    """The log form of typed partition values; None (omitted, as the protocol allows in a
    remove action) when a type has no serialisation here."""
    try:
        return {k: serialize_partition_value(v) for k, v in values.items()}
    except TypeError:
        return None


def _add_action(file: DataFile) -> AddAction:
    # delta-rs URL-encodes the path when it writes the log.
    return AddAction(
        path=file.path,
        size=file.size,
        partition_values=dict(file.partition_values),
        modification_time=file.modification_time,
        data_change=True,
        stats=file.stats,
    )


def commit_files(
    location: str,
    files: Sequence[DataFile],
    *,
    schema: pa.Schema,
    mode: Literal["append", "overwrite"],
    partition_by: Sequence[str] = (),
    removes: Sequence[DataFile | str] = (),
    app_id: str,
    txn_version: int,
    metadata: Mapping[str, str | int | bool],
) -> int:
    """Commit written files to the Delta log; returns the version that holds them.

    The first commit creates the table with ``schema`` and ``partition_by``. ``overwrite``
    removes every current file; ``removes`` (paths or DataFiles of the current version)
    are removed in the same commit (copy-on-write). The commit records the app transaction
    ``(app_id, txn_version)`` and ``metadata`` in commitInfo.

    Idempotent: when the log already records ``txn_version`` (or a later one) for
    ``app_id``, nothing is committed and the version that recorded ``txn_version`` is
    returned. Callers must therefore use growing ``txn_version``s, also across a RESTORE,
    which does not reset an app's transaction version.
    """
    location = normalize_location(location)
    if mode not in ("append", "overwrite"):
        raise InvalidWriteOptionError(
            table=location, option="mode", reason=f"unknown mode {mode!r}"
        )
    if mode == "overwrite" and removes:
        raise InvalidWriteOptionError(
            table=location, option="removes", reason="an overwrite removes every file already"
        )
    properties = CommitProperties(
        custom_metadata={**metadata, META_APP_ID: app_id, META_TXN_VERSION: txn_version},
        app_transactions=[Transaction(app_id, txn_version)],
    )
    adds = [_add_action(f) for f in files]
    if not DeltaTable.is_deltatable(location):
        if removes:
            raise CommitConflictError(
                table=location, reason="there is no table to remove files from"
            )
        try:
            create_table_with_add_actions(
                location,
                Schema.from_arrow(schema),
                adds,
                mode="error",
                partition_by=list(partition_by) or None,
                commit_properties=properties,
            )
            return 0
        except DeltaError as exc:
            if not DeltaTable.is_deltatable(location):
                raise DeltaIOError(table=location, operation="create", reason=str(exc)) from exc
            # Created concurrently: commit into it like into any existing table.
    table = open_table(location, operation="commit")
    check_supported(table, location)
    recorded = table.transaction_version(app_id)
    if recorded is not None and recorded >= txn_version:
        return _version_of_transaction(table, location, app_id, txn_version, recorded)
    _check_schema(table, location, schema)
    if list(partition_by) != list(table.metadata().partition_columns):
        raise InvalidWriteOptionError(
            table=location,
            option="partition_by",
            reason=f"{list(partition_by)} differs from the table's partition columns "
            f"{table.metadata().partition_columns}",
        )
    actions: list[AddAction | RemoveAction] = [*adds, *_remove_actions(table, location, removes)]
    try:
        table.create_write_transaction(
            actions,
            mode=mode,
            schema=table.schema(),
            partition_by=list(partition_by) or None,
            commit_properties=properties,
        )
    except DeltaError as exc:
        raise DeltaIOError(table=location, operation="commit", reason=str(exc)) from exc
    # The DeltaTable object is not advanced by the commit; another writer may also have
    # committed since, so look the version up by the transaction it recorded.
    return _version_of_transaction(
        open_table(location, operation="commit"), location, app_id, txn_version, txn_version
    )


def _version_of_transaction(
    table: DeltaTable, location: str, app_id: str, txn_version: int, recorded: int
) -> int:
    version = find_commit(table, location, {META_APP_ID: app_id, META_TXN_VERSION: txn_version})
    if version is None:
        raise DeltaIOError(
            table=location,
            operation="commit",
            reason=f"the log records transaction version {recorded} of app {app_id!r}, at or "
            f"past {txn_version}, but no retained commit carries version {txn_version}; it "
            "was committed by another writer or the log entry was cleaned up. Use a higher "
            "transaction version for new data",
        )
    return version


def merge_files(
    spark: SparkSession,
    location: str,
    *,
    version: int,
    updates: DataFrame,
    keys: Sequence[str],
    partition_by: Sequence[str] = (),
    file_prefix: str,
    check_unique_keys: bool = True,
) -> tuple[list[DataFile], list[str]]:
    """Copy-on-write keyed upsert against the table at ``version``.

    Finds (distributed: a semi-join on ``keys`` reporting each row's file; only distinct
    file paths reach the driver) the files that hold a key of ``updates``, and writes their
    rows minus the updated keys plus every row of ``updates``. Returns (new files, relative
    paths of the replaced files): commit both with :func:`commit_files` (``removes=``).

    ``updates`` must have the table's columns and at most one row per key. With
    ``check_unique_keys`` (default) that is checked with one aggregation over ``updates``
    (a shuffle of the updates only), raising DuplicateMergeKeyError. Null keys match no
    row (SQL equality), so an update with a null key is an insert.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    location = normalize_location(location)
    table = open_table(location, version=version, operation="merge")
    check_supported(table, location)
    schema = spark_schema(table)
    expected = {f.name: f.dataType.simpleString() for f in schema.fields}
    got = {f.name: f.dataType.simpleString() for f in updates.schema.fields}
    if expected != got:
        raise SchemaMismatchError(location, expected, got)
    if not keys or any(k not in expected for k in keys):
        raise InvalidWriteOptionError(
            table=location,
            option="keys",
            reason=f"{list(keys)} must be a non-empty list of the table's columns {list(expected)}",
        )
    columns = [F.col(f"`{name}`") for name in expected]
    key_list = list(keys)
    rows = updates.select(*columns)
    persisted = not updates.is_cached
    if persisted:
        # Read up to four times below; a recomputed transform could even differ.
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        if check_unique_keys:
            _check_unique_keys(rows, location, key_list)
        update_keys = rows.select(*[F.col(f"`{k}`") for k in key_list])
        files = active_files(table)
        touched = []
        if files:
            hits = (
                scan(spark, location, table, files, with_file_path=True)
                .join(update_keys, on=key_list, how="left_semi")
                .select(FILE_PATH_COLUMN)
                .distinct()
                .collect()
            )
            hit_paths = {spark_file_path(row[0]) for row in hits}
            touched = [f for f in files if absolute_path(location, f.path) in hit_paths]
            if len(touched) != len(hit_paths):
                raise DeltaIOError(
                    table=location,
                    operation="merge",
                    reason=f"Spark read files the log does not list: {sorted(hit_paths)}",
                )
        merged = rows
        if touched:
            kept = (
                scan(spark, location, table, touched)
                .join(update_keys, on=key_list, how="left_anti")
                .select(*columns)
            )
            merged = kept.unionAll(rows)
        adds = write_files(merged, location, partition_by=partition_by, file_prefix=file_prefix)
    finally:
        if persisted:
            rows.unpersist()
    return adds, [f.path for f in touched]


def _check_unique_keys(rows: DataFrame, location: str, keys: list[str]) -> None:
    from pyspark.sql import functions as F

    duplicate = (
        rows.where(" AND ".join(f"`{k}` IS NOT NULL" for k in keys))
        .groupBy(*[F.col(f"`{k}`") for k in keys])
        .agg(F.count(F.lit(1)).alias("__rows"))
        .where(F.col("__rows") > 1)
        .limit(1)
        .collect()
    )
    if duplicate:
        raise DuplicateMergeKeyError(
            table=location, keys=keys, example={k: duplicate[0][k] for k in keys}
        )


def restore_table(
    location: str, *, to_version: int | None, metadata: Mapping[str, str | int | bool]
) -> int:
    """Roll the table back to ``to_version``'s content; returns the new version.

    A Delta RESTORE commit, with ``metadata`` in its commitInfo. ``to_version=None`` rolls
    back to empty (before version 0, which RESTORE cannot reach): an overwrite commit that
    removes every file, marked with ``restored_to = BEFORE_FIRST_VERSION`` for
    :func:`~etl.delta_read.log_commits`. Restoring the current version commits nothing and
    returns it. A RESTORE does not reset app transaction versions.
    """
    location = normalize_location(location)
    table = open_table(location, operation="restore")
    current = table.version()
    if to_version == current:
        return current
    if to_version is not None and not 0 <= to_version < current:
        raise DeltaIOError(
            table=location,
            operation="restore",
            reason=f"version {to_version} is not an earlier version (the table is at {current})",
        )
    commit_id = uuid.uuid4().hex
    custom: dict[str, Any] = {**metadata, META_COMMIT_ID: commit_id}
    try:
        if to_version is None:
            custom[META_RESTORED_TO] = BEFORE_FIRST_VERSION
            table.create_write_transaction(
                [],
                mode="overwrite",
                schema=table.schema(),
                partition_by=list(table.metadata().partition_columns) or None,
                commit_properties=CommitProperties(custom_metadata=custom),
            )
        else:
            table.restore(to_version, commit_properties=CommitProperties(custom_metadata=custom))
    except DeltaError as exc:
        raise DeltaIOError(table=location, operation="restore", reason=str(exc)) from exc
    version = find_commit(open_table(location), location, {META_COMMIT_ID: commit_id})
    if version is None:
        raise DeltaIOError(
            table=location, operation="restore", reason="the restore commit is not in the log"
        )
    return version


__all__ = ["DataFile", "commit_files", "merge_files", "restore_table", "write_files"]
