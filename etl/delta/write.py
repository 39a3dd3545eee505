"""Writing Delta tables: Parquet files from Spark tasks (or, for small outputs, from the
driver), committed by the driver.

Spark's Parquet writer writes the rows (Hive-style partition directories; partition columns
are not stored in the files, as the Delta protocol says). The driver reads only the files'
footers, for a small descriptor per file: path, size, partition values, row count and
Delta statistics, and commits the files to the Delta log through delta-rs, fenced by the
job's lease generation (:class:`Fence`). An output estimated at most
:data:`SMALL_OUTPUT_BYTES` with at most :data:`SMALL_OUTPUT_ROWS` rows is collected as Arrow
in one Spark job instead and written by pyarrow in the driver, in the same layout: a Spark
write costs several times more fixed driver work than a collect (commit protocol, staging,
listing).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from consistency.models import (
    BEFORE_FIRST_VERSION,
    META_COMMIT_ID,
    META_EPOCH,
    META_GENERATION,
    META_JOB,
    META_RESTORED_TO,
)
from etl.delta.dv import DeletionVector
from etl.delta.layout import (
    PARTITION_TYPES,
    filesystem,
    hive_directory,
    log_path,
    normalize_location,
    serialize_partition_value,
    spark_location,
    written_partition_values,
)
from etl.delta.log import (
    ActiveFile,
    active_files,
    check_supported,
    has_deletion_vectors,
    history,
    loaded_table,
    open_table,
    table_exists,
)
from etl.delta.logfile import (
    CHECKPOINT_INTERVAL,
    DELETION_VECTORS,
    active_adds,
    app_transactions,
    commit_actions,
    deletion_vector,
)
from etl.errors import (
    CommitConflictError,
    DeltaIOError,
    FencedError,
    InvalidWriteOptionError,
    SchemaMismatchError,
    UnclaimedTableError,
)
from etl.faults import maybe_crash
from etl.storage import spark_io, storage_options

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Delta-Spark's default prefix length for string statistics (dataSkippingStringPrefixLength).
_STRING_STATS_PREFIX = 32
# Spark writes a batch's files here (one directory per batch) before they are moved into
# the table: a leading underscore hides it from Delta readers and from Spark's listing.
STAGING_PREFIX = "_delta_barrier_staging-"
# Footer reads and moves are I/O: on object storage each is a round trip.
_PLACING_THREADS = 8
_FILE_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+$")

SMALL_OUTPUT_ROWS = 100_000
"""Outputs of at most this many rows are collected to the driver and written by pyarrow
(:func:`write_files`' ``collect_rows``): the bound on the rows a write holds in driver
memory. Larger outputs are written by Spark tasks."""
SMALL_OUTPUT_BYTES = 8 * 1024 * 1024
"""Only outputs whose size Spark's optimizer estimates (from the sizes of its inputs) at
most this many bytes are tried for collecting (:func:`write_files`' ``collect_bytes``):
collecting an output that turns out too big costs a Spark job for nothing."""

CommitMode = Literal["append", "overwrite"]
"""How a commit treats the table's current files: keep them, or remove every one."""


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


@dataclass(frozen=True)
class DeletedRows:
    """Rows a commit deletes from a committed data file: the file's new deletion vector
    (the rows it deleted before and the new ones), replacing the one it had when the
    commit was planned (Delta protocol, "Deletion Vectors")."""

    path: str
    """Relative to the table root, decoded (as :class:`~etl.delta.log.ActiveFile`)."""
    old: DeletionVector | None
    new: DeletionVector


# -- writing files: Spark's Parquet writer, then statistics from the footers -----------------


def _timestamp_text(micros: int, *, utc: bool) -> str:
    text = (datetime(1970, 1, 1) + timedelta(microseconds=micros)).isoformat(
        timespec="microseconds"
    )
    return text + "Z" if utc else text


def string_upper_bound(value: str) -> str | None:
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


def _json(value: object) -> str:
    """JSON that keeps decimals exact (json.dumps would need floats)."""
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, allow_nan=False)


def _has_bounds(arrow_type: pa.DataType) -> bool:
    # Floats get no bounds: a NaN has no place in an order, and Parquet writers differ in
    # whether their min/max skip NaNs, so bounds read from a footer could exclude a NaN row.
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_timestamp(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )


def _column_bounds(
    arrow_type: pa.DataType, chunks: Sequence[pq.ColumnChunkMetaData]
) -> tuple[Any, Any]:
    """(min, max) of one column over a file's row groups in Delta's JSON form, or
    (None, None) where the footer cannot give a bound that holds for every row."""
    stats = [chunk.statistics for chunk in chunks]
    if not _has_bounds(arrow_type) or any(s is None for s in stats):
        return None, None
    valued = [s for s in stats if s.num_values > 0]
    if not valued or not all(s.has_min_max for s in valued):
        return None, None
    if pa.types.is_timestamp(arrow_type):
        if chunks[0].physical_type != "INT64":
            return None, None  # INT96 timestamps: no usable order in the footer
        utc = arrow_type.tz is not None
        return (
            _timestamp_text(min(s.min_raw for s in valued), utc=utc),
            _timestamp_text(max(s.max_raw for s in valued), utc=utc),
        )
    low, high = min(s.min for s in valued), max(s.max for s in valued)
    if pa.types.is_date(arrow_type):
        return low.isoformat(), high.isoformat()
    if isinstance(low, str):
        return low[:_STRING_STATS_PREFIX], (
            string_upper_bound(high) if len(high) > _STRING_STATS_PREFIX else high
        )
    return low, high


def file_statistics(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """Delta per-file statistics (protocol, "Per-file Statistics") of the top-level
    primitive columns, from a Parquet footer; nested columns get none."""
    positions = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    low: dict[str, object] = {}
    high: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for field in schema:
        position = positions.get(field.name)
        if position is None or pa.types.is_nested(field.type):
            continue
        chunks = [metadata.row_group(g).column(position) for g in range(metadata.num_row_groups)]
        if all(c.statistics is not None and c.statistics.has_null_count for c in chunks):
            nulls[field.name] = sum(c.statistics.null_count for c in chunks)
        lo, hi = _column_bounds(field.type, chunks)
        if lo is not None:
            low[field.name] = lo
        if hi is not None:
            high[field.name] = hi
    return _json(
        {"numRecords": metadata.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}
    )


@dataclass(frozen=True)
class _StagedFile:
    """A file Spark committed to the staging directory (its path on the staging file
    system), and where it goes in the table."""

    staged: str
    target: str
    partition_values: Mapping[str, str | None]


def _place(
    staging_fs: pafs.FileSystem,
    table: tuple[pafs.FileSystem, str],
    file: _StagedFile,
    schema: pa.Schema,
) -> DataFile | None:
    """Move one staged file into the table directory (``table``: its file system and
    root), or copy it there from another file system; None (nothing placed) when empty."""
    fs, root = table
    metadata = pq.read_metadata(file.staged, filesystem=staging_fs)
    if metadata.num_rows == 0:
        staging_fs.delete_file(file.staged)
        return None
    target = f"{root}/{file.target}"
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    if staging_fs is fs:
        fs.move(file.staged, target)
    else:
        pafs.copy_files(
            file.staged, target, source_filesystem=staging_fs, destination_filesystem=fs
        )
    return DataFile(
        path=file.target,
        size=fs.get_file_info(target).size,
        partition_values=dict(file.partition_values),
        rows=metadata.num_rows,
        stats=file_statistics(metadata, schema),
        modification_time=int(time.time() * 1000),
    )


def write_files(
    df: DataFrame,
    location: str,
    *,
    partition_by: Sequence[str] = (),
    file_prefix: str,
    collect_rows: int = SMALL_OUTPUT_ROWS,
    collect_bytes: int = SMALL_OUTPUT_BYTES,
) -> list[DataFile]:
    """Write ``df`` as Parquet files into the table directory.

    Returns the descriptors of the files, not yet committed (see :func:`commit_files`):
    ``[col=value/...]/part-<file_prefix>-<uuid>.parquet``, with their row count and Delta
    statistics (numRecords, and minValues, maxValues, nullCount of top-level primitive
    columns) read from each file's footer. Partition columns are not stored in the files,
    as the Delta protocol says; timestamps are microseconds.

    When Spark's optimizer estimates ``df`` at most ``collect_bytes`` and ``df`` has at
    most ``collect_rows`` rows (:data:`SMALL_OUTPUT_BYTES`, :data:`SMALL_OUTPUT_ROWS` by
    default; 0 never collects), it is collected as Arrow by one Spark job that stops at
    ``collect_rows + 1`` rows, and written by :func:`write_arrow`. Otherwise ``df`` is
    computed (again) and Spark's own Parquet writer writes it into a private staging
    directory of the table (Spark's commit protocol: only files of successful task attempts
    survive), from which the driver moves the files into place; no data row reaches the
    driver then. Where Spark's Hadoop cannot reach the table's store (an object store
    without S3A, :func:`etl.storage.spark_io`), a local Spark stages the files on this
    machine's disk and the driver copies them to the store; on a cluster, Spark tasks
    write them through Arrow's file system for the store.

    Partition columns must be strings, integers, booleans or dates; an empty string
    partition value is stored as null (Delta protocol, "Partition Value Serialization").
    """
    location = normalize_location(location)
    partition_by = tuple(partition_by)
    _check_write_options(df, location, partition_by=partition_by, file_prefix=file_prefix)
    if collect_rows > 0 and estimated_bytes(df) <= collect_bytes:
        rows = collect_small(df, collect_rows)
        if rows is not None:
            return write_arrow(rows, location, partition_by=partition_by, file_prefix=file_prefix)
    fs, root = filesystem(location)
    staging = f"{STAGING_PREFIX}{file_prefix}-{uuid.uuid4().hex}"
    if spark_io(df.sparkSession, location) == "hadoop":
        return _write_staged(
            df,
            _Staging(spark_dir=f"{location}/{staging}", fs=fs, directory=f"{root}/{staging}"),
            (fs, root),
            partition_by=partition_by,
            file_prefix=file_prefix,
        )
    if not (df.sparkSession.sparkContext.master or "").startswith("local"):
        return _write_in_tasks(df, location, partition_by=partition_by, file_prefix=file_prefix)
    # Local Spark: its tasks run in this process's JVM, so they stage the files on this
    # machine's disk with Spark's own writer; the driver copies them to the store.
    with tempfile.TemporaryDirectory(prefix="delta-barrier-") as here:
        directory = f"{here}/{staging}"
        return _write_staged(
            df,
            _Staging(spark_dir=directory, fs=pafs.LocalFileSystem(), directory=directory),
            (fs, root),
            partition_by=partition_by,
            file_prefix=file_prefix,
        )


@dataclass(frozen=True)
class _Staging:
    """Where Spark's writer stages a write: the directory as Spark names it, and as the
    file system holding it does."""

    spark_dir: str
    fs: pafs.FileSystem
    directory: str


def _write_staged(
    df: DataFrame,
    staging: _Staging,
    table: tuple[pafs.FileSystem, str],
    *,
    partition_by: tuple[str, ...],
    file_prefix: str,
) -> list[DataFile]:
    """``df`` written by Spark's own Parquet writer into ``staging`` (Spark's commit
    protocol keeps only the files of successful task attempts), then placed into the
    table by the driver (moved, or copied from another file system); no data row reaches
    the driver."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema, timezone="UTC")
    # Delta's `timestamp` is microseconds; Spark would otherwise write INT96.
    df.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        df.write.partitionBy(*partition_by).parquet(
            spark_location(staging.spark_dir), compression="snappy"
        )
        staged = []
        for info in staging.fs.get_file_info(pafs.FileSelector(staging.directory, recursive=True)):
            relative = info.path[len(staging.directory) + 1 :]
            *directories, name = relative.split("/")
            if not info.is_file or not name.endswith(".parquet") or name.startswith((".", "_")):
                continue
            values = written_partition_values(directories, partition_by)
            staged.append(
                _StagedFile(
                    staged=info.path,
                    target=_file_path(partition_by, values, file_prefix),
                    partition_values=values,
                )
            )
        with ThreadPoolExecutor(max_workers=_PLACING_THREADS) as pool:
            placed = list(pool.map(lambda f: _place(staging.fs, table, f, schema), staged))
    finally:
        with contextlib.suppress(OSError):
            staging.fs.delete_dir(staging.directory)
    return sorted((f for f in placed if f is not None), key=lambda f: f.path)


_WRITTEN_FILE = (
    "path string, size long, partition_values string, rows long, stats string, "
    "modification_time long"
)


def _write_in_tasks(
    df: DataFrame, location: str, *, partition_by: Sequence[str], file_prefix: str
) -> list[DataFile]:
    """``df`` written by Spark tasks through Arrow's file system for the location (where
    Spark's Hadoop has none for its scheme): each task writes its rows as one file per
    partition value straight into place, as :func:`write_arrow` lays them out, and hands
    the driver only their descriptors. A failed task attempt's files are never committed
    (orphans, removed by ``etl maintain``)."""

    def write(batches):
        batches = [batch for batch in batches if batch.num_rows]
        if not batches:
            return
        rows = pa.Table.from_batches(batches)
        files = write_arrow(rows, location, partition_by=partition_by, file_prefix=file_prefix)
        yield pa.RecordBatch.from_pylist(
            [
                {
                    "path": f.path,
                    "size": f.size,
                    "partition_values": json.dumps(dict(f.partition_values)),
                    "rows": f.rows,
                    "stats": f.stats,
                    "modification_time": f.modification_time,
                }
                for f in files
            ]
        )

    written = [
        DataFile(
            path=row["path"],
            size=row["size"],
            partition_values=json.loads(row["partition_values"]),
            rows=row["rows"],
            stats=row["stats"],
            modification_time=row["modification_time"],
        )
        for row in df.mapInArrow(write, _WRITTEN_FILE).collect()
    ]
    return sorted(written, key=lambda f: f.path)


def _file_path(
    partition_by: Sequence[str], values: Mapping[str, str | None], file_prefix: str
) -> str:
    directory = hive_directory(partition_by, values)
    name = f"part-{file_prefix}-{uuid.uuid4()}.parquet"
    return f"{directory}/{name}" if directory else name


def write_data_file(
    fs: pafs.FileSystem,
    root: str,
    rows: pa.Table,
    *,
    partition_by: Sequence[str],
    values: Mapping[str, str | None],
    prefix: str,
) -> DataFile:
    """Write ``rows`` of one partition (``values``) from the driver as one Parquet file of
    the table at ``root``, as Spark's writer would lay it out: ``part-<prefix>-<uuid>``
    under its Hive directory, without the partition columns (Delta protocol), every column
    optional, timestamps in microseconds, statistics from the written footer."""
    # Spark writes every column as optional; so do we, whatever the rows' nullability.
    stored = pa.schema(
        [field.with_nullable(True) for field in rows.schema if field.name not in partition_by]
    )
    path = _file_path(partition_by, values, prefix)
    sink = pa.BufferOutputStream()
    pq.write_table(
        rows.select(stored.names).cast(stored),
        sink,
        compression="snappy",
        coerce_timestamps="us",
        store_decimal_as_integer=True,  # as Spark does for precisions up to 18
    )
    data = sink.getvalue()
    metadata = pq.read_metadata(pa.BufferReader(data))
    target = f"{root}/{path}"
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(target) as out:
        out.write(data)
    return DataFile(
        path=path,
        size=data.size,
        partition_values=dict(values),
        rows=metadata.num_rows,
        stats=file_statistics(metadata, stored),
        modification_time=int(time.time() * 1000),
    )


def estimated_bytes(df: DataFrame) -> int:
    """Spark's estimate of ``df``'s size (optimizer statistics: planning, no Spark job)."""
    # A Scala BigInt: py4j hands over a Python int or an object whose str is the number.
    return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))


def collect_small(df: DataFrame, max_rows: int) -> pa.Table | None:
    """``df`` as an Arrow table (timestamps in UTC) if it has at most ``max_rows`` rows,
    else None; one Spark job, which holds at most ``max_rows + 1`` rows in the driver."""
    rows = df.limit(max_rows + 1).toArrow()
    return rows if rows.num_rows <= max_rows else None


def write_arrow(
    rows: pa.Table, location: str, *, partition_by: Sequence[str] = (), file_prefix: str
) -> list[DataFile]:
    """Write ``rows`` from the driver as one Parquet file per partition, laid out, named
    and described as :func:`write_files` does; nothing for no rows."""
    location = normalize_location(location)
    partition_by = tuple(partition_by)
    fs, root = filesystem(location)
    groups: list[tuple[dict[str, str | None], pa.Table]] = []
    if not partition_by:
        groups.append(({}, rows))
    else:
        index = "__delta_barrier_row"
        numbered = rows.select(list(partition_by)).append_column(
            index, pa.array(range(rows.num_rows), pa.int64())
        )
        for group in numbered.group_by(list(partition_by)).aggregate([(index, "list")]).to_pylist():
            values = {c: serialize_partition_value(group[c]) for c in partition_by}
            groups.append((values, rows.take(group[f"{index}_list"])))
    written = [
        write_data_file(
            fs, root, part, partition_by=partition_by, values=values, prefix=file_prefix
        )
        for values, part in groups
        if part.num_rows
    ]
    return sorted(written, key=lambda f: f.path)


def remove_staging(location: str) -> int:
    """Delete staging directories a crashed write left in the table; returns how many.

    Call only while holding the table's writer lease: a live write's staging is removed too.
    Vacuum would never do it, since it leaves directories starting with an underscore alone.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    try:
        entries = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError:
        return 0
    stale = [
        e.path
        for e in entries
        if e.type == pafs.FileType.Directory and e.base_name.startswith(STAGING_PREFIX)
    ]
    for path in stale:
        fs.delete_dir(path)
    return len(stale)


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
        if types[column] not in PARTITION_TYPES:
            raise InvalidWriteOptionError(
                table=location,
                option="partition_by",
                reason=f"column {column!r} has type {types[column]}; partition columns must "
                f"be one of {sorted(PARTITION_TYPES)}",
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


def added_columns(table: DeltaTable, location: str, schema: pa.Schema) -> list[pa.Field]:
    """The columns of rows of ``schema`` that the table does not have yet, as nullable
    fields: the schema change Delta makes in place (the commit that brings them adds them
    to the table's schema; versions before it keep theirs, and their files read the new
    columns as null). Any other difference (a column the rows lack, a changed type) is
    SchemaMismatchError, naming it."""
    expected = _column_types(table.schema().to_json())
    got = _column_types(Schema.from_arrow(schema).to_json())
    if any(got.get(column) != kind for column, kind in expected.items()):
        raise SchemaMismatchError(location, expected, got)
    return [schema.field(column).with_nullable(True) for column in got if column not in expected]


def _evolved_metadata(table: DeltaTable, added: Sequence[pa.Field]) -> dict:
    """The metaData action of ``table`` with ``added`` appended to its schema (Delta
    protocol, "Change Metadata": a new nullable column needs no other action)."""
    schema = json.loads(table.schema().to_json())
    schema["fields"] += json.loads(Schema.from_arrow(pa.schema(added)).to_json())["fields"]
    return _metadata_action(table, schema)


def _metadata_action(table: DeltaTable, schema: Mapping[str, Any]) -> dict:
    """The metaData action of ``table`` with ``schema`` (a Delta schema as JSON)."""
    metadata = table.metadata()
    return {
        "metaData": {
            "id": metadata.id,
            "name": metadata.name,
            "description": metadata.description,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema),
            "partitionColumns": list(metadata.partition_columns),
            "configuration": dict(metadata.configuration),
            "createdTime": metadata.created_time,
        }
    }


def _remove_actions(
    table: DeltaTable,
    location: str,
    removes: Sequence[DataFile | ActiveFile | str],
    *,
    data_change: bool,
) -> list[RemoveAction]:
    current = {f.path: f for f in active_files(table)}
    paths = [_path_of(remove) for remove in removes]
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
            data_change,
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


def _add_action(file: DataFile, *, data_change: bool) -> AddAction:
    # delta-rs URL-encodes the path when it writes the log.
    return AddAction(
        path=file.path,
        size=file.size,
        partition_values=dict(file.partition_values),
        modification_time=file.modification_time,
        data_change=data_change,
        stats=file.stats,
    )


FENCE_APP_PREFIX = "delta-barrier-fence/"
# Commits that lose the race for the next version re-check their preconditions and try
# again after a random pause that grows with every loss (so that no writer starves);
# past this many losses in a row something else writes the table without pause.
_MAX_COMMIT_ROUNDS = 40
_BACKOFF_CAP_SECONDS = 0.25


def _back_off(lost: int) -> None:
    time.sleep(random.uniform(0, min(_BACKOFF_CAP_SECONDS, 0.002 * 2**lost)))


@dataclass(frozen=True)
class Fence:
    """A job's claim on the tables it writes: its lease generation, kept in each table's log.

    The claim is the Delta app transaction ``(delta-barrier-fence/<job>, generation)``
    (Delta protocol, "Transaction Identifiers": the latest version per app id survives
    every later commit, RESTOREs and checkpoints included). Every commit and RESTORE of the
    job carries it and is applied only to a version that records exactly its generation,
    as exactly the next version (delta-rs writes the log entry put-if-absent; no retry is
    rebased on top of another writer's commit). A runner whose lease was taken over can
    therefore never change the table again once the new owner claimed it; and the new
    owner never writes on top of a table it neither created nor claimed (one a superseded
    runner created after the takeover, when there was no table to claim yet): creating a
    table is a put-if-absent of its first log entry, so exactly one of them creates it and
    the other's next commit is refused.
    """

    job: str
    generation: int

    @property
    def app_id(self) -> str:
        return FENCE_APP_PREFIX + self.job

    def transaction(self) -> Transaction:
        return Transaction(self.app_id, self.generation)

    def check(self, table: DeltaTable, location: str) -> None:
        """Raise FencedError if ``table`` (one loaded version) records a newer generation."""
        recorded = self.recorded(table, location)
        if recorded is not None and recorded > self.generation:
            raise FencedError(
                table=location, job=self.job, generation=self.generation, fenced_at=recorded
            )

    def recorded(self, table: DeltaTable, location: str) -> int | None:
        """The generation ``table`` (one loaded version of ``location``) records, if any."""
        return app_transactions(location, table.version()).get(self.app_id)

    def require_claimed(self, table: DeltaTable, location: str) -> None:
        """Raise unless ``table`` (one loaded version) records exactly this generation: a
        newer one is FencedError; an older one, or none, UnclaimedTableError. A runner
        commits only to a table it created or claimed, so a table that another runner of
        the job created or wrote after this one planned is never written on top of."""
        self.check(table, location)
        recorded = self.recorded(table, location)
        if recorded != self.generation:
            raise UnclaimedTableError(
                table=location, job=self.job, generation=self.generation, recorded=recorded
            )


# Checkpoints are ours (:func:`_committed`), on every commit path, delta-rs' and our own log
# writer's alike. Log entries are deleted only by ``etl maintain``, which keeps every version
# a kept cut needs; delta-rs would otherwise delete them by the table's
# logRetentionDuration.
_POST_COMMIT = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def _committed(location: str, version: int) -> int:
    """Checkpoint ``version`` when it is due (every :data:`CHECKPOINT_INTERVAL` versions);
    returns ``version``. Opening a table replays the JSON commits after its newest
    checkpoint, and a job commits once per epoch: without checkpoints that often, every
    open of a busy table grows slower with its history."""
    if version > 0 and version % CHECKPOINT_INTERVAL == 0:
        try:
            with loaded_table(location, version=version, operation="checkpoint") as table:
                table.create_checkpoint()
        except (DeltaIOError, DeltaError) as exc:  # an optimization: the commit stands
            _log.warning("no checkpoint at version %s of %s: %s", version, location, exc)
    return version


def _properties(fence: Fence, custom: Mapping[str, Any]) -> CommitProperties:
    return CommitProperties(
        custom_metadata={**custom, META_JOB: fence.job, META_GENERATION: fence.generation},
        max_commit_retries=0,
        app_transactions=[fence.transaction()],
    )


def _landed(location: str, after: int, commit_id: str) -> int | None:
    """The version after ``after`` that holds the commit ``commit_id``, if it landed."""
    with loaded_table(location, operation="commit") as table:
        newer = table.version() - after
        if newer <= 0:
            return None
        entries = history(table, location, limit=newer)
    return next((int(e["version"]) for e in entries if e.get(META_COMMIT_ID) == commit_id), None)


def claim_table(location: str, *, fence: Fence) -> int | None:
    """Make ``location`` refuse every older generation of ``fence.job``; returns its version.

    Commits nothing when the table already records this generation; None when the table
    does not exist yet (its first commit will carry the fence). FencedError when a newer
    generation claimed it first.
    """
    location = normalize_location(location)
    for lost in range(_MAX_COMMIT_ROUNDS):
        if not table_exists(location):
            return None
        with loaded_table(location, operation="claim") as table:
            check_supported(table, location)
            fence.check(table, location)
            if fence.recorded(table, location) == fence.generation:
                return table.version()
            try:
                table.create_write_transaction(
                    [],
                    mode="append",
                    schema=table.schema(),
                    partition_by=list(table.metadata().partition_columns) or None,
                    commit_properties=_properties(fence, {}),
                    post_commithook_properties=_POST_COMMIT,
                )
            except CommitFailedError:
                claimed = None
            except DeltaError as exc:
                raise DeltaIOError(table=location, operation="claim", reason=str(exc)) from exc
            else:
                claimed = table.version() + 1
        if claimed is None:
            _back_off(lost)
            continue
        return _committed(location, claimed)
    raise CommitConflictError(
        table=location, reason=f"{_MAX_COMMIT_ROUNDS} claims in a row lost the race"
    )


def commit_files(
    location: str,
    files: Sequence[DataFile],
    *,
    schema: pa.Schema,
    mode: CommitMode,
    fence: Fence,
    metadata: Mapping[str, str | int | bool],
    partition_by: Sequence[str] = (),
    removes: Sequence[DataFile | ActiveFile | str] = (),
    deletes: Sequence[DeletedRows] = (),
    data_change: bool = True,
    deletion_vectors: bool = False,
    replace_schema: bool = False,
) -> int:
    """Commit written files to the Delta log under ``fence``; returns the version holding them.

    The first commit creates the table with ``schema`` and ``partition_by`` (with
    ``deletion_vectors``, with the ``deletionVectors`` table feature: protocol 3/7, and
    ``delta.enableDeletionVectors``). ``overwrite`` removes every current file;
    ``removes`` (paths, DataFiles, or ActiveFiles, whose deletion vector must be
    unchanged too) are removed in the same commit (copy-on-write) and must all still be in
    the version committed on, else CommitConflictError (the caller re-plans from the new
    version). ``deletes`` give files new deletion vectors (a
    merge-on-read merge): each file must still have the DV it was planned on, else
    CommitConflictError. ``metadata`` goes into commitInfo with the job, its generation and
    a commit id. ``replace_schema`` (an ``overwrite`` only): the table's schema becomes
    ``schema`` in the same commit, whatever changed (Delta's overwriteSchema: a changed
    type, a dropped or renamed column), as ``etl recompute`` does to a table it rewrites
    from its first epoch; versions before it keep their schema. ``data_change=False`` marks every add and remove as a rearrangement of
    rows already in the table (compaction; Delta protocol, "Add File and Remove File":
    streaming readers do not read such files again).

    The commit is applied to the latest version V only if V records exactly the fence's
    generation (a newer one: FencedError; an older one or none: UnclaimedTableError, since
    the table was created or written by a runner this one did not take over from: recovery
    must claim it first), and only as version V + 1. A table that another writer creates
    while this commit creates it is refused the same way, never committed on top of. When another writer took V + 1
    first (maintenance, or a new owner's claim), every precondition is checked again on
    the new latest version before trying again; when the outcome of an attempt is unknown
    (an I/O error after writing), the commit id tells whether it landed, so a commit is
    never applied twice. Commits that set a deletion vector or remove a file carrying one
    are written by :func:`etl.delta.logfile.commit_actions` (delta-rs' actions cannot
    carry a DV); the others by delta-rs.
    """
    location = normalize_location(location)
    if mode not in get_args(CommitMode):
        raise InvalidWriteOptionError(
            table=location, option="mode", reason=f"unknown mode {mode!r}"
        )
    if replace_schema and mode != "overwrite":
        raise InvalidWriteOptionError(
            table=location, option="replace_schema", reason="only an overwrite replaces the schema"
        )
    if mode == "overwrite" and (removes or deletes):
        raise InvalidWriteOptionError(
            table=location, option="removes", reason="an overwrite removes every file already"
        )
    commit_id = uuid.uuid4().hex
    custom = {**metadata, META_COMMIT_ID: commit_id}
    properties = _properties(fence, custom)
    adds = [_add_action(f, data_change=data_change) for f in files]
    if not table_exists(location):
        if removes or deletes:
            raise CommitConflictError(
                table=location, reason="there is no table to remove files from"
            )
        try:
            if deletion_vectors:
                _commit_own(
                    location,
                    version=0,
                    actions=_creation_actions(schema, partition_by),
                    files=files,
                    data_change=data_change,
                    fence=fence,
                    custom=custom,
                    operation="CREATE TABLE",
                )
            else:
                create_table_with_add_actions(
                    location,
                    Schema.from_arrow(schema),
                    adds,
                    mode="error",
                    partition_by=list(partition_by) or None,
                    commit_properties=properties,
                    post_commithook_properties=_POST_COMMIT,
                    storage_options=storage_options(location),
                )
            return 0
        except (DeltaError, OSError) as exc:
            if not table_exists(location):
                raise DeltaIOError(table=location, operation="create", reason=str(exc)) from exc
            if _landed(location, -1, commit_id) is not None:
                return 0
            # Created concurrently by another writer: never committed on top of (the loop
            # below refuses a table this generation did not create or claim).
    first_read: int | None = None
    for lost in range(_MAX_COMMIT_ROUNDS):
        with loaded_table(location, operation="commit") as table:
            check_supported(table, location)
            if first_read is not None:
                landed = _landed(location, first_read, commit_id)
                if landed is not None:
                    return landed
            else:
                first_read = table.version()
            fence.require_claimed(table, location)
            replaced = replace_schema and _column_types(table.schema().to_json()) != _column_types(
                Schema.from_arrow(schema).to_json()
            )
            added = [] if replace_schema else added_columns(table, location, schema)
            if list(partition_by) != list(table.metadata().partition_columns):
                raise InvalidWriteOptionError(
                    table=location,
                    option="partition_by",
                    reason=f"{list(partition_by)} differs from the table's partition columns "
                    f"{table.metadata().partition_columns}; Delta cannot repartition a table in "
                    "place: keep its partition columns, or write the new layout to a new table",
                )
            # delta-rs' write transactions carry no metadata change: a commit that adds columns
            # is our own, like one that sets deletion vectors.
            if added or replaced or deletes or (removes and has_deletion_vectors(table)):
                gone = (
                    list(active_adds(location, table.version())) if mode == "overwrite" else removes
                )
                try:
                    _commit_own(
                        location,
                        version=table.version() + 1,
                        actions=[_evolved_metadata(table, added)] * bool(added)
                        + [_metadata_action(table, json.loads(Schema.from_arrow(schema).to_json()))]
                        * replaced
                        + _file_actions(
                            location, table.version(), gone, deletes, data_change=data_change
                        ),
                        files=files,
                        data_change=data_change,
                        fence=fence,
                        custom=custom,
                        operation="MERGE" if deletes else "WRITE",
                    )
                except FileExistsError:
                    _back_off(lost)
                    continue
                except OSError as exc:
                    landed = _landed(location, table.version(), commit_id)
                    if landed is not None:
                        return landed
                    raise DeltaIOError(table=location, operation="commit", reason=str(exc)) from exc
                return _committed(location, table.version() + 1)
            actions: list[AddAction | RemoveAction] = [
                *adds,
                *_remove_actions(table, location, removes, data_change=data_change),
            ]
            try:
                table.create_write_transaction(
                    actions,
                    mode=mode,
                    schema=table.schema(),
                    partition_by=list(partition_by) or None,
                    commit_properties=properties,
                    post_commithook_properties=_POST_COMMIT,
                )
            except CommitFailedError:
                _back_off(lost)
                continue
            except DeltaError as exc:
                landed = _landed(location, table.version(), commit_id)
                if landed is not None:
                    return landed
                raise DeltaIOError(table=location, operation="commit", reason=str(exc)) from exc
            return _committed(location, table.version() + 1)
    raise CommitConflictError(
        table=location, reason=f"{_MAX_COMMIT_ROUNDS} commits in a row lost the race"
    )


# -- own log commits (deletion vectors) ------------------------------------------------------


def _creation_actions(schema: pa.Schema, partition_by: Sequence[str]) -> list[dict]:
    """The protocol and metadata of a new table with deletion vectors (Delta protocol,
    "Deletion Vectors": reader version 3 / writer version 7 with the table feature, and
    ``delta.enableDeletionVectors`` for writers to use them)."""
    features = [DELETION_VECTORS]
    if any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in schema):
        features.append("timestampNtz")  # Delta protocol, "Timestamp without timezone"
    return [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": features,
                "writerFeatures": features,
            }
        },
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": Schema.from_arrow(schema).to_json(),
                "partitionColumns": list(partition_by),
                "configuration": {"delta.enableDeletionVectors": "true"},
                "createdTime": int(time.time() * 1000),
            }
        },
    ]


