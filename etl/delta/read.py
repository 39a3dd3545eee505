"""Reading Delta tables: Spark DataFrames, and Arrow/pandas without Spark.

The Delta log says which files make up a version, with their partition values, statistics
and deletion vectors: for Spark reads, our own replay of it
(:func:`etl.delta.logfile.log_snapshot`, whose cost does not grow with the table's files);
for Arrow reads, delta-rs (which reads the rows too). Spark reads the Parquet files
themselves and drops the rows deletion vectors delete. Tables are refused, never misread,
when they use a feature we cannot honour (column mapping, unknown reader features).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING
from urllib.parse import quote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from etl.delta.dv import read_many
from etl.delta.layout import (
    PARTITION_TYPES,
    absolute_path,
    filesystem,
    has_scheme,
    hive_directory,
    normalize_location,
    serialize_partition_value,
)
from etl.delta.local import shared_local_frame
from etl.delta.log import (
    EPOCH_COLUMN,
    ActiveFile,
    TableVersion,
    active_files,
    check_supported,
    has_deletion_vectors,
    loaded_table,
    partition_columns,
    schema_json,
    version_of,
)
from etl.delta.logfile import log_snapshot
from etl.errors import DeltaIOError, FilesRemovedError
from etl.storage import is_local, spark_io

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FILE_PATH_COLUMN = "__delta_barrier_file"
"""The column :func:`scan` adds with ``with_file_path``: the URI Spark read the row from."""
ROW_INDEX_COLUMN = "__delta_barrier_row_index"
"""The column :func:`scan` adds with ``with_row_index``: the row's position in its file."""

DRIVER_READ_BYTES = 512 * 1024
"""A batch's input whose files hold at most this many bytes in all (their sizes in the log)
is read by the driver with pyarrow and given to Spark as a local relation
(:func:`read_epochs_sized`, :func:`read_table_sized`). A Spark read of a few small
files costs more than their rows: it resolves the data source, lists the files, copies
Hadoop's configuration for the read and for each task. Read, filtered and collected, five
narrow columns: 10,000 rows (0.18 MB of files) took 175 ms this way and 285 ms through
Spark's read, 30,000 rows (0.48 MB) 259 and 273 ms, 45,000 rows (0.70 MB) 326 and 226 ms
(bench/RESULTS-issue28.md, session 45). Larger scans are read by Spark tasks; this
bounds the rows a scan holds in the driver."""


def spark_schema(table: TableVersion) -> StructType:
    """The table's schema as a Spark StructType (Delta schemas use Spark's JSON form): one
    object per schema, shared by every read of it (never mutate it)."""
    return _parsed_schema(schema_json(table))


@functools.lru_cache(maxsize=256)
def _parsed_schema(table_schema: str) -> StructType:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table_schema))


