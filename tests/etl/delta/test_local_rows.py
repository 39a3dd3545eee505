"""Rows Spark's optimizer computes while it plans (a projection, filter or limit of a
local relation: a batch's small input as the driver read it) are taken from the plan as
Arrow, without a Spark job: the same rows and schema as ``toArrow``, for every kind of
column and in any session time zone."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from etl.delta import DRIVER_READ_BYTES, Fence, read_table_sized, write_files
from etl.delta.files import collect_small
from etl.delta.local import LOCAL_ROWS_BYTES, estimated_bytes, local_frame, local_rows
from tests.support.delta_tables import WIDE_COLUMNS, commit_frame_files, wide_rows
from tests.support.spark_work import SparkCounters

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def wide_table(spark, tmp_path_factory) -> tuple[str, int]:
    """A table of every kind of column, partitioned (partition values come from the log)."""
    location = str(tmp_path_factory.mktemp("local") / "t")
    df = spark.createDataFrame(wide_rows(range(60), 1), WIDE_COLUMNS)
    partition_by = ("part", "bucket")
    files = write_files(df, location, partition_by=partition_by, file_prefix="e1")
    version = commit_frame_files(
        location, df, files, fence=Fence("local", 1), epoch=1, partition_by=partition_by
    )
    return location, version


def _small_input(session, wide_table):
    location, version = wide_table
    read = read_table_sized(session, location, version=version, driver_read_bytes=DRIVER_READ_BYTES)
    return read.frame


def _local_frame_of(spark, rows: int):
    """``rows`` rows of two columns as a local relation."""
    schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    arrow = pa.schema([("id", pa.int64()), ("name", pa.string())])
    batch = pa.record_batch(
        [pa.array(range(rows)), pa.array([f"name {i}" for i in range(rows)])], schema=arrow
    )
    return local_frame(spark, [batch], arrow, schema)


def _plan_node(frame) -> str:
    return frame._jdf.queryExecution().optimizedPlan().nodeName()


@pytest.mark.parametrize(
    ("time_zone", "batch_rows"),
    [("UTC", 10_000), ("America/Los_Angeles", 7)],
    ids=["utc-one-batch", "los-angeles-many-batches"],
)
def test_a_plan_computed_while_planning_gives_toarrows_rows(
    spark, wide_table, time_zone, batch_rows
):
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", time_zone)
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
    frame = (
        _small_input(session, wide_table)
        .where("id % 3 <> 1")
        .select("*", (F.col("ratio") * 2).alias("twice"), F.lit(7).cast("long").alias("e"))
    )
    assert _plan_node(frame) == "LocalRelation"

    rows = local_rows(frame)

    expected = frame.toArrow()
    assert rows is not None and rows.num_rows == 40
    assert rows.schema == expected.schema
    assert rows.sort_by("id").equals(expected.sort_by("id"))


def test_the_schema_pyspark_is_given_for_a_local_relation_is_sparks_own(spark, wide_table):
    """A driver-read input's frame comes with its schema (no round trip to ask Spark for
    it): it must be exactly what Spark would answer, for every kind of column, whether the
    relation is new or one kept for the next reader."""
    from pyspark.sql.types import _parse_datatype_json_string

    for session in (spark.newSession(), spark.newSession()):  # new, then kept
        frame = _small_input(session, wide_table)
        assert "schema" in frame.__dict__
        asked = _parse_datatype_json_string(frame._jdf.schema().json())
        assert frame.schema == asked
        assert frame.schema.json() == asked.json()


def test_no_rows_give_toarrows_empty_table(spark, wide_table):
    frame = _small_input(spark, wide_table).where("id < 0")

    rows = local_rows(frame)

    assert rows is not None and rows.num_rows == 0
    assert rows.schema == frame.toArrow().schema


@pytest.mark.parametrize("planned", [False, True])
def test_a_plan_spark_must_run_is_not_taken(spark, wide_table, planned):
    small = _small_input(spark, wide_table)
    assert local_rows(small.groupBy("part").count()) is None
    assert local_rows(spark.range(5)) is None
    # A Python function runs in a Python worker: the optimizer cannot compute it.
    plus_one = F.udf(lambda v: v + 1, "long")
    with_udf = small.select(plus_one("id").alias("next"))
    assert local_rows(with_udf) is None
    rows = collect_small(with_udf, 100, planned=planned)
    assert rows is not None and sorted(rows["next"].to_pylist()) == list(range(1, 61))


@pytest.mark.parametrize("planned", [False, True])
def test_collecting_a_local_plan_runs_no_spark_job(spark, wide_table, planned):
    counters = SparkCounters(spark)
    small = _small_input(spark, wide_table)
    before, _ = counters.latest()

    rows = collect_small(small.where("bucket = 1"), 100, planned=planned)

    assert rows is not None and rows.num_rows == 30
    assert counters.latest()[0] == before
    # The counter sees the job a plan that is not local needs.
    assert collect_small(small.groupBy("bucket").count(), 100, planned=planned) is not None
    assert counters.latest()[0] > before


@pytest.mark.parametrize("planned", [False, True])
def test_the_row_bound_holds_for_a_local_plan(spark, wide_table, planned):
    small = _small_input(spark, wide_table)
    assert collect_small(small, 59, planned=planned) is None
    rows = collect_small(small, 60, planned=planned)
    assert rows is not None and rows.num_rows == 60
    assert collect_small(small, 60, 100, planned=planned) is None  # the byte bound holds too


def test_a_planned_frame_is_bounded_by_a_limit_only_when_spark_must_run_it(
    spark, wide_table, monkeypatch
):
    """A limit is one more analysis of the whole query: a frame expected to be computed
    while planning is looked at as it is first."""
    small = _small_input(spark, wide_table)
    limits = []
    limit = type(small).limit
    monkeypatch.setattr(type(small), "limit", lambda self, n: limits.append(n) or limit(self, n))

    assert collect_small(small.where("bucket = 1"), 100, planned=True).num_rows == 30
    assert limits == []
    assert collect_small(small.where("bucket = 1"), 100).num_rows == 30
    assert limits == [101]
    assert collect_small(small.groupBy("bucket").count(), 100, planned=True).num_rows == 2
    assert limits == [101, 101]


def test_a_large_local_plan_is_collected_by_its_job(spark):
    """Above LOCAL_ROWS_BYTES the rows cost more across Py4J than a job: the job collects."""
    counters = SparkCounters(spark)
    rows = 20_000
    large = _local_frame_of(spark, rows)
    plan = large._jdf.queryExecution().optimizedPlan()
    assert plan.nodeName() == "LocalRelation" and estimated_bytes(plan) > LOCAL_ROWS_BYTES
    assert local_rows(large) is None
    before, _ = counters.latest()
    collected = collect_small(large, rows)
    assert collected is not None and collected.num_rows == rows
    assert counters.latest()[0] > before
    assert collect_small(large, rows, planned=True).num_rows == rows
    small = _local_frame_of(spark, 100)
    assert local_rows(small) is not None
