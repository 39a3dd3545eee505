"""A Delta table as a root source: a foreign one (written by another system), or a table
of another pipeline of the same catalog.

A slice is a range of the table's versions: ``(from_version, to_version]``. It reads the
files added in that range, so the table must be append-only there; a range that removed
files (an update, delete or overwrite) is refused, never read wrongly. A foreign table is
cut at its latest version; a table of the catalog at the version of its newest sealed
(WRITTEN) epoch, never beyond: rows of an epoch its pipeline has not sealed may still be
rolled back. ``to_version`` None (nothing sealed yet) or equal to ``from_version``
(nothing new sealed) is an empty slice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from catalog import validate_name
from etl.delta.layout import normalize_location
from etl.delta.log import (
    active_files,
    check_supported,
    loaded_table,
    table_exists,
)
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
        self.table_location = self.path

    def unreachable(self) -> str | None:
        if table_exists(self.path):
            return None
        return f"no Delta table at {self.path!r}: create it, or fix the source's path"

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        from_version = (request.previous_bounds or {}).get("to_version")
        if request.sealed is None:
            with loaded_table(self.path) as table:
                return {"from_version": from_version, "to_version": table.version()}
        sealed = request.sealed.version
        if sealed is None or (isinstance(from_version, int) and sealed <= from_version):
            return {"from_version": from_version, "to_version": from_version}
        return {"from_version": from_version, "to_version": sealed}

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        to_version = bounds["to_version"]
        from_version = bounds.get("from_version")
        assert to_version is None or isinstance(to_version, int)
        if to_version is None or to_version == from_version:
            # An empty slice, with the columns of the version it stays at (or the latest).
            with loaded_table(self.path, version=to_version) as table:
                return SliceData(rows=scan(spark, self.path, table, []))
        before: dict = {}
        if from_version is not None:
            assert isinstance(from_version, int)
            with loaded_table(self.path, version=from_version) as table:
                before = {f.path: f.deletion_vector for f in active_files(table)}
        with loaded_table(self.path, version=to_version) as table:
            check_supported(table, self.path)
            files = active_files(table)
            if from_version is not None:
                after = {f.path for f in files}
                # A file whose deletion vector changed had rows deleted: not append-only
                # either.
                removed = set(before) - after | {
                    f.path
                    for f in files
                    if f.path in before and before[f.path] != f.deletion_vector
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
