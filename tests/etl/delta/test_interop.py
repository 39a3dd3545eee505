"""Tables written by the Delta I/O layer read the same in DuckDB, delta-rs and Polars."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql.pandas.types import to_arrow_schema

from etl.delta import (
    CommitRequest,
    Fence,
    commit_files,
    merge_files,
    read_table,
    restore_table,
    write_files,
)
from etl.delta.logfile import CHECKPOINT_INTERVAL
from etl.reader import delta_extension_path
from tests.support.delta_tables import commit_frame_files

pytestmark = [pytest.mark.interop, pytest.mark.spark]

SCHEMA = (
    "id long, name string, amount double, ts timestamp, day date, price decimal(12,3), "
    "tags array<string>, _epoch long"
)
PARTITION_BY = ["name"]


def _row(i: int, epoch: int, name: str | None) -> tuple:
    return (
        i,
        name,
        None if i % 4 == 0 else i / 3,
        datetime(2024, 3, 1, 8, 30, 0, 1000 * i + 7, tzinfo=UTC) if i % 5 else None,
        date(2024, 3, 1 + i % 28),
        Decimal(f"{i}.250"),
        [f"t{i}"] if i % 3 else None,
        epoch,
    )


def _canonical(table: pa.Table, names: list[str]) -> list[tuple]:
    columns = []
    for name in names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(column, pa.int64())
        columns.append(column.to_pylist())
    return sorted(zip(*columns, strict=True), key=repr)


@pytest.fixture(scope="module")
def versions(spark, tmp_path_factory) -> tuple[str, list[int]]:
    """A table at versions: append, append, merge, overwrite, restore to the second."""
    location = str(tmp_path_factory.mktemp("interop") / "table")
    names = ["a/b c", "x=y", None, "plain"]

    def commit(df, files, txn, *, mode="append", removes=()):
        return commit_files(
            location,
            CommitRequest(
                files,
                schema=to_arrow_schema(df.schema, timezone="UTC"),
                mode=mode,
                partition_by=PARTITION_BY,
                removes=removes,
                fence=Fence("interop", generation=1),
                metadata={"delta_barrier.epoch": txn},
            ),
        )

    written = []
    for epoch in (1, 2):
        df = spark.createDataFrame(
            [_row(i, epoch, names[i % 4]) for i in range(epoch * 10, epoch * 10 + 8)], SCHEMA
        )
        files = write_files(df, location, partition_by=PARTITION_BY, file_prefix=f"{epoch}")
        written.append(commit(df, files, epoch))
    updates = spark.createDataFrame(
        [_row(11, 3, "moved"), _row(22, 3, "x=y"), _row(99, 3, None)], SCHEMA
    )
    merged = merge_files(
        spark,
        location,
        version=written[-1],
        updates=updates,
        keys=["id"],
        partition_by=PARTITION_BY,
        file_prefix="3",
    )
    assert merged.removes
    written.append(commit(updates, merged.adds, 3, removes=merged.removes))
    fresh = spark.createDataFrame([_row(i, 4, names[i % 4]) for i in range(40, 44)], SCHEMA)
    files = write_files(fresh, location, partition_by=PARTITION_BY, file_prefix="4")
    written.append(commit(fresh, files, 4, mode="overwrite"))
    written.append(
        restore_table(
            location,
            to_version=written[1],
            planned_at=written[-1],
            fence=Fence("interop", generation=1),
            metadata={},
        )
    )
    assert written == [0, 1, 2, 3, 4]
    return location, written


def _expected(spark, location: str, version: int) -> tuple[list[str], list[tuple]]:
    df = read_table(spark, location, version=version)
    rows = _canonical(df.toArrow(), df.columns)
    assert rows, "every version of the fixture holds rows"
    return df.columns, rows


def test_duckdb_delta_extension_reads_every_version(spark, versions):
    location, written = versions
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{delta_extension_path()}'")
    connection.execute(f"ATTACH 'file://{location}' AS interop (TYPE delta)")
    for version in written:
        names, expected = _expected(spark, location, version)
        # delta_scan() in this extension build has no version parameter; an attached
        # Delta table time-travels with AT (VERSION => n).
        got = connection.execute(f"SELECT * FROM interop AT (VERSION => {version})")
        assert _canonical(got.fetch_arrow_table(), names) == expected, version
    latest = connection.execute(f"SELECT * FROM delta_scan('file://{location}')")
    assert (
        _canonical(latest.fetch_arrow_table(), names) == _expected(spark, location, written[-1])[1]
    )


def test_delta_rs_reads_every_version(spark, versions):
    location, written = versions
    for version in written:
        names, expected = _expected(spark, location, version)
        got = DeltaTable(location, version=version).to_pyarrow_table()
        assert _canonical(got, names) == expected, version


def test_polars_reads_every_version(spark, versions):
    location, written = versions
    for version in written:
        names, expected = _expected(spark, location, version)
        got = pl.read_delta(location, version=version).to_arrow()
        assert _canonical(got, names) == expected, version


def _dv_table(
    spark,
    location: str,
    *,
    names: list[str | None],
    rows: int,
    merges: list[list[int]],
    restore_to: int,
) -> list[int]:
    """A table with deletion vectors: created with ``rows`` rows (partitioned by
    ``names``), one merge of each id list (by deletion vectors), then a RESTORE to version
    ``restore_to``. Returns the versions written."""
    fence = Fence("interop", generation=1)

    def commit(df, files, txn, **options):
        return commit_frame_files(
            location, df, files, fence=fence, epoch=txn, partition_by=PARTITION_BY, **options
        )

    base = spark.createDataFrame([_row(i, 1, names[i % len(names)]) for i in range(rows)], SCHEMA)
    files = write_files(
        base.repartition(3), location, partition_by=PARTITION_BY, file_prefix="1", collect_rows=0
    )
    written = [commit(base, files, 1, deletion_vectors=True)]
    for epoch, ids in enumerate(merges, start=2):
        updates = spark.createDataFrame(
            [_row(i, epoch, names[(i + epoch) % len(names)]) for i in ids], SCHEMA
        )
        merged = merge_files(
            spark,
            location,
            version=written[-1],
            updates=updates,
            keys=["id"],
            partition_by=PARTITION_BY,
            file_prefix=str(epoch),
            rewrite_all_bytes=0,
        )
        assert merged.deletes and not merged.removes
        written.append(commit(updates, merged.adds, epoch, deletes=merged.deletes))
    written.append(
        restore_table(
            location, to_version=restore_to, planned_at=written[-1], fence=fence, metadata={}
        )
    )
    return written


def _assert_dv_readers_agree(spark, location: str, versions) -> None:
    """DuckDB, Polars and delta-rs read each version of a deletion-vector table as we do."""
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{delta_extension_path()}'")
    connection.execute(f"ATTACH 'file://{location}' AS interop_dv (TYPE delta)")
    for version in versions:
        names, expected = _expected(spark, location, version)
        assert len(expected) == len({row[names.index("id")] for row in expected}), version
        duck = connection.execute(f"SELECT * FROM interop_dv AT (VERSION => {version})")
        assert _canonical(duck.fetch_arrow_table(), names) == expected, ("duckdb", version)
        # Polars 2.1 does not apply a deletion vector to a file whose path holds a
        # percent-escape (partition values "x=y", "p+q%", "a/b c" here), though its log
        # path is written exactly as delta-rs writes it: compared on the other partitions.
        polars = pl.read_delta(location, version=version).filter(
            pl.col("name").is_null() | (pl.col("name") == "plain")
        )
        plain = [r for r in expected if r[names.index("name")] in (None, "plain")]
        assert _canonical(polars.to_arrow(), names) == plain, ("polars", version)
        # delta-rs' pyarrow dataset refuses deletion vectors; its DataFusion scan reads them.
        scanned = pa.table(DeltaTable(location, version=version).scan().read_all())
        assert _canonical(scanned, names) == expected, ("delta-rs", version)
    latest = connection.execute("SELECT * FROM interop_dv")
    names, expected = _expected(spark, location, DeltaTable(location).version())
    assert _canonical(latest.fetch_arrow_table(), names) == expected, "duckdb latest"


@pytest.fixture(scope="module")
def dv_versions(spark, tmp_path_factory) -> tuple[str, list[int]]:
    """A table with deletion vectors at versions: create, merge, merge, RESTORE to the
    first merge; partition values that need escaping."""
    location = str(tmp_path_factory.mktemp("interop-dv") / "table")
    written = _dv_table(
        spark,
        location,
        names=["a/b c", "x=y", None, "plain", "p+q%"],
        rows=60,
        merges=[[3, 7, 11, 59, 100], [7, 8, 9, 100]],
        restore_to=1,
    )
    assert written == [0, 1, 2, 3]
    return location, written


def test_deletion_vector_versions_read_the_same_in_duckdb_polars_and_delta_rs(spark, dv_versions):
    location, written = dv_versions
    _assert_dv_readers_agree(spark, location, written)
    with pytest.raises(Exception, match="(?i)deletion"):
        DeltaTable(location).to_pyarrow_table()


@pytest.fixture(scope="module")
def checkpointed_dv_versions(spark, tmp_path_factory) -> tuple[str, list[int]]:
    """A deletion-vector table past its first checkpoint: create, eleven merges (the
    checkpoint at version 10 holds files with deletion vectors), a RESTORE across the
    checkpoint to version 4."""
    location = str(tmp_path_factory.mktemp("interop-checkpoint") / "table")
    written = _dv_table(
        spark,
        location,
        names=["plain", None, "x=y"],
        rows=30,
        merges=[
            [epoch, epoch + 7, (epoch * 5) % 30, 100 + epoch]
            for epoch in range(2, CHECKPOINT_INTERVAL + 3)
        ],
        restore_to=4,
    )
    assert written == list(range(CHECKPOINT_INTERVAL + 3))
    return location, written


def test_readers_read_deletion_vectors_through_our_checkpoints(spark, checkpointed_dv_versions):
    location, written = checkpointed_dv_versions
    checkpoint = Path(location) / "_delta_log" / f"{CHECKPOINT_INTERVAL:020d}.checkpoint.parquet"
    assert checkpoint.is_file()
    # The checkpoint itself holds deletion vectors (what the readers must apply).
    adds = pq.read_table(checkpoint, columns=["add"]).column("add").to_pylist()
    assert any(a and a.get("deletionVector") for a in adds)
    # Before the checkpoint (JSON only), at it, after it (checkpoint + JSON), the RESTORE.
    _assert_dv_readers_agree(
        spark, location, [CHECKPOINT_INTERVAL - 1, *written[CHECKPOINT_INTERVAL:]]
    )
    assert _expected(spark, location, written[-1]) == _expected(spark, location, 4)
