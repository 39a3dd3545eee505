"""Issue 28: a SQL transform's inputs become views in one catalog call.

Spark runs a view's creation as a command (analysis, a SQL execution, listener events):
about 10 ms of driver JVM per input per batch. ``replace_temp_view`` copies the session's
earlier definition of a view of the same name and schema with the new plan. The view must
then read exactly what the command would have made it read.
"""

from __future__ import annotations

import pytest
from pyspark.sql.classic.dataframe import DataFrame

from etl.spark import BatchSessions, replace_temp_view

pytestmark = pytest.mark.spark


@pytest.fixture
def commands(monkeypatch) -> list[str]:
    """The views created by Spark's command (``createOrReplaceTempView``)."""
    created: list[str] = []
    command = DataFrame.createOrReplaceTempView

    def counted(self, name):
        created.append(name)
        return command(self, name)

    monkeypatch.setattr(DataFrame, "createOrReplaceTempView", counted)
    return created


def _rows(session, query: str) -> list[tuple]:
    return sorted(tuple(r) for r in session.sql(query).collect())


def test_a_view_of_the_same_schema_is_replaced_without_the_command(spark, commands):
    session = spark.newSession()
    first = session.createDataFrame([(1, "a")], "id long, name string")
    second = session.createDataFrame([(2, "b"), (3, "c")], "id long, name string")
    replace_temp_view(first, "orders")
    assert _rows(session, "SELECT * FROM orders") == [(1, "a")]
    replace_temp_view(second, "orders")
    assert commands == ["orders"]  # the second view: one catalog call
    assert _rows(session, "SELECT * FROM orders") == [(2, "b"), (3, "c")]
    assert _rows(session, "SELECT a.id FROM orders a JOIN orders b USING (id)") == [(2,), (3,)]
    assert session.table("orders").schema == second.schema


def test_another_schema_or_name_goes_through_the_command(spark, commands):
    session = spark.newSession()
    replace_temp_view(session.createDataFrame([(1, "a")], "id long, name string"), "orders")
    wider = session.createDataFrame([(2, "b", 1.5)], "id long, name string, amount double")
    replace_temp_view(wider, "orders")
    assert _rows(session, "SELECT * FROM orders") == [(2, "b", 1.5)]
    not_null = session.range(4).selectExpr("id", "'x' AS name")  # id: not nullable
    replace_temp_view(not_null, "orders")
    replace_temp_view(wider, "customers")
    assert commands == ["orders", "orders", "orders", "customers"]
    assert _rows(session, "SELECT count(*) FROM orders") == [(4,)]
    assert session.table("orders").schema == not_null.schema


def test_views_stay_in_their_session_and_follow_a_reused_one(spark, commands):
    sessions = BatchSessions(spark)
    job = sessions.session("job")
    other = spark.newSession()
    schema = "id long"
    replace_temp_view(job.createDataFrame([(1,)], schema), "orders")
    replace_temp_view(other.createDataFrame([(9,)], schema), "orders")
    assert _rows(job, "SELECT * FROM orders") == [(1,)]
    assert _rows(other, "SELECT * FROM orders") == [(9,)]

    again = sessions.session("job")  # the next batch: no view of the last one...
    assert again is job and not again.catalog.tableExists("orders")
    replace_temp_view(again.createDataFrame([(2,)], schema), "orders")
    assert commands == ["orders", "orders"]  # ...and its new view without the command
    assert _rows(again, "SELECT * FROM orders") == [(2,)]
    assert _rows(other, "SELECT * FROM orders") == [(9,)]
