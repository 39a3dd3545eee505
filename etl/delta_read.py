"""Reading Delta tables: Spark DataFrames, Arrow/pandas, and the log as recovery sees it.

delta-rs resolves the Delta log (which files make up a version, their partition values and
statistics); Spark reads the Parquet files themselves. Tables are refused, never misread,
when they use a feature a plain Parquet scan cannot honour (deletion vectors, column
mapping, unknown reader features).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import reduce
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from consistency.models import (
    META_ATTEMPT,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    LogCommit,
)
from etl.errors import DeltaIOError, UnsupportedTableFeatureError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

EPOCH_COLUMN = "_epoch"

# Commit metadata written by this layer besides the consistency keys. The app/txn pair
# lets an idempotent commit find the version that recorded it; RESTORED_TO marks a
# rollback to "before version 0" (an overwrite removing every file, since Delta cannot
# RESTORE to a version that never existed).
META_APP_ID = "delta_barrier.app_id"
META_TXN_VERSION = "delta_barrier.txn_version"
META_COMMIT_ID = "delta_barrier.commit_id"
META_RESTORED_TO = "delta_barrier.restored_to"

# Reader features a plain Parquet scan of the active files reads correctly (Delta
# protocol, "Table Features"): timestampNtz only adds a type Spark reads natively;
# vacuumProtocolCheck only constrains VACUUM.
SUPPORTED_READER_FEATURES = frozenset({"timestampNtz", "vacuumProtocolCheck"})
_MAX_READER_VERSION = 3

# Hive-style partition directories, escaped as Spark escapes them
# (ExternalCatalogUtils.escapePathName), so Spark's partition discovery reads them back.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_ESCAPED_CHARS = frozenset(
    [chr(c) for c in range(0x01, 0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)
# Partition types whose value serialisation is unambiguous, so a Hive directory can be
# checked against the log's value and parsed back by Spark.
_HIVE_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})

_RECENT_COMMITS = 16

FILE_PATH_COLUMN = "__delta_barrier_file"
"""The column :func:`scan` adds with ``with_file_path``: the URI Spark read the row from."""


def escape_path_name(value: str) -> str:
    """Escape a partition column name or value for a Hive directory name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED_CHARS else c for c in value)


