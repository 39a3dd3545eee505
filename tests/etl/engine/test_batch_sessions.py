"""Issue 28: a job's batches reuse one Spark session, handed out as a new one would be.

A new session costs its first query the building of its state; the engine reuses one per
job whose batches change nothing in it but the views and the small-batch settings (SQL
transforms, none). Nothing of one batch may reach the next: no temporary view (a view of
the job's output registered by one batch and not the next would be read stale), and the
settings its size asks for: a new session's after a small batch, not the small-batch ones
of the batch before.
"""

from __future__ import annotations

import pytest

from etl.spark import ONE_TASK_CONF, SMALL_BATCH_CONF, BatchSessions


@pytest.fixture
def sessions(spark) -> BatchSessions:
    return BatchSessions(spark)


def _settings(session) -> dict[str, str | None]:
    """The values in effect (a setting's default when it is not set; None: none)."""
    return {key: session.conf.get(key) for key in ONE_TASK_CONF}


def test_a_reused_session_has_none_of_the_last_batchs_views(spark, sessions):
    first = sessions.session("job")
    first.range(3).createOrReplaceTempView("previous_output")
    first.range(2).createOrReplaceTempView("an_input")
    assert first.catalog.tableExists("previous_output")

    second = sessions.session("job")
    assert second is first  # reused, not built again
    assert not second.catalog.tableExists("previous_output")
    assert not second.catalog.tableExists("an_input")
    with pytest.raises(Exception, match="previous_output"):
        second.sql("SELECT * FROM previous_output").collect()


def test_a_reused_session_has_the_settings_of_its_batchs_size(spark, sessions):
    own = _settings(spark)  # the suite's shared session: other tests may have set some
    new = _settings(spark.newSession())
    expected = {
        "default": new,
        "small": {**new, **SMALL_BATCH_CONF},
        "one_task": ONE_TASK_CONF,
    }
    assert new != expected["small"] != expected["one_task"]  # Spark's own settings differ
    first = sessions.session("job")
    assert _settings(first) == new
    sessions.size("job", "small")
    assert _settings(first) == expected["small"]

    for size in ("one_task", "small", "default", "default", "one_task", "default", "small"):
        again = sessions.session("job")
        assert again is first
        sessions.size("job", size)
        assert _settings(again) == expected[size], size
    # The session the job was built from is untouched.
    assert _settings(spark) == own


def test_each_job_has_a_session_of_its_own(spark, sessions):
    one, other = sessions.session("a"), sessions.session("b")
    assert one is not other
    one.range(1).createOrReplaceTempView("only_in_a")
    assert not other.catalog.tableExists("only_in_a")
    sessions.size("a", "one_task")
    sessions.size("b", "default")
    assert _settings(one) == ONE_TASK_CONF
    assert _settings(other) == _settings(spark.newSession())
