"""A foreign Delta table (written by another system) as a root source.

A slice is a range of the table's versions: ``(from_version, to_version]``. It reads the
files added in that range, so the foreign table must be append-only there; a range
that removed files (an update, delete or overwrite) is refused, never read wrongly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from catalog import validate_name
from etl.delta.layout import normalize_location
from etl.delta.log import active_files, check_supported, open_table, table_exists
from etl.delta.read import scan
from etl.errors import SourceError
from etl.sources.base import SliceData, SliceRequest, Source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class DeltaTableSource(Source):
    """Rows appended to the Delta table at ``path`` since the previous slice."""

    def __init__(self, name: str, *, path: str) -> None:
        self.name = validate_name(name, kind="source")
        self.path = normalize_location(str(path))

    def unreachable(self) -> str | None:
        if table_exists(self.path):
            return None
        return f"no Delta table at {self.path!r}: create it, or fix the source's path"

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        previous = request.previous_bounds or {}
        table = open_table(self.path)
        return {"from_version": previous.get("to_version"), "to_version": table.version()}

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        to_version = bounds["to_version"]
        from_version = bounds.get("from_version")
        assert isinstance(to_version, int)
        table = open_table(self.path, version=to_version)
        check_supported(table, self.path)
        files = active_files(table)
        if from_version is not None:
            assert isinstance(from_version, int)
            before = {
                f.path: f.deletion_vector
                for f in active_files(open_table(self.path, version=from_version))
            }
            after = {f.path for f in files}
            # A file whose deletion vector changed had rows deleted: not append-only either.
            removed = set(before) - after | {
                f.path for f in files if f.path in before and before[f.path] != f.deletion_vector
            }
            if removed:
                raise SourceError(
                    source=self.name,
                    problem=f"versions {from_version}..{to_version} of {self.path} removed "
                    f"{len(removed)} file(s) or rows of them (e.g. {sorted(removed)[0]}): the "
                    "source must be "
                    "append-only; read it with a snapshot job instead",
                )
            files = [f for f in files if f.path not in before]
        return SliceData(rows=scan(spark, self.path, table, files))


__all__ = [
    "DeltaTableSource",
]
