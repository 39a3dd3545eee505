"""Issue 28: a small output is collected by one Spark stage, not a limit's shuffle.

``collect_small`` returns a frame's rows when it has at most ``n`` and None when it has
more, whichever partitions the rows sit in; the Spark job it runs has one stage (a plain
``limit`` over several partitions adds a shuffle stage, ``CollectLimitExec``). Stages are
counted with Spark's status tracker, by job group.
"""

from __future__ import annotations

import itertools

from etl.delta.files import collect_small

_groups = itertools.count()


def _stages(spark, action) -> tuple[object, list[int]]:
    """``action()``'s result and the stages of the Spark jobs it ran."""
    sc = spark.sparkContext
    group = f"collect-small-{next(_groups)}"
    sc.setJobGroup(group, "collect_small test")
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    stages = [
        s for job in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(job).stageIds
    ]
    return result, stages


def _files(spark, tmp_path, rows: int, files: int):
    """``rows`` ids in ``files`` Parquet files, read back: a scan Spark cannot count
    without reading it (over a ``range`` the optimizer drops a limit it knows is no limit)."""
    path = str(tmp_path / "rows")
    spark.range(0, rows, numPartitions=files).write.parquet(path)
    frame = spark.read.parquet(path)
    assert frame.rdd.getNumPartitions() > 1
    return frame


def test_rows_spread_over_partitions_are_collected_in_order_by_one_stage(spark, tmp_path):
    frame = _files(spark, tmp_path, 12, 4)
    expected = frame.toArrow().column("id").to_pylist()
    rows, stages = _stages(spark, lambda: collect_small(frame, 12))
    assert rows is not None
    assert rows.column("id").to_pylist() == expected  # the frame's own order
    assert sorted(expected) == list(range(12))
    assert len(stages) == 1


def test_one_row_too_many_over_all_partitions_is_refused_by_one_stage(spark, tmp_path):
    # 3 rows per file: no partition alone has more than n, together they have n + 1.
    frame = _files(spark, tmp_path, 12, 4)
    rows, stages = _stages(spark, lambda: collect_small(frame, 11))
    assert rows is None
    assert len(stages) == 1


def test_a_frame_far_over_the_bound_is_refused(spark):
    frame = spark.range(0, 10_000, numPartitions=3).selectExpr("id", "cast(id AS string) AS s")
    assert collect_small(frame, 5) is None
    rows = collect_small(frame, 10_000)
    assert rows is not None and rows.num_rows == 10_000
    assert rows.column("s").to_pylist()[:3] == ["0", "1", "2"]


def test_an_empty_frame_gives_an_empty_table_with_its_schema(spark):
    frame = spark.range(0, 0, numPartitions=2).selectExpr("id", "cast(id AS string) AS s")
    rows = collect_small(frame, 10)
    assert rows is not None and rows.num_rows == 0
    assert rows.column_names == ["id", "s"]