def scan(
    spark: SparkSession,
    location: str,
    table: TableVersion,
    files: Sequence[ActiveFile],
    *,
    with_file_path: bool = False,
    with_row_index: bool = False,
    deletion_vectors: bool = True,
    driver_read_bytes: int = 0,
) -> DataFrame:
    """A DataFrame over ``files`` with the table's schema (names, types, order), without
    the rows their deletion vectors delete (with ``deletion_vectors=False``: the files'
    physical rows, for a caller that drops the deleted ones itself).

    With ``with_file_path`` a trailing string column :data:`FILE_PATH_COLUMN` holds the
    URI Spark read each row from; with ``with_row_index``, :data:`ROW_INDEX_COLUMN` its
    position in that file (Spark's ``_metadata.row_index``, the row index of the Delta
    protocol's deletion vectors).

    Files of at most ``driver_read_bytes`` in all (:data:`DRIVER_READ_BYTES` for a batch's
    inputs; without ``with_file_path`` or ``with_row_index``) are read by the driver
    (:func:`_read_in_driver`): Spark does not know which file a row came from then
    (``input_file_name()`` is empty). Otherwise files
    with a deletion vector are read with their row indexes and anti-joined with the
    (file, row index) pairs their DVs delete, broadcast; the other files are read as
    plain Parquet, at no extra cost.
    """
    from pyspark.sql import functions as F

    if (
        files
        and not (with_file_path or with_row_index)
        and sum(f.size for f in files) <= driver_read_bytes
    ):
        return _read_in_driver(spark, location, table, files, deletion_vectors)
    deleting = [f for f in files if f.deletion_vector is not None]
    if not deleting or not deletion_vectors:
        return _scan(spark, location, table, files, with_file_path, with_row_index)
    plain = [f for f in files if f.deletion_vector is None]
    deleted = _deleted_rows(spark, location, deleting)
    read = _scan(spark, location, table, deleting, True, True)
    kept = read.join(
        F.broadcast(deleted),
        (read[FILE_PATH_COLUMN] == deleted[_DELETED_FILE])
        & (read[ROW_INDEX_COLUMN] == deleted[_DELETED_ROW]),
        "left_anti",
    )
    extra = [
        c
        for c, wanted in ((FILE_PATH_COLUMN, with_file_path), (ROW_INDEX_COLUMN, with_row_index))
        if not wanted
    ]
    kept = kept.drop(*extra)
    if not plain:
        return kept
    return _scan(spark, location, table, plain, with_file_path, with_row_index).unionAll(kept)


_DELETED_FILE = "__delta_barrier_deleted_file"
_DELETED_ROW = "__delta_barrier_deleted_row"


def _deleted_rows(spark: SparkSession, location: str, files: Sequence[ActiveFile]) -> DataFrame:
    """(Spark's URI of the file, row index) of every row the files' DVs delete."""
    fs, root = filesystem(location)
    rows = read_many(fs, root, [f.deletion_vector for f in files if f.deletion_vector])
    uris = [spark_file_uri(spark, absolute_path(location, f.path)) for f in files]
    pairs = pa.table(
        {
            _DELETED_FILE: pa.array(
                [uri for uri, deleted in zip(uris, rows, strict=True) for _ in deleted],
                pa.string(),
            ),
            _DELETED_ROW: pa.array([r for deleted in rows for r in deleted], pa.int64()),
        }
    )
    return spark.createDataFrame(pairs)


def spark_file_uri(spark: SparkSession, path: str) -> str:
    """The URI Spark's ``_metadata.file_path`` gives for the file at ``path`` (a qualified
    Hadoop path, URL-encoded): the inverse of :func:`~etl.delta.layout.spark_file_path`."""
    if spark_io(spark, path if has_scheme(path) else "/") == "arrow":
        return task_file_uri(path)
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop = jvm.org.apache.hadoop.fs
    if path.startswith("/"):
        # Spark lists a local file as file:/path (no authority), quoted as java.net.URI does.
        return jvm.java.net.URI("file", None, path, None).toString()
    hadoop_path = hadoop.Path(path)
    return hadoop_path.getFileSystem(conf).makeQualified(hadoop_path).toUri().toString()


