"""Keyed upserts (merge): merge-on-read with deletion vectors, or copy-on-write.

``deletion-vectors`` (the default on a local table with the ``deletionVectors`` feature):
the updated rows of the table are found by (file, row index), deleted by deletion vectors
(Delta protocol, "Deletion Vectors") and the updates are written as new files: the cost
follows the keys touched, not the table. ``copy-on-write``: the files holding an updated
key are rewritten, their kept rows plus the updates. Either way the result is committed
with :func:`etl.delta.commit.commit_files` in one commit. A small table is rewritten whole
in one Spark job.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import reduce
from typing import TYPE_CHECKING, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc

from etl.delta.actions import DeletedRows, added_columns
from etl.delta.dv import read_many, write_dv_file
from etl.delta.files import SMALL_OUTPUT_ROWS, DataFile, collect_small, write_arrow, write_files
from etl.delta.layout import absolute_path, filesystem, normalize_location, spark_file_path
from etl.delta.log import (
    ActiveFile,
    active_files,
    check_supported,
    has_deletion_vectors,
    loaded_table,
)
from etl.delta.read import FILE_PATH_COLUMN, ROW_INDEX_COLUMN, arrow_rows, scan, spark_schema
from etl.errors import (
    DeltaIOError,
    DuplicateMergeKeyError,
    InvalidWriteOptionError,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import Column, DataFrame, SparkSession

REWRITE_ALL_BYTES = 8 * 1024 * 1024
"""A merge into a table whose files hold at most this many bytes (and fewer rows than
``collect_rows``, by the log's statistics) rewrites every file in one Spark job collected
to the driver: finding the touched files first costs more than rewriting them all at this
size. When the result exceeds ``collect_rows`` (many inserts) it falls back to rewriting
only the touched files."""

MergeStrategy = Literal["deletion-vectors", "copy-on-write"]
"""How a merge replaces the rows of updated keys: deletion vectors on the files holding
them (merge-on-read), or rewriting those files."""
MERGE_STRATEGIES: tuple[str, ...] = get_args(MergeStrategy)

_log = logging.getLogger(__name__)
_told_copy_on_write: set[str] = set()
_ROW = "__delta_barrier_row"


@dataclass(frozen=True)
class MergeWrite:
    """What :func:`merge_files` wrote: files to add and to remove in one commit."""

    adds: list[DataFile]
    removes: list[str]
    upserted: int
    """Rows of the updates (inserted or replacing a row), not the rows copied along."""
    deletes: list[DeletedRows] = field(default_factory=list)
    """Files whose updated rows new deletion vectors delete (merge-on-read)."""


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
    rewrite_all_bytes: int | None = None,
    collect_rows: int = SMALL_OUTPUT_ROWS,
    strategy: MergeStrategy = "deletion-vectors",
) -> MergeWrite:
    """Keyed upsert against the table at ``version``.

    With ``strategy="deletion-vectors"`` on a local table whose protocol has the
    ``deletionVectors`` feature, the table's rows of updated keys are deleted by deletion
    vectors (:attr:`MergeWrite.deletes`) and the updates written as new files. Otherwise
    (copy-on-write; a table without the feature is never upgraded silently, and object
    stores lack the put-if-absent our own log writer needs) the files holding an updated
    key are replaced:

    Writes the rows of the replaced files minus the updated keys plus every row of
    ``updates``. Returns the new files and the relative paths of the replaced files
    (commit both with :func:`commit_files`, ``removes=``) and how many rows ``updates``
    held; nothing at all when ``updates`` is empty.

    When the table's files hold at most ``rewrite_all_bytes`` (default
    :data:`REWRITE_ALL_BYTES`), fewer than ``collect_rows``
    rows by the log's statistics, and the result at most ``collect_rows`` rows, every file
    is replaced, in one Spark job collected to the driver
    (:func:`etl.delta.files.write_arrow`). Otherwise only the files holding a key of
    ``updates`` are, found by a distributed semi-join on ``keys`` (only distinct file
    paths reach the driver) with the update keys broadcast.

    ``updates`` must have the table's columns and at most one row per key. With
    ``check_unique_keys`` (default) that is checked (in the same job as the rewrite, or in
    the aggregation counting the updates), raising DuplicateMergeKeyError before anything
    is written. Null keys match no row (SQL equality), so an update with a null key is an
    insert.
    """
    location = normalize_location(location)
    if rewrite_all_bytes is None:
        rewrite_all_bytes = REWRITE_ALL_BYTES
    with loaded_table(location, version=version, operation="merge") as table:
        check_supported(table, location)
        from pyspark.sql.pandas.types import to_arrow_schema

        expected = [f.name for f in spark_schema(table).fields]
        # New nullable columns evolve the table; the table's rows read them as null.
        added = added_columns(
            table.schema().to_json(), location, to_arrow_schema(updates.schema, timezone="UTC")
        )
        if not keys or any(k not in expected for k in keys):
            raise InvalidWriteOptionError(
                table=location,
                option="keys",
                reason=f"{list(keys)} must be a non-empty list of the table's columns {list(expected)}",
            )
        if strategy not in MERGE_STRATEGIES:
            raise InvalidWriteOptionError(
                table=location,
                option="strategy",
                reason=f"{strategy!r} is not one of {list(MERGE_STRATEGIES)}",
            )
        deleting = strategy == "deletion-vectors"
        if deleting and not has_deletion_vectors(table):
            deleting = False
            if location not in _told_copy_on_write:
                _told_copy_on_write.add(location)
                _log.info(
                    "merge into %s: copy-on-write, the table has no deletionVectors feature "
                    "(created before; it is not upgraded silently)",
                    location,
                )
        plan = _Merge(
            spark=spark,
            location=location,
            table=table,
            files=active_files(table),
            names=[*expected, *(f.name for f in added)],
            added=tuple(f.name for f in added),
            keys=list(keys),
            partition_by=tuple(partition_by),
            file_prefix=file_prefix,
            check_unique_keys=check_unique_keys,
        )
        if (
            sum(f.size for f in plan.files) <= rewrite_all_bytes
            and _known_rows(plan.files) < collect_rows
        ):
            merged = plan.rewrite_all(updates, collect_rows)
            if merged is not None:
                return merged
        if deleting:
            return plan.delete_touched(updates, collect_rows=collect_rows)
        return plan.rewrite_touched(
            updates, collect_rows=collect_rows, rewrite_all_bytes=rewrite_all_bytes
        )


@dataclass(frozen=True)
class _Merge:
    spark: SparkSession
    location: str
    table: DeltaTable
    files: list[ActiveFile]
    names: list[str]
    """The merged rows' columns: the table's, then ``added``."""
    added: tuple[str, ...]
    """Columns the updates add to the table (its rows have them as null)."""
    keys: list[str]
    partition_by: tuple[str, ...]
    file_prefix: str
    check_unique_keys: bool

    def columns(self, names: Sequence[str]) -> list[Column]:
        from pyspark.sql import functions as F

        return [F.col(f"`{name}`") for name in names]

    def aligned(self, updates: DataFrame) -> DataFrame:
        """``updates`` with the merged rows' columns in order: as it is when it has them
        already (a projection of every column would only cost Spark another analysis)."""
        if updates.columns == self.names:
            return updates
        return updates.select(*self.columns(self.names))

    def any_null_key(self) -> Column:
        return reduce(lambda a, b: a | b, [c.isNull() for c in self.columns(self.keys)])

    def rewrite_all(self, updates: DataFrame, collect_rows: int) -> MergeWrite | None:
        """Every file replaced by the table's rows minus the updated keys plus the updates;
        None when the updates or the result are more than ``collect_rows`` rows, or the keys
        cannot be joined in Arrow (the caller then merges in Spark).

        The table is small (at most ``REWRITE_ALL_BYTES``), so only the updates are
        computed by Spark, in one job collected to the driver; the table's rows are read
        by delta-rs (deletion vectors applied) and the upsert is an Arrow anti-join on the
        keys: no second Spark job, shuffle or window over the table.
        """
        rows = collect_small(self.aligned(updates), collect_rows)
        if rows is None:
            return None
        if rows.num_rows == 0:
            return MergeWrite(adds=[], removes=[], upserted=0)
        keyed = rows.select(self.keys).filter(
            reduce(pc.and_, [pc.is_valid(rows[k]) for k in self.keys])
        )
        if self.check_unique_keys:
            counts = keyed.group_by(self.keys).aggregate([([], "count_all")])
            duplicates = counts.filter(pc.greater(counts["count_all"], 1))
            if duplicates.num_rows:
                raise DuplicateMergeKeyError(
                    table=self.location,
                    keys=self.keys,
                    example={k: duplicates[k][0].as_py() for k in self.keys},
                )
        # Every column optional, as write_arrow writes them; the table's rows in the
        # updates' types (delta-rs may give string views or dictionary partition values).
        schema = pa.schema([f.with_nullable(True) for f in rows.schema])
        current = arrow_rows(self.table, self.location)
        for name in self.added:
            current = current.append_column(
                name, pa.nulls(current.num_rows, schema.field(name).type)
            )
        current = current.select(self.names).cast(schema)
        # Only the keys and a row number go through the join (Arrow joins no nested
        # columns); null keys match nothing (SQL equality), as in Arrow's hash join.
        numbered = current.select(self.keys).append_column(
            _ROW, pa.array(range(current.num_rows), pa.int64())
        )
        try:
            kept = numbered.join(keyed, keys=self.keys, join_type="left anti")
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return None
        if kept.num_rows + rows.num_rows > collect_rows:
            return None
        merged = pa.concat_tables([current.take(kept[_ROW]), rows.cast(schema)])
        adds = write_arrow(
            merged, self.location, partition_by=self.partition_by, file_prefix=self.file_prefix
        )
        return MergeWrite(adds=adds, removes=[f.path for f in self.files], upserted=rows.num_rows)

    def rewrite_touched(
        self, updates: DataFrame, *, collect_rows: int, rewrite_all_bytes: int
    ) -> MergeWrite:
        """The files holding an updated key replaced by their other rows plus the updates."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        rows = self.aligned(updates)
        persisted = not updates.is_cached
        if persisted:
            # Read three times below; a recomputed transform could even differ.
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            upserted = self.count_updates(rows)
            if upserted == 0:
                return MergeWrite(adds=[], removes=[], upserted=0)
            update_keys = rows.select(*self.columns(self.keys))
            if upserted <= SMALL_OUTPUT_ROWS:
                update_keys = F.broadcast(update_keys)
            touched = self.touched_files(update_keys)
            merged = rows
            if touched:
                types = {f.name: f.dataType for f in rows.schema.fields}
                kept = (
                    scan(self.spark, self.location, self.table, touched)
                    .join(update_keys, on=self.keys, how="left_anti")
                    .select(
                        *[
                            F.lit(None).cast(types[name]).alias(name)
                            if name in self.added
                            else F.col(f"`{name}`")
                            for name in self.names
                        ]
                    )
                )
                merged = kept.unionAll(rows)
            small = (
                sum(f.size for f in touched) <= rewrite_all_bytes
                and _known_rows(touched) + upserted <= collect_rows
            )
            adds = write_files(
                merged,
                self.location,
                partition_by=self.partition_by,
                file_prefix=self.file_prefix,
                collect_rows=collect_rows if small else 0,
            )
        finally:
            if persisted:
                rows.unpersist()
        return MergeWrite(adds=adds, removes=[f.path for f in touched], upserted=upserted)

    def delete_touched(self, updates: DataFrame, *, collect_rows: int) -> MergeWrite:
        """The table's rows of updated keys deleted by deletion vectors, the updates
        written as new files: rows rewritten are the updates only.

        One Spark job finds the (file, row index) of each row to delete: a scan of the
        files whose key statistics may hold an update key, semi-joined with the update
        keys, broadcast; only those pairs reach the driver. The scan reads physical rows:
        a row an old deletion vector deletes may match too, which the union with the old
        DV absorbs (a file matched only by such rows keeps its DV), so the table's rows
        are never joined with its deleted ones. One DV file holds, for each touched file,
        its old deleted rows and the new ones.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        rows = self.aligned(updates)
        persisted = not updates.is_cached
        if persisted:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            upserted = self.count_updates(rows)
            if upserted == 0:
                return MergeWrite(adds=[], removes=[], upserted=0)
            update_keys = rows.select(*self.columns(self.keys))
            candidates = self.files
            if upserted <= SMALL_OUTPUT_ROWS:
                update_keys = F.broadcast(update_keys)
                candidates = self.may_hold(update_keys.collect())
            hits: dict[str, list[int]] = {}
            if candidates:
                for uri, index in (
                    scan(
                        self.spark,
                        self.location,
                        self.table,
                        candidates,
                        with_file_path=True,
                        with_row_index=True,
                        deletion_vectors=False,
                    )
                    .join(update_keys, on=self.keys, how="left_semi")
                    .select(FILE_PATH_COLUMN, ROW_INDEX_COLUMN)
                    .collect()
                ):
                    hits.setdefault(spark_file_path(uri), []).append(index)
            adds = write_files(
                rows,
                self.location,
                partition_by=self.partition_by,
                file_prefix=self.file_prefix,
                collect_rows=collect_rows,
            )
        finally:
            if persisted:
                rows.unpersist()
        by_path = {absolute_path(self.location, f.path): f for f in candidates}
        unknown = sorted(set(hits) - set(by_path))
        if unknown:
            raise DeltaIOError(
                table=self.location,
                operation="merge",
                reason=f"Spark read files the log does not list: {unknown}",
            )
        matched = [by_path[path] for path in sorted(hits)]
        fs, root = filesystem(self.location)
        old = iter(read_many(fs, root, [f.deletion_vector for f in matched if f.deletion_vector]))
        touched: list[ActiveFile] = []
        row_sets: list[set[int]] = []
        for file in matched:
            deleted = set(next(old)) if file.deletion_vector else set()
            rows_hit = set(hits[absolute_path(self.location, file.path)])
            if not rows_hit <= deleted:
                touched.append(file)
                row_sets.append(deleted | rows_hit)
        new = write_dv_file(fs, root, row_sets)
        deletes = [
            DeletedRows(path=f.path, old=f.deletion_vector, new=dv)
            for f, dv in zip(touched, new, strict=True)
        ]
        return MergeWrite(adds=adds, removes=[], upserted=upserted, deletes=deletes)

    def may_hold(self, keys: Sequence) -> list[ActiveFile]:
        """The files whose min/max statistics may hold one of ``keys`` (rows of the key
        columns): a file is skipped only if, for some key column with bounds of a
        comparable type, no key falls between them. Null keys match nothing."""
        keys = [k for k in keys if all(v is not None for v in k)]
        if not keys:
            return []
        columns = []
        for position, name in enumerate(self.keys):
            values = sorted({k[position] for k in keys})
            columns.append((name, values))

        def may_hold(file: ActiveFile) -> bool:
            for name, values in columns:
                low, high = file.min_values.get(name), file.max_values.get(name)
                if not _comparable(low, values[0]) or not _comparable(high, values[0]):
                    continue  # no usable bounds: cannot rule the file out
                first = bisect.bisect_left(values, low)
                if first == len(values) or values[first] > high:
                    return False
            return True

        return [f for f in self.files if may_hold(f)]

    def count_updates(self, rows: DataFrame) -> int:
        """The rows of the updates; DuplicateMergeKeyError (when checking) if two share a
        non-null key. One aggregation; a second one names an example key if there is one."""
        from pyspark.sql import functions as F

        if not self.check_unique_keys:
            return rows.count()
        (totals,) = (
            rows.groupBy(*self.columns(self.keys))
            .agg(F.count(F.lit(1)).alias("__rows"))
            .agg(
                F.sum("__rows").alias("rows"),
                F.max(F.when(~self.any_null_key(), F.col("__rows"))).alias("most"),
            )
            .collect()
        )
        if (totals["most"] or 0) > 1:
            require_unique_keys(rows, self.location, self.keys)
        return totals["rows"] or 0

    def touched_files(self, update_keys: DataFrame) -> list[ActiveFile]:
        if not self.files:
            return []
        hits = (
            scan(self.spark, self.location, self.table, self.files, with_file_path=True)
            .join(update_keys, on=self.keys, how="left_semi")
            .select(FILE_PATH_COLUMN)
            .distinct()
            .collect()
        )
        hit_paths = {spark_file_path(row[0]) for row in hits}
        touched = [f for f in self.files if absolute_path(self.location, f.path) in hit_paths]
        if len(touched) != len(hit_paths):
            raise DeltaIOError(
                table=self.location,
                operation="merge",
                reason=f"Spark read files the log does not list: {sorted(hit_paths)}",
            )
        return touched


def _known_rows(files: Sequence[ActiveFile]) -> float:
    """The rows of ``files`` by the log's statistics, minus those their deletion vectors
    delete; infinite when a file has none."""
    return sum(f.live_rows if f.live_rows is not None else float("inf") for f in files)


def _comparable(bound: object, value: object) -> bool:
    """Whether a statistics bound orders like the key values: integers, strings and dates
    only (the statistics of other types are text or may be truncated differently)."""
    if bound is None or isinstance(bound, bool) or isinstance(value, bool):
        return False
    if isinstance(bound, int) and isinstance(value, int):
        return True
    if isinstance(bound, str) and isinstance(value, str):
        return True
    # datetime is a date too, but its bounds are text in the log.
    return type(bound) is date and type(value) is date


def require_unique_keys(rows: DataFrame, location: str, keys: list[str]) -> None:
    """DuplicateMergeKeyError if ``rows`` hold two rows with the same non-null ``keys``."""
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


__all__ = [
    "MERGE_STRATEGIES",
    "REWRITE_ALL_BYTES",
    "MergeStrategy",
    "MergeWrite",
    "merge_files",
    "require_unique_keys",
]