def serialize_partition_value(value: object) -> str | None:
    """Serialise a partition value as the Delta protocol's partitionValues do.

    Only the types in ``_HIVE_TYPES``. An empty string is null (Delta protocol,
    "Partition Value Serialization").
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"unsupported partition value {value!r}")


def hive_directory(partition_by: Sequence[str], values: Mapping[str, str | None]) -> str:
    """The relative directory of a partition: ``col=value/...`` (empty when unpartitioned)."""
    parts = []
    for col in partition_by:
        value = values[col]
        parts.append(
            f"{escape_path_name(col)}={HIVE_NULL if value is None else escape_path_name(value)}"
        )
    return "/".join(parts)


def normalize_location(location: str) -> str:
    """An absolute local path (also for ``file:`` URIs), or the URI when it has another scheme."""
    if location.startswith("file:"):
        return os.path.normpath(unquote(urlparse(location).path))
    if _has_scheme(location):
        return location.rstrip("/")
    return os.path.abspath(location)


def _has_scheme(path: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) is not None


def open_table(location: str, *, version: int | None = None, operation: str = "read") -> DeltaTable:
    """Load the table at ``version`` (latest when None); errors become DeltaIOError."""
    try:
        return DeltaTable(location, version=version)
    except TableNotFoundError as exc:
        raise DeltaIOError(
            table=location, operation=operation, reason=f"no Delta table there ({exc})"
        ) from exc
    except DeltaError as exc:
        at = f" at version {version}" if version is not None else ""
        raise DeltaIOError(table=location, operation=operation, reason=f"{exc}{at}") from exc


def check_supported(table: DeltaTable, location: str) -> None:
    """Raise UnsupportedTableFeatureError when the table uses features we cannot read."""
    protocol = table.protocol()
    unsupported: list[str] = []
    if protocol.min_reader_version > _MAX_READER_VERSION:
        unsupported.append(f"minReaderVersion {protocol.min_reader_version}")
    unsupported += sorted(set(protocol.reader_features or ()) - SUPPORTED_READER_FEATURES)
    mapping = table.metadata().configuration.get("delta.columnMapping.mode")
    if mapping not in (None, "none") and "columnMapping" not in unsupported:
        unsupported.append(f"columnMapping (mode {mapping})")
    if unsupported:
        raise UnsupportedTableFeatureError(location, unsupported)


def table_version(location: str) -> int | None:
    """The latest Delta version at ``location``; None when there is no Delta table."""
    location = normalize_location(location)
    if not DeltaTable.is_deltatable(location):
        return None
    return open_table(location).version()


@dataclass(frozen=True)
class ActiveFile:
    """A data file of one table version, as the log describes it."""

    path: str
    """Relative to the table root and decoded (as on storage), or an absolute URI."""
    size: int
    partition_values: Mapping[str, Any]
    """Typed partition values (None for null)."""
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]


def active_files(table: DeltaTable) -> list[ActiveFile]:
    """The files of the loaded version, with typed partition values and min/max stats."""
    actions = pa.table(table.get_add_actions(flatten=False))
    columns = set(actions.column_names)
    rows = actions.select(
        [c for c in ("path", "size_bytes", "partition", "min", "max") if c in columns]
    ).to_pylist()
    # The log stores paths URL-encoded (Delta protocol, "Add File and Remove File").
    return [
        ActiveFile(
            path=unquote(row["path"]),
            size=row["size_bytes"],
            partition_values=row.get("partition") or {},
            min_values=row.get("min") or {},
            max_values=row.get("max") or {},
        )
        for row in rows
    ]


def absolute_path(location: str, path: str) -> str:
    """Where Spark finds a file of the table (``path`` as in :class:`ActiveFile`)."""
    return path if _has_scheme(path) else f"{location}/{path}"


def spark_file_path(uri: str) -> str:
    """A URI Spark reports for a file (URL-encoded) in the form of :func:`absolute_path`."""
    if uri.startswith("file:"):
        return os.path.normpath(unquote(urlparse(uri).path))
    return unquote(uri)


def spark_schema(table: DeltaTable):
    """The table's schema as a Spark StructType (Delta schemas use Spark's JSON form)."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table.schema().to_json()))


def scan(
    spark: SparkSession,
    location: str,
    table: DeltaTable,
    files: Sequence[ActiveFile],
    *,
    with_file_path: bool = False,
) -> DataFrame:
    """A DataFrame over ``files`` with the table's schema (names, types, order).

    With ``with_file_path`` a trailing string column :data:`FILE_PATH_COLUMN` holds the
    URI Spark read each row from.
    """
    from pyspark.sql import functions as F

    schema = spark_schema(table)
    names = [f.name for f in schema.fields]
    partition_by = list(table.metadata().partition_columns)
    output = [F.col(f"`{n}`") for n in names]
    if with_file_path:
        output.append(F.col("_metadata.file_path").alias(FILE_PATH_COLUMN))
    if not files:
        from pyspark.sql.types import StringType, StructField, StructType

        fields = list(schema.fields)
        if with_file_path:
            fields.append(StructField(FILE_PATH_COLUMN, StringType()))
        return spark.createDataFrame([], StructType(fields))
    paths = [absolute_path(location, f.path) for f in files]
    if not partition_by:
        frame = _read_parquet(spark, location, schema, paths, recursiveFileLookup="true")
        return frame.select(*output)
    if _follows_hive_layout(schema, partition_by, files):
        # One scan; Spark parses the partition directories and casts them to the types of
        # the given schema (no type inference: "007" stays the string "007").
        frame = _read_parquet(spark, location, schema, paths, basePath=location)
        return frame.select(*output)
    # Files outside the Hive layout: one scan per partition, values from the log.
    data_schema = type(schema)([f for f in schema.fields if f.name not in partition_by])
    types = {f.name: f.dataType for f in schema.fields}
    groups: dict[tuple, list[str]] = {}
    for file, path in zip(files, paths, strict=True):
        key = tuple(file.partition_values.get(c) for c in partition_by)
        groups.setdefault(key, []).append(path)
    frames = []
    for key, group in groups.items():
        frame = _read_parquet(spark, location, data_schema, group, recursiveFileLookup="true")
        for col, value in zip(partition_by, key, strict=True):
            frame = frame.withColumn(col, F.lit(value).cast(types[col]))
        frames.append(frame.select(*output))
    return reduce(lambda a, b: a.unionAll(b), frames)