def _file_actions(
    location: str,
    version: int,
    removes: Sequence[DataFile | ActiveFile | str],
    deletes: Sequence[DeletedRows],
    *,
    data_change: bool,
) -> list[dict]:
    """remove (and re-add) actions on the files of ``version``; CommitConflictError when a
    file is gone or its deletion vector is not the one the commit was planned on."""
    current = active_adds(location, version)
    paths = [_path_of(remove) for remove in removes]
    missing = [path for path in [*paths, *(d.path for d in deletes)] if path not in current]
    # A file read with one deletion vector must not be removed or given a new DV on
    # top of another: the rows deleted meanwhile would come back, or be lost.
    planned = [(d.path, d.old) for d in deletes] + [
        (r.path, r.deletion_vector) for r in removes if isinstance(r, ActiveFile)
    ]
    changed = [
        path
        for path, dv in planned
        if path in current and _dv_id(deletion_vector(current[path])) != _dv_id(dv)
    ]
    if missing or changed:
        # Another commit removed them or deleted rows of them since the caller read the
        # table: committing now would lose that commit's rows or duplicate ours.
        raise CommitConflictError(
            table=location,
            reason=f"files to remove or delete rows of changed since they were read: "
            f"{missing + changed} (current version {version})",
        )
    now = int(time.time() * 1000)
    actions = [_remove_json(current[path], data_change, now) for path in paths]
    for deleted in deletes:
        add = current[deleted.path]
        actions.append(_remove_json(add, True, now))
        # The same file with its new DV; statistics stay those of the physical file.
        actions.append(
            {"add": {**add, "dataChange": True, "deletionVector": deleted.new.to_json()}}
        )
    return actions