def _scan(
    spark: SparkSession,
    location: str,
    table: TableVersion,
    files: Sequence[ActiveFile],
    with_file_path: bool,
    with_row_index: bool,
) -> DataFrame:
    """The Parquet rows of ``files`` (deletion vectors not applied)."""
    from pyspark.sql import functions as F

    schema = spark_schema(table)
    names = [f.name for f in schema.fields]
    partition_by = partition_columns(table)
    meta = []
    if with_file_path:
        meta.append(F.col("_metadata.file_path").alias(FILE_PATH_COLUMN))
    if with_row_index:
        meta.append(F.col("_metadata.row_index").alias(ROW_INDEX_COLUMN))
    if not files:
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        fields = list(schema.fields)
        if with_file_path:
            fields.append(StructField(FILE_PATH_COLUMN, StringType()))
        if with_row_index:
            fields.append(StructField(ROW_INDEX_COLUMN, LongType()))
        return spark.createDataFrame([], StructType(fields))
    if spark_io(spark, location) == "arrow":
        return _scan_in_tasks(
            spark, location, schema, partition_by, files, with_file_path, with_row_index
        )
    paths = [absolute_path(location, f.path) for f in files]
    if not partition_by:
        frame = _read_parquet(spark, location, schema, paths, recursiveFileLookup="true")
        # The read has the schema's columns in order: a projection of them all would only
        # cost Spark another analysis of the plan.
        return frame.select(*[F.col(f"`{n}`") for n in names], *meta) if meta else frame
    output = [F.col(f"`{n}`") for n in names]
    if _follows_hive_layout(schema, partition_by, files):
        # One scan; Spark parses the partition directories and casts them to the types of
        # the given schema (no type inference: "007" stays the string "007").
        frame = _read_parquet(spark, location, schema, paths, basePath=location)
        return frame.select(*output, *meta)
    # Files outside the Hive layout: one scan per partition, values from the log.
    data_schema = type(schema)([f for f in schema.fields if f.name not in partition_by])
    types = {f.name: f.dataType for f in schema.fields}
    groups: dict[tuple, list[str]] = {}
    for file, path in zip(files, paths, strict=True):
        key = tuple(file.partition_values.get(c) for c in partition_by)
        groups.setdefault(key, []).append(path)
    carried = [FILE_PATH_COLUMN] * with_file_path + [ROW_INDEX_COLUMN] * with_row_index
    frames = []
    for key, group in groups.items():
        frame = _read_parquet(spark, location, data_schema, group, recursiveFileLookup="true")
        # The hidden _metadata columns are taken right off the scan.
        frame = frame.select(*[F.col(f"`{f.name}`") for f in data_schema.fields], *meta)
        for col, value in zip(partition_by, key, strict=True):
            frame = frame.withColumn(col, F.lit(value).cast(types[col]))
        frames.append(frame.select(*output, *[F.col(c) for c in carried]))
    return reduce(lambda a, b: a.unionAll(b), frames)


