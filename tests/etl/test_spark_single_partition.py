"""Issue 28: a small batch's query that Spark cannot compute while planning reads its
inputs in one partition each, and then runs in one task without an exchange.

``evaluated_while_planning`` tells the two kinds of query apart by their analyzed plans:
a wrong "yes" would run an aggregate in a map task per input and a reduce task; a wrong
"no" would give a projection of a local relation (computed by the optimizer, no job) a
Spark job. ``single_partition`` must change where rows are computed, never which.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from etl.spark import ONE_TASK_CONF, evaluated_while_planning, single_partition

pytestmark = pytest.mark.spark

_ROWS = pa.table(
    {
        "customer": pa.array([i % 7 for i in range(60)], pa.int64()),
        "category": pa.array([f"c{i % 4}" for i in range(60)]),
        "amount": pa.array([i * 1.5 for i in range(60)]),
    }
)

COMPUTED_WHILE_PLANNING = {
    "projection": "SELECT customer, amount * 2 AS doubled FROM a",
    "filter": "SELECT * FROM a WHERE customer % 3 = 1",
    "limit": "SELECT * FROM (SELECT customer FROM a WHERE amount > 3) LIMIT 5",
    "a string with a line break": "SELECT customer, 'x\nUnion y' AS note FROM a",
}
RUN_BY_SPARK = {
    "aggregate": "SELECT category, count(*) AS n, sum(amount) AS s FROM a GROUP BY category",
    "union": "SELECT customer FROM a UNION ALL SELECT customer FROM b",
    "union aggregate": (
        "SELECT category, sum(amount) AS s FROM "
        "(SELECT * FROM a UNION ALL SELECT * FROM b) GROUP BY category"
    ),
    "join": (
        "SELECT a.customer, count(*) AS n FROM a JOIN b ON a.customer = b.customer "
        "GROUP BY a.customer"
    ),
    "window": (
        "SELECT customer, rank() OVER (PARTITION BY category ORDER BY amount DESC) AS r FROM a"
    ),
    "order": "SELECT DISTINCT category FROM a ORDER BY category",
    "scalar subquery": "SELECT customer FROM a WHERE amount > (SELECT avg(amount) FROM b)",
}


@pytest.fixture
def session(spark):
    session = spark.newSession()
    for key, value in ONE_TASK_CONF.items():
        session.conf.set(key, value)
    return session


def _views(session, *, one_partition: bool) -> None:
    for name, rows in (("a", _ROWS), ("b", _ROWS.slice(10, 30))):
        frame = session.createDataFrame(rows)
        (single_partition(frame) if one_partition else frame).createOrReplaceTempView(name)


@pytest.mark.parametrize("query", COMPUTED_WHILE_PLANNING.values(), ids=COMPUTED_WHILE_PLANNING)
def test_a_projection_or_filter_of_local_relations_is_computed_while_planning(session, query):
    _views(session, one_partition=False)
    frame = session.sql(query)
    assert evaluated_while_planning(frame._jdf.queryExecution().analyzed())
    # Spark agrees: the optimized plan is the rows themselves.
    assert frame._jdf.queryExecution().optimizedPlan().nodeName() == "LocalRelation"


def test_a_query_is_told_apart_by_its_own_operators_not_its_inputs(session, tmp_path):
    """An input larger than the driver reads is a Parquet scan that Spark runs a job
    for: a projection of it is still a projection (its next, smaller input is a local
    relation again), and an aggregate of local relations is still an aggregate."""
    session.createDataFrame(_ROWS).write.parquet(str(tmp_path / "a"))
    session.read.parquet(str(tmp_path / "a")).createOrReplaceTempView("a")
    projection = session.sql(COMPUTED_WHILE_PLANNING["projection"])
    assert projection._jdf.queryExecution().optimizedPlan().nodeName() != "LocalRelation"
    assert evaluated_while_planning(projection._jdf.queryExecution().analyzed())
    _views(session, one_partition=False)
    aggregate = session.sql(RUN_BY_SPARK["aggregate"])
    assert not evaluated_while_planning(aggregate._jdf.queryExecution().analyzed())


@pytest.mark.parametrize("query", RUN_BY_SPARK.values(), ids=RUN_BY_SPARK)
def test_any_other_query_runs_in_one_task_over_single_partitions(spark, session, query):
    _views(session, one_partition=False)
    frame = session.sql(query)
    assert not evaluated_while_planning(frame._jdf.queryExecution().analyzed())
    expected = sorted(map(tuple, frame.collect()))

    _views(session, one_partition=True)
    frame = session.sql(query)
    tracker = spark.sparkContext.statusTracker()
    group = f"single-partition-{id(frame)}"
    spark.sparkContext.setJobGroup(group, "one task")
    try:
        rows = sorted(map(tuple, frame.collect()))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert rows == expected
    plan = frame._jdf.queryExecution().executedPlan().toString()
    # A job per query (and per scalar subquery), each one stage of one task.
    stages = [
        tracker.getStageInfo(stage).numTasks
        for job in tracker.getJobIdsForGroup(group)
        for stage in tracker.getJobInfo(job).stageIds
    ]
    assert stages and stages == [1] * len(stages), plan
    assert "Exchange" not in plan