def _read_parquet(
    spark: SparkSession, location: str, schema, paths: Sequence[str], **options: str
) -> DataFrame:
    from pyspark.errors import AnalysisException

    try:
        return spark.read.schema(schema).options(**options).parquet(*paths)
    except AnalysisException as exc:
        # Typically a file the log lists is gone (removed by hand, or vacuumed too early).
        raise DeltaIOError(table=location, operation="read", reason=str(exc)) from exc


def _follows_hive_layout(schema, partition_by: Sequence[str], files: Sequence[ActiveFile]) -> bool:
    types = {f.name: f.dataType.typeName() for f in schema.fields}
    if any(types[c] not in _HIVE_TYPES for c in partition_by):
        return False
    for file in files:
        if _has_scheme(file.path):
            return False
        values = {c: serialize_partition_value(file.partition_values.get(c)) for c in partition_by}
        if os.path.dirname(file.path) != hive_directory(partition_by, values):
            return False
    return True


def read_table(spark: SparkSession, location: str, *, version: int | None = None) -> DataFrame:
    """The table at ``version`` (latest when None) as a Spark DataFrame.

    The schema is exactly the Delta metadata's (names, types, order); columns read from
    Parquet are nullable. A version without files gives an empty DataFrame of that schema.
    """
    location = normalize_location(location)
    table = open_table(location, version=version)
    check_supported(table, location)
    return scan(spark, location, table, active_files(table))


def read_epochs(
    spark: SparkSession, location: str, *, version: int, first_epoch: int, last_epoch: int
) -> DataFrame:
    """Rows of the table at ``version`` whose ``_epoch`` is in [first_epoch, last_epoch].

    Only files whose ``_epoch`` partition value or min/max statistics overlap the range
    are opened (files without statistics are always opened).
    """
    from pyspark.sql import functions as F

    location = normalize_location(location)
    table = open_table(location, version=version)
    check_supported(table, location)
    if EPOCH_COLUMN not in [field.name for field in table.schema().fields]:
        raise DeltaIOError(
            table=location,
            operation="read_epochs",
            reason=f"the table has no {EPOCH_COLUMN!r} column; use read_table",
        )
    files = [
        f for f in active_files(table) if _may_hold_epochs(f, first=first_epoch, last=last_epoch)
    ]
    frame = scan(spark, location, table, files)
    return frame.where(F.col(EPOCH_COLUMN).between(first_epoch, last_epoch))


def _may_hold_epochs(file: ActiveFile, *, first: int, last: int) -> bool:
    if EPOCH_COLUMN in file.partition_values:
        value = file.partition_values[EPOCH_COLUMN]
        return value is not None and first <= value <= last
    # A missing bound (no statistics) cannot rule the file out.
    low = file.min_values.get(EPOCH_COLUMN)
    high = file.max_values.get(EPOCH_COLUMN)
    return (low is None or low <= last) and (high is None or high >= first)