def _remove_json(add: Mapping[str, Any], data_change: bool, now: int) -> dict:
    """The remove of the logical file an ``add`` action made: its path and its deletion
    vector, if any (Delta protocol, "Deletion Vectors")."""
    body: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues") or {},
        "size": add.get("size"),
    }
    if add.get("deletionVector"):
        body["deletionVector"] = add["deletionVector"]
    return {"remove": body}


def _restore_actions(location: str, to_version: int, planned_at: int) -> list[dict]:
    """The actions of a RESTORE of ``to_version`` on top of ``planned_at``: remove every
    logical file (path and deletion vector) the target does not have, add back every one
    it has and the current version does not. delta-rs' RESTORE re-adds a file whose
    deletion vector changed since the target without any DV, which brings deleted rows
    back."""
    target = {_logical(a): a for a in active_adds(location, to_version).values()}
    current = {_logical(a): a for a in active_adds(location, planned_at).values()}
    now = int(time.time() * 1000)
    return [_remove_json(a, True, now) for k, a in current.items() if k not in target] + [
        {"add": {**a, "dataChange": True}} for k, a in target.items() if k not in current
    ]


def _logical(add: Mapping[str, Any]) -> tuple[str, str | None]:
    return unquote(add["path"]), _dv_id(deletion_vector(add))