def _scan_in_tasks(
    spark: SparkSession,
    location: str,
    schema,
    partition_by: Sequence[str],
    files: Sequence[ActiveFile],
    with_file_path: bool,
    with_row_index: bool,
) -> DataFrame:
    """:func:`_scan` where Spark's Hadoop cannot reach the location: Spark tasks read the
    files through Arrow's file system, one file per row of a DataFrame of paths (columns
    a file lacks read as null, partition values come from the log); the driver reads
    nothing."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    fields = list(schema.fields)
    if with_file_path:
        fields.append(StructField(FILE_PATH_COLUMN, StringType()))
    if with_row_index:
        fields.append(StructField(ROW_INDEX_COLUMN, LongType()))
    output = StructType(fields)
    target = to_arrow_schema(output, timezone="UTC")
    partitions = frozenset(partition_by)

    def read(batches):
        for batch in batches:
            for path, values in zip(
                batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True
            ):
                yield from _file_batches(path, json.loads(values), target, partitions)

    listing = [
        (
            absolute_path(location, f.path),
            json.dumps(_serialized_partition_values(f, partition_by)),
        )
        for f in files
    ]
    slices = max(1, min(len(listing), spark.sparkContext.defaultParallelism))
    paths = spark.createDataFrame(
        spark.sparkContext.parallelize(listing, slices), "path string, partition_values string"
    )
    return paths.mapInArrow(read, output)


def _serialized_partition_values(
    file: ActiveFile, partition_by: Sequence[str]
) -> dict[str, str | None]:
    return {c: serialize_partition_value(file.partition_values.get(c)) for c in partition_by}


def _file_batches(
    path: str,
    partition_values: Mapping[str, str | None],
    target: pa.Schema,
    partitions: frozenset[str],
) -> Iterator[pa.RecordBatch]:
    """The rows of the data file at ``path`` as record batches of ``target``: columns the
    file lacks as nulls, the ``partitions`` columns from their serialized
    ``partition_values`` (the log's), :data:`FILE_PATH_COLUMN` and :data:`ROW_INDEX_COLUMN`
    if ``target`` has them."""
    import pyarrow.parquet as pq

    fs, key = filesystem(path)
    file = pq.ParquetFile(fs.open_input_file(key))
    present = set(file.schema_arrow.names)
    columns = [f.name for f in target if f.name in present and f.name not in partitions]
    first = 0
    for rows in file.iter_batches(columns=columns):
        n = rows.num_rows
        arrays = []
        for field in target:
            if field.name == FILE_PATH_COLUMN:
                arrays.append(pa.array([task_file_uri(path)] * n, pa.string()))
            elif field.name == ROW_INDEX_COLUMN:
                arrays.append(pa.array(range(first, first + n), pa.int64()))
            elif field.name in partitions:
                value = partition_values.get(field.name)
                arrays.append(pa.array([value] * n, pa.string()).cast(field.type))
            elif field.name in present:
                arrays.append(rows.column(field.name).cast(field.type))
            else:
                arrays.append(pa.nulls(n, field.type))
        first += n
        yield pa.RecordBatch.from_arrays(arrays, schema=target)


def _read_in_driver(
    spark: SparkSession,
    location: str,
    table: TableVersion,
    files: Sequence[ActiveFile],
    deletion_vectors: bool,
) -> DataFrame:
    """:func:`scan` of a few small files: the driver reads their rows with pyarrow (rows
    deletion vectors delete dropped, unless ``deletion_vectors`` is False) and Spark gets
    them as a local relation, with the schema a Spark read gives (every column nullable)."""
    import pyarrow.compute as pc

    schema, target, schema_text = _driver_read_schemas(schema_json(table))
    partition_by = partition_columns(table)
    partitions = frozenset(partition_by)
    vectors = {f.path: f.deletion_vector for f in files if f.deletion_vector is not None}
    if not deletion_vectors:
        vectors = {}

    def read() -> list[pa.RecordBatch]:
        fs, root = filesystem(location)
        deleted = dict(zip(vectors, read_many(fs, root, list(vectors.values())), strict=True))
        batches: list[pa.RecordBatch] = []
        for file in files:
            path = absolute_path(location, file.path)
            values = _serialized_partition_values(file, partition_by)
            try:
                found = list(_file_batches(path, values, target, partitions))
            except (OSError, pa.ArrowException) as exc:
                raise DeltaIOError(table=location, operation="read", reason=str(exc)) from exc
            gone = deleted.get(file.path)
            if gone:
                rows = pa.Table.from_batches(found, schema=target)
                keep = pc.invert(
                    pc.is_in(pa.array(range(rows.num_rows), pa.int64()), pa.array(gone))
                )
                found = rows.filter(keep).to_batches()
            batches.extend(found)
        return batches

    # A data file never changes (Delta names every new file anew): its rows at a schema,
    # less its deletion vector's, are what they were for the last reader of that file.
    key = (
        location,
        schema_text,
        tuple((f.path, f.size, vectors.get(f.path)) for f in files),
    )
    return shared_local_frame(spark, key, read, target, schema, schema_json=schema_text)


@functools.lru_cache(maxsize=256)
def _driver_read_schemas(table_schema: str) -> tuple[StructType, pa.Schema, str]:
    """For a table's schema (the log's JSON), the schema of a driver read (every column
    nullable, as Spark reads files), its Arrow form in UTC and its JSON: a table's inputs
    are read every epoch, and their schema seldom changes. Never mutate what it returns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = _nullable(_parsed_schema(table_schema))
    return schema, to_arrow_schema(schema, timezone="UTC"), schema.json()


