"""Keyed upserts (merge) as copy-on-write: the files holding an updated key are rewritten.

Spark finds the touched files and writes their kept rows plus the updates; the result is
committed with :func:`etl.delta.write.commit_files` (adds and removes in one commit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etl.delta.layout import absolute_path, normalize_location, spark_file_path
from etl.delta.log import active_files, check_supported, open_table
from etl.delta.read import FILE_PATH_COLUMN, scan, spark_schema
from etl.delta.write import DataFile, write_files
from etl.errors import (
    DeltaIOError,
    DuplicateMergeKeyError,
    InvalidWriteOptionError,
    SchemaMismatchError,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class MergeWrite:
    """What :func:`merge_files` wrote: files to add and to remove in one commit."""

    adds: list[DataFile]
    removes: list[str]
    upserted: int
    """Rows of the updates (inserted or replacing a row), not the rows copied along."""


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
) -> MergeWrite:
    """Copy-on-write keyed upsert against the table at ``version``.

    Finds (distributed: a semi-join on ``keys`` reporting each row's file; only distinct
    file paths reach the driver) the files that hold a key of ``updates``, and writes their
    rows minus the updated keys plus every row of ``updates``. Returns the new files and
    the relative paths of the replaced files (commit both with :func:`commit_files`,
    ``removes=``) and how many rows ``updates`` held.

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
            require_unique_keys(rows, location, key_list)
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
        upserted = rows.count()
    finally:
        if persisted:
            rows.unpersist()
    return MergeWrite(adds=adds, removes=[f.path for f in touched], upserted=upserted)


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


__all__ = ["MergeWrite", "merge_files", "require_unique_keys"]