def read_arrow(
    location: str,
    *,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    filter_epochs: tuple[int, int] | None = None,
) -> pa.Table:
    """The table at ``version`` as an Arrow table, read by delta-rs without Spark.

    ``filter_epochs=(first, last)`` keeps rows with ``_epoch`` in [first, last] and opens
    only files that may hold them. For small data (tests, notebooks, lightweight readers).
    """
    location = normalize_location(location)
    table = open_table(location, version=version)
    check_supported(table, location)
    filters = (
        [(EPOCH_COLUMN, ">=", filter_epochs[0]), (EPOCH_COLUMN, "<=", filter_epochs[1])]
        if filter_epochs is not None
        else None
    )
    try:
        return table.to_pyarrow_table(
            columns=list(columns) if columns is not None else None, filters=filters
        )
    except (DeltaError, OSError) as exc:
        raise DeltaIOError(table=location, operation="read_arrow", reason=str(exc)) from exc


def read_pandas(
    location: str,
    *,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    filter_epochs: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """:func:`read_arrow` as a pandas DataFrame."""
    return read_arrow(
        location, version=version, columns=columns, filter_epochs=filter_epochs
    ).to_pandas()


def history(table: DeltaTable, location: str, *, limit: int | None = None) -> list[dict]:
    """commitInfo of the newest ``limit`` commits (all when None), newest first."""
    try:
        return table.history(limit)
    except DeltaError as exc:
        raise DeltaIOError(table=location, operation="history", reason=str(exc)) from exc


def find_commit(table: DeltaTable, location: str, match: Mapping[str, object]) -> int | None:
    """The newest version whose commitInfo has all of ``match``; None when none has."""

    def matches(entry: Mapping[str, object]) -> bool:
        return all(entry.get(k) == v for k, v in match.items())

    def newest_match(entries: list[dict]) -> int | None:
        return next((int(e["version"]) for e in entries if matches(e)), None)

    # The commit sought is nearly always among the newest few; read the rest only if not.
    recent = history(table, location, limit=_RECENT_COMMITS)
    found = newest_match(recent)
    if found is None and len(recent) == _RECENT_COMMITS:
        found = newest_match(history(table, location))
    return found


def log_commits(location: str, *, after_version: int | None = None) -> list[LogCommit]:
    """The commits after ``after_version`` (all when None), oldest first, as recovery sees them.

    Epoch, job and attempt come from Delta Barrier's commit metadata (None for commits
    other writers made). ``restored_to`` is the version a RESTORE restored, or
    ``BEFORE_FIRST_VERSION`` for a rollback that emptied the table. No table yet: no commits.
    """
    location = normalize_location(location)
    if not DeltaTable.is_deltatable(location):
        return []
    table = open_table(location, operation="log_commits")
    commits = [
        _log_commit(entry)
        for entry in history(table, location)
        if after_version is None or int(entry["version"]) > after_version
    ]
    return sorted(commits, key=lambda c: c.version)


def _log_commit(entry: Mapping[str, Any]) -> LogCommit:
    operation = str(entry.get("operation", ""))
    restored_to = _as_int(entry.get(META_RESTORED_TO))
    if operation == "RESTORE":
        restored_to = _as_int((entry.get("operationParameters") or {}).get("version"))
    return LogCommit(
        version=int(entry["version"]),
        operation=operation,
        epoch=_as_int(entry.get(META_EPOCH)),
        first_epoch=_as_int(entry.get(META_FIRST_EPOCH)),
        job=None if entry.get(META_JOB) is None else str(entry[META_JOB]),
        attempt=_as_int(entry.get(META_ATTEMPT)),
        final=entry.get(META_FINAL) in (True, "true", "True", 1, "1"),
        restored_to=restored_to,
    )


def _as_int(value: object) -> int | None:
    """Metadata values are JSON: ints, or strings when another writer stringified them."""
    if value is None or value == "":
        return None
    return int(str(value))


__all__ = [
    "EPOCH_COLUMN",
    "SUPPORTED_READER_FEATURES",
    "log_commits",
    "read_arrow",
    "read_epochs",
    "read_pandas",
    "read_table",
    "table_version",
]
