"""A directory that files are dropped into, as a root source.

Each epoch takes the files that are in the directory at its barrier and that no earlier
slice took, in order of modification time (then name): the slice's bounds list them, so
a replay reads exactly the same files. What was taken is known by name, not by a
modification-time watermark: a file moved in with an old time (``cp -p``, rsync, two
producers renaming at once, coarse file-system clocks) is still taken, once. Files whose
name starts with ``.`` or ``_`` are in-flight by convention (write them under such a name,
then rename) and are not taken.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from catalog import validate_name
from etl.errors import SourceError
from etl.sources.base import SliceData, SliceRequest, Source
from etl.storage import is_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FileFormat = Literal["text", "csv", "json", "parquet"]


@dataclass(frozen=True)
class _Arrival:
    mtime_ns: int
    name: str


class FileSource(Source):
    """Files in ``path`` (not recursive). ``text`` gives one row per line in ``column``."""

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
        if is_url(os.fspath(path)):
            raise SourceError(
                source=name,
                problem=f"{os.fspath(path)!r}: a FileSource watches a local or mounted "
                "directory; an object-store prefix is not supported yet (the warehouse may "
                "be on object storage)",
            )
        self.path = Path(path)
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
        if self.path.is_dir():
            return None
        what = "is not a directory" if self.path.exists() else "does not exist"
        return (
            f"directory {str(self.path)!r} {what}: create it, or fix the source's path "
            "(or the --param that gives it)"
        )

    def _arrivals(self, taken: Collection[str]) -> list[_Arrival]:
        """The files no earlier slice took, oldest first. Only they are stat'ed: a cut costs
        one listing of the directory plus a stat per new file, not a stat per file ever
        dropped there."""
        if not self.path.is_dir():
            raise SourceError(
                source=self.name, problem=f"directory {str(self.path)!r} does not exist"
            )
        found = []
        with os.scandir(self.path) as entries:
            for entry in entries:
                if entry.name.startswith((".", "_")) or entry.name in taken or not entry.is_file():
                    continue
                found.append(_Arrival(entry.stat().st_mtime_ns, entry.name))
        return sorted(found, key=lambda a: (a.mtime_ns, a.name))

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

    def slice_bytes(self, bounds: Mapping[str, object]) -> int | None:
        try:
            return sum(
                (self.path / name).stat().st_size
                for name in bounds.get("files", [])  # type: ignore[attr-defined]
            )
        except OSError:  # a file is gone: read() says which
            return None

    def check_replayable(self, bounds: Mapping[str, object], *, epoch: int) -> None:
        files = [str(self.path / name) for name in bounds.get("files", [])]  # type: ignore[attr-defined]
        missing = [f for f in files if not os.path.exists(f)]
        if missing:
            raise SourceError(
                source=self.name,
                problem=f"files of the recorded slice of epoch {epoch} are gone: {missing[:5]}; "
                "the epoch cannot be replayed exactly (restore the files)",
            )

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        self.check_replayable(bounds, epoch=epoch)
        files = [str(self.path / name) for name in bounds.get("files", [])]  # type: ignore[attr-defined]
        if self.format == "text":
            from pyspark.sql.types import StringType, StructField, StructType

            text_schema = StructType([StructField(self.column, StringType())])
            if not files:
                return SliceData(rows=spark.createDataFrame([], text_schema))
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
        return SliceData(rows=reader.load(files))

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
