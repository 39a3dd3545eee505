"""A directory that files are dropped into, as a root source: a local or mounted
directory, or a prefix on object storage (``s3://bucket/prefix``).

Each epoch takes the files that are in the directory at its barrier and that no earlier
slice took, in order of modification time (then name): the slice's bounds list them, so
a replay reads exactly the same files. What was taken is known by name, not by a
modification-time watermark: a file moved in with an old time (``cp -p``, rsync, two
producers renaming at once, coarse file-system clocks) is still taken, once. Files whose
name starts with ``.`` or ``_`` are in-flight by convention (write them under such a name,
then rename) and are not taken; an object store's PUT is atomic, so there a file may be
written under its own name.

On object storage a file's time is the store's (S3's ``LastModified``, whole seconds):
a file written in the barrier's second may be taken by that epoch, never by two. Spark
reads the files through its own Hadoop file system when it has one for the scheme
(:func:`~etl.storage.spark_io`), otherwise its tasks read them through Arrow's file
system: text and Parquet directly, CSV and JSON as lines handed to Spark's own parsers
(so the options mean what they mean to Spark; a CSV record must fit on one line there).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.fs as pafs

from catalog import validate_name
from etl.delta.layout import normalize_location
from etl.errors import SourceError
from etl.sources.base import SliceData, SliceRequest, Source
from etl.storage import filesystem, is_local, spark_io

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FileFormat = Literal["text", "csv", "json", "parquet"]


@dataclass(frozen=True)
class _Arrival:
    mtime_ns: int
    name: str


class FileSource(Source):
    """Files in ``path`` (a directory or an ``s3://bucket/prefix``; not recursive).
    ``text`` gives one row per line in ``column``."""

    def __init__(
        self,
        name: str,
        *,
        path: str | os.PathLike[str],
        format: FileFormat = "text",
        schema: StructType | str | None = None,
        column: str = "value",
        options: Mapping[str, str] | None = None,
        files_per_micro_batch: int | None = None,
    ) -> None:
        self.name = validate_name(name, kind="source")
        self.location = normalize_location(os.fspath(path))
        if format not in ("text", "csv", "json", "parquet"):
            raise SourceError(
                source=name, problem=f"unknown format {format!r}; use text, csv, json or parquet"
            )
        if format in ("csv", "json") and schema is None:
            raise SourceError(
                source=name,
                problem=f"{format} files need a schema (a StructType or DDL string) so that every "
                "epoch reads the same columns",
            )
        if files_per_micro_batch is not None and files_per_micro_batch < 1:
            raise SourceError(source=name, problem="files_per_micro_batch must be at least 1")
        self.format = format
        self.schema = schema
        self.column = column
        self.options = dict(options or {})
        self.files_per_micro_batch = files_per_micro_batch
        self._taken_cache: tuple[object, int, set[str]] = (None, 0, set())

    def unreachable(self) -> str | None:
        if not is_local(self.location):
            try:
                self._listing()
            except OSError as exc:  # no bucket, no credentials, store unreachable
                return f"cannot list {self.location!r}: {exc}"
            return None
        if os.path.isdir(self.location):
            return None
        what = "is not a directory" if os.path.exists(self.location) else "does not exist"
        return (
            f"directory {self.location!r} {what}: create it, or fix the source's path "
            "(or the --param that gives it)"
        )

    def _listing(self) -> list[pafs.FileInfo]:
        """The files under an object-store prefix (one listing; it carries their times)."""
        fs, root = filesystem(self.location)
        try:
            found = fs.get_file_info(pafs.FileSelector(root))
        except FileNotFoundError:
            # A prefix nothing was written under yet is empty; a missing bucket is an error.
            bucket = root.split("/", 1)[0]
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise FileNotFoundError(f"bucket {bucket!r} does not exist") from None
            return []
        return [info for info in found if info.type == pafs.FileType.File]

    def _arrivals(self, taken: Collection[str]) -> list[_Arrival]:
        """The files no earlier slice took, oldest first. Locally only they are stat'ed: a
        cut costs one listing of the directory plus a stat per new file, not a stat per
        file ever dropped there."""
        found = []
        if is_local(self.location):
            if not os.path.isdir(self.location):
                raise SourceError(
                    source=self.name, problem=f"directory {self.location!r} does not exist"
                )
            with os.scandir(self.location) as entries:
                for entry in entries:
                    if self._skipped(entry.name, taken) or not entry.is_file():
                        continue
                    found.append(_Arrival(entry.stat().st_mtime_ns, entry.name))
        else:
            try:
                listing = self._listing()
            except OSError as exc:
                raise SourceError(
                    source=self.name, problem=f"cannot list {self.location!r}: {exc}"
                ) from exc
            for info in listing:
                if not self._skipped(info.base_name, taken):
                    found.append(_Arrival(info.mtime_ns, info.base_name))
        return sorted(found, key=lambda a: (a.mtime_ns, a.name))

    @staticmethod
    def _skipped(name: str, taken: Collection[str]) -> bool:
        return name.startswith((".", "_")) or name in taken

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        barrier_ns = int(request.barrier_ts.timestamp() * 1_000_000_000)
        taken = self._taken(request)
        fresh = [a for a in self._arrivals(taken) if a.mtime_ns <= barrier_ns]
        return {"files": [a.name for a in fresh]}

    def _taken(self, request: SliceRequest) -> set[str]:
        """Every file an earlier slice took. Cached per slice history (one catalog): only
        the slices recorded since the previous cut are read again."""
        history, through, names = self._taken_cache
        if history is not request.recorded or through >= request.epoch:
            through, names = 0, set()
        for bounds in request.recorded(through):
            names.update(bounds.get("files", []))  # type: ignore[arg-type]
        self._taken_cache = (request.recorded, request.epoch - 1, names)
        return names

    def micro_batches(self, bounds: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        files = list(bounds.get("files", []))  # type: ignore[call-overload]
        size = self.files_per_micro_batch
        if not size or len(files) <= size:
            return (bounds,)
        return tuple({**bounds, "files": files[i : i + size]} for i in range(0, len(files), size))

    def _paths(self, bounds: Mapping[str, object]) -> list[str]:
        return [f"{self.location}/{name}" for name in bounds.get("files", [])]  # type: ignore[attr-defined]

    def _stat(self, paths: Sequence[str]) -> list[pafs.FileInfo]:
        fs, root = filesystem(self.location)
        prefix = len(self.location)
        return fs.get_file_info([root + path[prefix:] for path in paths])

    def slice_bytes(self, bounds: Mapping[str, object]) -> int | None:
        try:
            infos = self._stat(self._paths(bounds))
        except OSError:  # the store is unreachable: read() says so
            return None
        if any(info.type != pafs.FileType.File for info in infos):
            return None  # a file is gone: read() says which
        return sum(info.size for info in infos)

    def check_replayable(self, bounds: Mapping[str, object], *, epoch: int) -> None:
        paths = self._paths(bounds)
        try:
            infos = self._stat(paths)
        except OSError as exc:
            raise SourceError(
                source=self.name, problem=f"cannot reach the files of epoch {epoch}: {exc}"
            ) from exc
        missing = [
            path
            for path, info in zip(paths, infos, strict=True)
            if info.type == pafs.FileType.NotFound
        ]
        if missing:
            raise SourceError(
                source=self.name,
                problem=f"files of the recorded slice of epoch {epoch} are gone: {missing[:5]}; "
                "the epoch cannot be replayed exactly (restore the files)",
            )

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        self.check_replayable(bounds, epoch=epoch)
        files = self._paths(bounds)
        in_tasks = spark_io(spark, self.location) == "arrow"
        if self.format == "text":
            from pyspark.sql.types import StringType, StructField, StructType

            text_schema = StructType([StructField(self.column, StringType())])
            if not files:
                return SliceData(rows=spark.createDataFrame([], text_schema))
            if in_tasks:
                return SliceData(rows=self._lines_in_tasks(spark, files, self.column))
            frame = (
                spark.read.options(**self.options)
                .text(files)
                .withColumnRenamed("value", self.column)
            )
            return SliceData(rows=frame)
        reader = spark.read.format(self.format).options(**self.options)
        if self.schema is not None:
            reader = reader.schema(self.schema)
        if not files:
            if self.schema is None:
                raise SourceError(
                    source=self.name,
                    problem="the first slice is empty and no schema was given; give schema=",
                )
            return SliceData(rows=spark.createDataFrame([], self._struct()))
        if not in_tasks:
            return SliceData(rows=reader.load(files))
        if self.format == "parquet":
            return SliceData(rows=self._parquet_in_tasks(spark, files))
        if self.format == "csv" and self._option("multiLine") == "true":
            raise SourceError(
                source=self.name,
                problem="multiLine CSV cannot be read from object storage without Spark's "
                "Hadoop file system for the scheme (S3A): records must fit on one line",
            )
        lines = self._lines_in_tasks(spark, files, "line").rdd.map(lambda row: row[0])
        parser = spark.read.options(**self.options).schema(self.schema)  # type: ignore[arg-type]
        parse = parser.csv if self.format == "csv" else parser.json
        return SliceData(rows=parse(lines))

    def _option(self, name: str) -> str | None:
        """An option as Spark reads it (names are case-insensitive)."""
        for key, value in self.options.items():
            if key.lower() == name.lower():
                text = str(value)
                return text.lower() if text.lower() in ("true", "false") else text
        return None

    def _lines_in_tasks(self, spark: SparkSession, files: Sequence[str], column: str) -> DataFrame:
        """One row per line of the files, read by Spark tasks through Arrow's file system
        (a whole file per row with ``wholetext``, or JSON's ``multiLine``); lines end at
        ``lineSep``, else at ``\\n``, ``\\r\\n`` or ``\\r``, as Spark splits them."""
        whole = self._option("wholetext") == "true" or (
            self.format == "json" and self._option("multiLine") == "true"
        )
        separator = self._option("lineSep")
        split = re.compile(re.escape(separator) if separator else r"\r\n|\r|\n")
        encoding = self._option("encoding") or self._option("charset") or "utf-8"
        schema = pa.schema([pa.field(column, pa.string())])

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for path in batch.column(0).to_pylist():
                    fs, key = filesystem(path)
                    with fs.open_input_stream(key) as stream:
                        text = stream.read().decode(encoding)
                    if whole:
                        lines = [text]
                    else:
                        lines = split.split(text)
                        if lines and lines[-1] == "":
                            lines.pop()  # the separator ending the last line
                    yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], schema=schema)

        return self._paths_frame(spark, files).mapInArrow(read, f"`{column}` string")

    def _parquet_in_tasks(self, spark: SparkSession, files: Sequence[str]) -> DataFrame:
        """The files' rows read by Spark tasks through Arrow's file system, as Spark reads
        Parquet with a schema: columns by name, a column a file lacks is null."""
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        if self.schema is None:  # Spark takes the schema of one file too
            fs, key = filesystem(files[0])
            with fs.open_input_file(key) as first:
                struct = from_arrow_schema(pq.read_schema(first))
        else:
            struct = self._struct()
        target = to_arrow_schema(struct, timezone="UTC")

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for path in batch.column(0).to_pylist():
                    fs, key = filesystem(path)
                    file = pq.ParquetFile(fs.open_input_file(key))
                    present = set(file.schema_arrow.names)
                    columns = [f.name for f in target if f.name in present]
                    for rows in file.iter_batches(columns=columns):
                        arrays = [
                            rows.column(f.name).cast(f.type)
                            if f.name in present
                            else pa.nulls(rows.num_rows, f.type)
                            for f in target
                        ]
                        yield pa.RecordBatch.from_arrays(arrays, schema=target)

        return self._paths_frame(spark, files).mapInArrow(read, struct)

    @staticmethod
    def _paths_frame(spark: SparkSession, files: Sequence[str]) -> DataFrame:
        """One row per file, spread over the cluster's tasks."""
        slices = max(1, min(len(files), spark.sparkContext.defaultParallelism))
        rdd = spark.sparkContext.parallelize([(f,) for f in files], slices)
        return spark.createDataFrame(rdd, "path string")

    def _struct(self) -> StructType:
        from pyspark.sql.types import StructType, _parse_datatype_string

        if isinstance(self.schema, StructType):
            return self.schema
        parsed = _parse_datatype_string(str(self.schema))
        assert isinstance(parsed, StructType)
        return parsed


__all__ = [
    "FileFormat",
    "FileSource",
]