def _path_of(remove: DataFile | ActiveFile | str) -> str:
    return remove if isinstance(remove, str) else remove.path


def _dv_id(dv: DeletionVector | None) -> str | None:
    return None if dv is None else dv.unique_id


def _commit_own(
    location: str,
    *,
    version: int,
    actions: list[dict],
    files: Sequence[DataFile],
    data_change: bool,
    fence: Fence,
    custom: Mapping[str, Any],
    operation: str,
    parameters: Mapping[str, Any] | None = None,
) -> None:
    """Write log entry ``version``: commitInfo (with ``custom`` and the fence's job and
    generation, as :func:`_properties` gives delta-rs), ``actions``, the adds of ``files``
    and the fence's app transaction. FileExistsError: another writer took the version."""
    commit_info = {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operationParameters": dict(parameters or {"mode": "Append"}),
        "clientVersion": "delta-barrier",
        **custom,
        META_JOB: fence.job,
        META_GENERATION: fence.generation,
    }
    adds = [
        {
            "add": {
                "path": log_path(f.path),
                "partitionValues": dict(f.partition_values),
                "size": f.size,
                "modificationTime": f.modification_time,
                "dataChange": data_change,
                "stats": f.stats,
            }
        }
        for f in files
    ]
    # Delta protocol, "Transaction Identifiers"; delta-rs writes it exactly so.
    txn = {"txn": {"appId": fence.app_id, "version": fence.generation}}
    epoch = int(custom.get(META_EPOCH, -1))
    maybe_crash("before_log_commit", job=fence.job, epoch=epoch)
    commit_actions(location, version, [{"commitInfo": commit_info}, *actions, *adds, txn])
    maybe_crash("after_log_commit", job=fence.job, epoch=epoch)


