"""A batch's small inputs are read by the driver (pyarrow) and given to Spark as a local
relation: the same rows and the same schema as Spark's own read of the files, whatever the
layout (partitions, null and empty partition values, columns added later, deletion
vectors, nested and temporal types)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from etl.delta import (
    DRIVER_READ_BYTES,
    Fence,
    active_files,
    merge_files,
    read_epochs_sized,
    read_table_sized,
    write_files,
)
from etl.delta.logfile import log_snapshot
from etl.errors import DeltaIOError, FilesRemovedError
from tests.support.delta_tables import WIDE_COLUMNS, commit_frame_files, wide_rows

pytestmark = pytest.mark.spark

FENCE = Fence("reads", generation=1)


def _append(spark, location, rows, schema, epoch, *, partition_by=(), create=False) -> int:
    df = spark.createDataFrame(rows, schema)
    files = write_files(df, location, partition_by=partition_by, file_prefix=f"e{epoch}")
    return commit_frame_files(
        location,
        df,
        files,
        fence=FENCE,
        epoch=epoch,
        partition_by=partition_by,
        deletion_vectors=create,
    )


def _both(read, **options):
    """(the driver's read, Spark's read) of the same version."""
    return read(driver_read_bytes=DRIVER_READ_BYTES, **options), read(
        driver_read_bytes=0, **options
    )


def _same(driver, spark_read) -> None:
    assert driver.bytes == spark_read.bytes
    assert driver.frame.schema == spark_read.frame.schema
    key = [c for c in driver.frame.columns if c not in ("attrs",)]
    # A map column cannot be sorted on or compared in a set: compare rows as dicts.
    assert sorted(map(repr, (r.asDict(True) for r in driver.frame.collect()))) == sorted(
        map(repr, (r.asDict(True) for r in spark_read.frame.collect()))
    )
    assert driver.frame.count() == spark_read.frame.select(*key).count()


def _first_epoch(spark, location, version):
    """The driver's read of epoch 1's rows of the table at ``version``."""
    return read_epochs_sized(
        spark,
        location,
        version=version,
        first_epoch=1,
        last_epoch=1,
        driver_read_bytes=DRIVER_READ_BYTES,
    )


def _plan(read) -> str:
    return read.frame._jdf.queryExecution().analyzed().toString()


@pytest.mark.parametrize("partition_by", [(), ("part", "bucket")], ids=["plain", "partitioned"])
def test_the_drivers_read_gives_sparks_rows_and_schema(spark, tmp_path, partition_by):
    location = str(tmp_path / "t")
    _append(spark, location, wide_rows(range(40), 1), WIDE_COLUMNS, 1, partition_by=partition_by)
    # A column added later: the first epoch's files lack it and read it as null.
    wider = WIDE_COLUMNS.replace("_epoch long", "note string, _epoch long")
    rows = [(*r[:-1], f"note{r[0]}", r[-1]) for r in wide_rows(range(40, 60), 2)]
    version = _append(spark, location, rows, wider, 2, partition_by=partition_by)

    driver, spark_read = _both(lambda **o: read_table_sized(spark, location, version=version, **o))
    assert "LocalRelation" in _plan(driver) and "parquet" not in _plan(driver).lower()
    assert "parquet" in _plan(spark_read).lower()
    _same(driver, spark_read)
    assert driver.frame.where("note IS NULL").count() == 40

    driver, spark_read = _both(
        lambda **o: read_epochs_sized(
            spark, location, version=version, first_epoch=2, last_epoch=2, **o
        )
    )
    _same(driver, spark_read)
    assert {r._epoch for r in driver.frame.collect()} == {2}


def test_rows_a_deletion_vector_deletes_are_not_read(spark, tmp_path):
    location = str(tmp_path / "t")
    schema = "id long, v string, part string, _epoch long"
    df = spark.createDataFrame([(i, f"v{i}", "ab"[i % 2], 1) for i in range(200)], schema)
    files = write_files(
        df.repartition(3, "id"), location, partition_by=["part"], file_prefix="b", collect_rows=0
    )
    version = commit_frame_files(
        location, df, files, fence=FENCE, epoch=1, partition_by=["part"], deletion_vectors=True
    )
    updates = spark.createDataFrame([(i, f"new{i}", "ab"[i % 2], 2) for i in (3, 4, 150)], schema)
    merged = merge_files(
        spark,
        location,
        version=version,
        updates=updates,
        keys=["id"],
        partition_by=["part"],
        file_prefix="m2",
        rewrite_all_bytes=0,
    )
    assert merged.deletes and not merged.removes
    version = commit_frame_files(
        location,
        updates,
        merged.adds,
        fence=FENCE,
        epoch=2,
        partition_by=["part"],
        deletes=merged.deletes,
    )
    snapshot = log_snapshot(location)
    assert snapshot is not None
    assert any(f.deletion_vector is not None for f in active_files(snapshot))

    driver, spark_read = _both(lambda **o: read_table_sized(spark, location, version=version, **o))
    _same(driver, spark_read)
    values = {r.id: r.v for r in driver.frame.collect()}
    assert len(values) == 200 and values[3] == "new3" and values[150] == "new150"


def test_inputs_above_the_bound_are_read_by_spark(spark, tmp_path):
    location = str(tmp_path / "t")
    version = _append(spark, location, wide_rows(range(10), 1), WIDE_COLUMNS, 1)
    size = read_table_sized(spark, location, version=version).bytes
    at = read_table_sized(spark, location, version=version, driver_read_bytes=size)
    below = read_table_sized(spark, location, version=version, driver_read_bytes=size - 1)
    assert "LocalRelation" in _plan(at)
    assert "LocalRelation" not in _plan(below) and "parquet" in _plan(below).lower()
    # The public read keeps Spark's (input_file_name() names each row's file).
    assert "LocalRelation" not in _plan(read_table_sized(spark, location, version=version))


def test_a_file_gone_from_storage_is_named_not_read_as_empty(spark, tmp_path):
    location = str(tmp_path / "t")
    version = _append(spark, location, wide_rows(range(10), 1), WIDE_COLUMNS, 1)
    snapshot = log_snapshot(location)
    assert snapshot is not None
    gone = active_files(snapshot)[0]
    os.remove(os.path.join(location, gone.path))
    with pytest.raises(FilesRemovedError) as removed:
        read_table_sized(spark, location, version=version, driver_read_bytes=DRIVER_READ_BYTES)
    assert gone.path in str(removed.value)
    with pytest.raises(DeltaIOError):
        _first_epoch(spark, location, version)


def test_an_empty_version_reads_as_no_rows_with_the_tables_schema(spark, tmp_path):
    location = str(tmp_path / "t")
    version = _append(spark, location, [], WIDE_COLUMNS, 1)
    driver, spark_read = _both(lambda **o: read_table_sized(spark, location, version=version, **o))
    assert driver.frame.count() == 0
    assert driver.frame.schema == spark_read.frame.schema
    assert pa.schema(to_arrow_schema(driver.frame.schema, timezone="UTC")).names[-1] == "_epoch"


def test_columns_declared_not_null_read_as_nullable_as_spark_reads_them(spark, tmp_path):
    from pyspark.sql.types import (
        ArrayType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("tags", ArrayType(LongType(), False), False),
            StructField("attrs", MapType(StringType(), LongType(), False), False),
            StructField("inner", StructType([StructField("x", LongType(), False)]), False),
            StructField("_epoch", LongType(), False),
        ]
    )
    location = str(tmp_path / "t")
    version = _append(spark, location, [(1, [1], {"a": 1}, (1,), 1)], schema, 1)
    snapshot = log_snapshot(location)
    assert snapshot is not None and '"nullable":false' in snapshot.schema_json
    driver, spark_read = _both(lambda **o: read_table_sized(spark, location, version=version, **o))
    assert driver.frame.schema == spark_read.frame.schema
    assert all(f.nullable for f in driver.frame.schema.fields)


def _relation_id(spark, read) -> int:
    """The JVM's identity of the local relation a driver's read gives Spark."""
    plan = read.frame._jdf.logicalPlan()
    assert plan.nodeName() == "LocalRelation"
    return spark.sparkContext._jvm.java.lang.System.identityHashCode(plan)


def test_sessions_reading_the_same_files_share_one_local_relation(spark, tmp_path):
    location = str(tmp_path / "t")
    first = _append(spark, location, wide_rows(range(30), 1), WIDE_COLUMNS, 1)
    sessions = [spark.newSession() for _ in range(3)]
    reads = [
        read_table_sized(s, location, version=first, driver_read_bytes=DRIVER_READ_BYTES)
        for s in sessions
    ]
    assert len({_relation_id(spark, r) for r in reads}) == 1
    assert [r.frame.sparkSession for r in reads] == sessions
    for read in reads:
        assert sorted(r.id for r in read.frame.collect()) == list(range(30))

    # Another version's files, or the same files at a wider schema, are read anew.
    wider = WIDE_COLUMNS.replace("_epoch long", "note string, _epoch long")
    rows = [(*r[:-1], f"note{r[0]}", r[-1]) for r in wide_rows(range(30, 40), 2)]
    second = _append(spark, location, rows, wider, 2)
    driver, spark_read = _both(lambda **o: read_table_sized(spark, location, version=second, **o))
    _same(driver, spark_read)
    assert _relation_id(spark, driver) != _relation_id(spark, reads[0])
    notes = {r.id: r.note for r in driver.frame.collect()}
    assert len(notes) == 40 and notes[0] is None and notes[35] == "note35"
    again = read_table_sized(spark, location, version=first, driver_read_bytes=DRIVER_READ_BYTES)
    assert "note" not in again.frame.columns and again.frame.count() == 30


def test_a_deletion_vector_added_to_a_read_file_is_not_served_from_an_earlier_read(spark, tmp_path):
    location = str(tmp_path / "t")
    schema = "id long, v string, _epoch long"
    df = spark.createDataFrame([(i, f"v{i}", 1) for i in range(20)], schema)
    files = write_files(df, location, file_prefix="b", collect_rows=0)
    before = commit_frame_files(location, df, files, fence=FENCE, epoch=1, deletion_vectors=True)
    assert _first_epoch(spark, location, before).frame.count() == 20
    updates = spark.createDataFrame([(3, "new3", 2)], schema)
    merged = merge_files(
        spark,
        location,
        version=before,
        updates=updates,
        keys=["id"],
        file_prefix="m2",
        rewrite_all_bytes=0,
    )
    assert merged.deletes and not merged.removes  # the same files, one now with a DV
    after = commit_frame_files(
        location, updates, merged.adds, fence=FENCE, epoch=2, deletes=merged.deletes
    )
    # Epoch 1's rows are in the same files as before; the DV deletes one of them.
    ids = sorted(r.id for r in _first_epoch(spark, location, after).frame.collect())
    assert ids == [i for i in range(20) if i != 3]
