"""Writing a Delta table's Parquet files: from Spark tasks (or, for small outputs, from the
driver), not yet committed (:mod:`etl.delta.commit` commits them).

Spark's Parquet writer writes the rows (Hive-style partition directories; partition columns
are not stored in the files, as the Delta protocol says). The driver reads only the files'
footers, for a small descriptor per file (:class:`DataFile`): path, size, partition values,
row count and Delta statistics. An output estimated at most :data:`SMALL_OUTPUT_BYTES` with
at most :data:`SMALL_OUTPUT_ROWS` rows is collected as Arrow in one Spark job instead (none
when Spark's optimizer computed the rows while planning: :mod:`etl.delta.local`) and
written by pyarrow in the driver, in the same layout: a Spark write costs several times more
fixed driver work than a collect (commit protocol, staging, listing).
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from etl.delta.layout import (
    PARTITION_TYPES,
    filesystem,
    hive_directory,
    normalize_location,
    serialize_partition_value,
    spark_location,
    written_partition_values,
)
from etl.delta.local import LOCAL_RELATION, estimated_bytes, local_rows, schema_kept
from etl.errors import InvalidWriteOptionError
from etl.storage import list_directory, spark_io

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

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


# -- statistics from the footers ------------------------------------------------------------


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
    planned: bool = False,
) -> list[DataFile]:
    """Write ``df`` as Parquet files into the table directory.

    Returns the descriptors of the files, not yet committed (see
    :func:`etl.delta.commit.commit_files`):
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
    write them through Arrow's file system for the store. ``planned``: see
    :func:`collect_small`.

    Partition columns must be strings, integers, booleans or dates; an empty string
    partition value is stored as null (Delta protocol, "Partition Value Serialization").
    """
    location = normalize_location(location)
    partition_by = tuple(partition_by)
    check_write_options(df.schema, location, partition_by=partition_by, file_prefix=file_prefix)
    if collect_rows > 0:
        rows = collect_small(df, collect_rows, collect_bytes, planned=planned)
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


WRITTEN_FILE = (
    "path string, size long, partition_values string, rows long, stats string, "
    "modification_time long"
)
"""The Spark schema (DDL) of a :class:`DataFile` as a row: how Spark tasks that write
files hand their descriptors to the driver (:func:`file_record`, :func:`record_file`)."""


def file_record(file: DataFile) -> dict[str, object]:
    """``file`` as a row of :data:`WRITTEN_FILE`."""
    return {
        "path": file.path,
        "size": file.size,
        "partition_values": json.dumps(dict(file.partition_values)),
        "rows": file.rows,
        "stats": file.stats,
        "modification_time": file.modification_time,
    }


def record_file(row: Mapping[str, Any]) -> DataFile:
    """The :class:`DataFile` of a row of :data:`WRITTEN_FILE`."""
    return DataFile(
        path=row["path"],
        size=row["size"],
        partition_values=json.loads(row["partition_values"]),
        rows=row["rows"],
        stats=row["stats"],
        modification_time=row["modification_time"],
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
        yield pa.RecordBatch.from_pylist([file_record(f) for f in files])

    written = [record_file(row.asDict()) for row in df.mapInArrow(write, WRITTEN_FILE).collect()]
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


def collect_small(
    df: DataFrame, max_rows: int, max_bytes: int | None = None, *, planned: bool = False
) -> pa.Table | None:
    """``df`` as an Arrow table (timestamps in UTC) if it has at most ``max_rows`` rows
    and, with ``max_bytes``, Spark's optimizer estimates it at most ``max_bytes``; else
    None. Rows the optimizer computed while planning (a local relation: :func:`local_rows`)
    are taken as they are; otherwise one Spark job, which holds at most ``max_rows + 1``
    rows in the driver. The estimate (planning, no job) is read off the plan the job then
    runs, not a plan of its own.

    ``planned``: the caller expects the optimizer to compute ``df``'s rows (a filter or a
    projection of rows the driver read): ``df``'s own plan is looked at first, without
    the row bound (a ``limit`` is one more analysis of the whole query, about 1.5 ms of
    the driver JVM a batch), and only if it holds no local relation is the bounded one
    planned."""
    if planned:
        plan = df._jdf.queryExecution().optimizedPlan()
        node = plan.nodeName()
        if node == LOCAL_RELATION:
            size = estimated_bytes(plan)
            if max_bytes is not None and size > max_bytes:
                return None
            local = local_rows(df, plan, node=node, estimate=size)
            if local is not None:
                return local if local.num_rows <= max_rows else None
    limited = schema_kept(df.limit(max_rows + 1), df)
    plan = limited._jdf.queryExecution().optimizedPlan()
    node = plan.nodeName()
    estimate = None
    if max_bytes is not None:
        estimate = _estimated_bytes_under_limit(plan, node)
        if estimate > max_bytes:
            return None
    rows = local_rows(limited, plan, node=node, estimate=estimate)
    if rows is None:
        rows = limited.toArrow()
    return rows if rows.num_rows <= max_rows else None


_LIMITS = ("GlobalLimit", "LocalLimit")


def _estimated_bytes_under_limit(plan, node: str) -> int:
    """Spark's estimate of the rows a ``limit`` limits (a limit's own estimate is its row
    bound times a row's width): the optimizer's statistics of the plan below the limit,
    from the optimized ``plan`` of the limited frame (which its action reuses), whose
    top node is ``node``."""
    while node in _LIMITS:
        plan = plan.child()
        node = plan.nodeName()
    return estimated_bytes(plan)


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
        entries = list_directory(fs, root)
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


def check_write_options(
    columns: StructType, location: str, *, partition_by: Sequence[str], file_prefix: str
) -> None:
    """Raise InvalidWriteOptionError when rows of ``columns`` cannot be written as asked: a
    file prefix that is not a safe file name, partition columns missing or of a type Delta
    cannot partition by, or no column left to store in files."""
    if not _FILE_PREFIX.match(file_prefix):
        raise InvalidWriteOptionError(
            table=location,
            option="file_prefix",
            reason=f"{file_prefix!r} must be letters, digits, '_', '.' or '-'",
        )
    types = {f.name: f.dataType.typeName() for f in columns.fields}
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


__all__ = [
    "DataFile",
    "SMALL_OUTPUT_BYTES",
    "SMALL_OUTPUT_ROWS",
    "STAGING_PREFIX",
    "WRITTEN_FILE",
    "check_write_options",
    "collect_small",
    "file_record",
    "file_statistics",
    "record_file",
    "remove_staging",
    "string_upper_bound",
    "write_arrow",
    "write_data_file",
    "write_files",
]