def restore_table(
    location: str,
    *,
    to_version: int | None,
    planned_at: int,
    fence: Fence,
    metadata: Mapping[str, str | int | bool],
) -> int:
    """Roll the table back to ``to_version``'s content; returns the new version.

    ``planned_at`` is the version the rollback was planned from: the RESTORE is applied
    only as the version right after it and only if that version records exactly
    ``fence``'s generation (:meth:`Fence.require_claimed`); if the table moved on meanwhile it raises
    CommitConflictError and the caller plans again. A Delta RESTORE commit, with
    ``metadata`` in its commitInfo. ``to_version=None`` rolls back to empty (before version
    0, which RESTORE cannot reach): an overwrite commit that removes every file, marked
    with ``restored_to = BEFORE_FIRST_VERSION`` for :func:`~etl.delta.log.log_commits`.
    Restoring the current version commits nothing. A RESTORE keeps app transactions. On a
    table with deletion vectors the RESTORE commit is our own (:func:`_restore_actions`):
    delta-rs' would drop the deletion vector of a file whose DV changed since the target.
    """
    location = normalize_location(location)
    table = open_table(location, version=planned_at, operation="restore")
    fence.require_claimed(table, location)
    if to_version == planned_at:
        return planned_at
    if to_version is not None and not 0 <= to_version < planned_at:
        raise DeltaIOError(
            table=location,
            operation="restore",
            reason=f"version {to_version} is not an earlier version (planned at {planned_at})",
        )
    custom: dict[str, Any] = {**metadata, META_COMMIT_ID: uuid.uuid4().hex}
    try:
        if to_version is None:
            custom[META_RESTORED_TO] = BEFORE_FIRST_VERSION
            table.create_write_transaction(
                [],
                mode="overwrite",
                schema=table.schema(),
                partition_by=list(table.metadata().partition_columns) or None,
                commit_properties=_properties(fence, custom),
                post_commithook_properties=_POST_COMMIT,
            )
        elif has_deletion_vectors(table):
            if (
                open_table(location, version=to_version).schema().to_json()
                != table.schema().to_json()
            ):
                raise DeltaIOError(
                    table=location,
                    operation="restore",
                    reason=f"the schema changed since version {to_version}",
                )
            try:
                _commit_own(
                    location,
                    version=planned_at + 1,
                    actions=_restore_actions(location, to_version, planned_at),
                    files=(),
                    data_change=True,
                    fence=fence,
                    custom=custom,
                    operation="RESTORE",
                    parameters={"version": to_version},
                )
            except FileExistsError as exc:
                raise CommitFailedError(str(exc)) from exc
        else:
            table.restore(
                to_version,
                commit_properties=_properties(fence, custom),
                post_commithook_properties=_POST_COMMIT,
            )
    except CommitFailedError as exc:
        raise CommitConflictError(
            table=location,
            reason=f"the table moved past version {planned_at}, which the rollback was "
            "planned from",
        ) from exc
    except (DeltaError, OSError) as exc:
        raise DeltaIOError(table=location, operation="restore", reason=str(exc)) from exc
    return _committed(location, planned_at + 1)


__all__ = [
    "FENCE_APP_PREFIX",
    "SMALL_OUTPUT_BYTES",
    "SMALL_OUTPUT_ROWS",
    "CommitMode",
    "DataFile",
    "DeletedRows",
    "Fence",
    "added_columns",
    "claim_table",
    "collect_small",
    "commit_files",
    "estimated_bytes",
    "remove_staging",
    "string_upper_bound",
    "restore_table",
    "write_arrow",
    "write_data_file",
    "write_files",
]