def _nullable(data_type):
    """``data_type`` with every field, element and value nullable, as Spark reads files."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def task_file_uri(path: str) -> str:
    """The URI :func:`_scan_in_tasks` gives a file in :data:`FILE_PATH_COLUMN`: URL-encoded,
    as Spark's ``_metadata.file_path`` is (so :func:`~etl.delta.layout.spark_file_path`
    reads both)."""
    return quote(path, safe=":/")


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
    if any(types[c] not in PARTITION_TYPES for c in partition_by):
        return False
    for file in files:
        if has_scheme(file.path):
            return False
        values = {c: serialize_partition_value(file.partition_values.get(c)) for c in partition_by}
        if os.path.dirname(file.path) != hive_directory(partition_by, values):
            return False
    return True


@dataclass(frozen=True)
class TableRead:
    """A DataFrame over files of a table, and their size: what Spark's optimizer
    estimates a scan of them at (the files' bytes), known from the log without planning."""

    frame: DataFrame
    bytes: int


def read_table(spark: SparkSession, location: str, *, version: int | None = None) -> DataFrame:
    """The table at ``version`` (latest when None) as a Spark DataFrame.

    The schema is exactly the Delta metadata's (names, types, order); columns read from
    Parquet are nullable. A version without files gives an empty DataFrame of that schema.
    """
    return read_table_sized(spark, location, version=version).frame


def read_table_sized(
    spark: SparkSession, location: str, *, version: int | None = None, driver_read_bytes: int = 0
) -> TableRead:
    """:func:`read_table`, with the bytes of the files it reads (``driver_read_bytes``: see
    :func:`scan`)."""
    location = normalize_location(location)
    with _version_to_read(location, version) as table:
        check_supported(table, location)
        files = active_files(table)
        try:
            frame = scan(spark, location, table, files, driver_read_bytes=driver_read_bytes)
            return TableRead(frame, sum(f.size for f in files))
        except DeltaIOError as exc:
            removed = _files_removed(location, version_of(table))
            if removed is None:
                raise
            raise removed from exc


def read_epochs(
    spark: SparkSession, location: str, *, version: int, first_epoch: int, last_epoch: int
) -> DataFrame:
    """Rows of the table at ``version`` whose ``_epoch`` is in [first_epoch, last_epoch].

    Only files whose ``_epoch`` partition value or min/max statistics overlap the range
    are opened (files without statistics are always opened).
    """
    return read_epochs_sized(
        spark, location, version=version, first_epoch=first_epoch, last_epoch=last_epoch
    ).frame


def read_epochs_sized(
    spark: SparkSession,
    location: str,
    *,
    version: int,
    first_epoch: int,
    last_epoch: int,
    driver_read_bytes: int = 0,
) -> TableRead:
    """:func:`read_epochs`, with the bytes of the files it reads (``driver_read_bytes``: see
    :func:`scan`)."""
    from pyspark.sql import functions as F

    location = normalize_location(location)
    with _version_to_read(location, version) as table:
        check_supported(table, location)
        if EPOCH_COLUMN not in [field.name for field in spark_schema(table).fields]:
            raise DeltaIOError(
                table=location,
                operation="read_epochs",
                reason=f"the table has no {EPOCH_COLUMN!r} column; use read_table",
            )
        files = active_files(table, epochs=(first_epoch, last_epoch))
        frame = scan(spark, location, table, files, driver_read_bytes=driver_read_bytes)
    if not all(f.only_epochs(first_epoch, last_epoch) for f in files):
        # Only then is the filter needed: an append table's file holds one batch's epochs,
        # and a filter that keeps every row would cost Spark another analysis of the plan.
        frame = frame.where(F.col(EPOCH_COLUMN).between(first_epoch, last_epoch))
    return TableRead(frame, sum(f.size for f in files))


@contextlib.contextmanager
def _version_to_read(location: str, version: int | None) -> Iterator[TableVersion]:
    """The version a Spark read plans on: our replay of the log, whose cost does not grow
    with the table's files as delta-rs' load does (a job reads its inputs every epoch);
    delta-rs' table where the log has no JSON entry for it left to replay (cleaned up
    before a checkpoint our replay cannot start from)."""
    try:
        snapshot = log_snapshot(location, version)
    except DeltaIOError:
        snapshot = None
    if snapshot is not None:
        yield snapshot
        return
    with loaded_table(location, version=version) as table:
        yield table


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
    with loaded_table(location, version=version) as table:
        check_supported(table, location)
        try:
            return arrow_rows(table, location, columns=columns, filter_epochs=filter_epochs)
        except DeltaIOError as exc:
            removed = _files_removed(location, table.version())
            if removed is None:
                raise
            raise removed from exc


def missing_files(location: str, version: int) -> list[str]:
    """The data files of the table at ``version`` that are no longer on storage, e.g.
    removed by another tool's VACUUM."""
    location = normalize_location(location)
    with loaded_table(location, version=version) as table:
        paths = [absolute_path(location, file.path) for file in active_files(table)]
    if is_local(location):
        return [path for path in paths if not os.path.exists(path)]
    found = []
    for path in paths:
        fs, key = filesystem(path)
        found.append(fs.get_file_info(key).type != pafs.FileType.NotFound)
    return [path for path, there in zip(paths, found, strict=True) if not there]


def _files_removed(location: str, version: int) -> FilesRemovedError | None:
    """FilesRemovedError when a read of ``version`` failed because files of it are gone;
    None when they are all there (the failure was something else)."""
    missing = missing_files(location, version)
    if not missing:
        return None
    return FilesRemovedError(table=location, version=version, missing=missing)


def arrow_rows(
    table: DeltaTable,
    location: str,
    *,
    columns: Sequence[str] | None = None,
    filter_epochs: tuple[int, int] | None = None,
) -> pa.Table:
    """:func:`read_arrow` of a table already opened (and checked) at its version."""
    filters = (
        [(EPOCH_COLUMN, ">=", filter_epochs[0]), (EPOCH_COLUMN, "<=", filter_epochs[1])]
        if filter_epochs is not None
        else None
    )
    try:
        if has_deletion_vectors(table):
            # delta-rs' pyarrow dataset refuses deletion vectors; its DataFusion scan
            # applies them.
            predicate = (
                None
                if filter_epochs is None
                else f'"{EPOCH_COLUMN}" >= {int(filter_epochs[0])} '
                f'AND "{EPOCH_COLUMN}" <= {int(filter_epochs[1])}'
            )
            reader = table.scan(
                columns=list(columns) if columns is not None else None, predicate=predicate
            )
            return pa.RecordBatchReader.from_stream(reader).read_all()
        return table.to_pyarrow_table(
            columns=list(columns) if columns is not None else None, filters=filters
        )
    except (DeltaError, OSError, pa.ArrowException) as exc:
        # A deletion-vector scan reports a missing file as ArrowInvalid, not OSError.
        raise DeltaIOError(table=location, operation="read_arrow", reason=str(exc)) from exc


def epoch_rows(location: str, *, version: int, epoch: int) -> int:
    """How many rows with ``_epoch = epoch`` the table holds at ``version`` (deletion vectors
    applied): what a batch ending at ``epoch`` wrote there, as its seal records it. Reads
    only the ``_epoch`` column of the files whose statistics may hold the epoch."""
    return read_arrow(
        location, version=version, columns=[EPOCH_COLUMN], filter_epochs=(epoch, epoch)
    ).num_rows


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


__all__ = [
    "DRIVER_READ_BYTES",
    "FILE_PATH_COLUMN",
    "ROW_INDEX_COLUMN",
    "arrow_rows",
    "epoch_rows",
    "missing_files",
    "read_arrow",
    "TableRead",
    "read_epochs",
    "read_epochs_sized",
    "read_pandas",
    "read_table",
    "read_table_sized",
    "scan",
    "spark_file_uri",
    "spark_schema",
]
