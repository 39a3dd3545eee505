"""Jobs on the engine: write modes, input read modes, SQL and Python transforms,
micro-batches, and the errors a broken job gets."""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import threading
from pathlib import Path

import pytest
from pyspark.logger import PySparkLogger
from pyspark.sql import functions as F

from catalog import EpochState, load_catalog
from etl import (
    FileSource,
    Input,
    JobExecutionError,
    OutputSchemaError,
    Pipeline,
    PipelineDefinitionError,
    Runner,
    TransformError,
    UsageError,
    snapshot,
)
from etl.engine import batch as batch_module
from etl.engine.commit import RecordedSchemas

pytestmark = pytest.mark.spark

SCHEMA = "id INT, customer STRING, amount DOUBLE"


class Env:
    def __init__(self, root: Path, spark, pipeline: Pipeline):
        self.incoming = root / "incoming"
        self.catalog = load_catalog(None, warehouse=root / "warehouse")
        self.runner = Runner(
            pipeline, catalog=self.catalog, warehouse=str(root / "warehouse"), spark=spark
        )
        self.spark = spark
        self._n = 0

    def drop(self, rows: list[dict]) -> None:
        self._n += 1
        hidden = self.incoming / f".batch{self._n}"
        hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(hidden, self.incoming / f"batch{self._n:04d}.json")

    def rows(self, table: str, *columns: str, level: str = "read-committed") -> list[tuple]:
        reader = snapshot(self.catalog, [table], level, spark=self.spark)
        return sorted(tuple(r) for r in reader.table(table).select(*columns).collect())


def orders_pipeline(incoming: Path, **ingest) -> Pipeline:
    incoming.mkdir(parents=True, exist_ok=True)
    pipeline = Pipeline("shop")
    pipeline.ingest(
        "ingest_orders",
        source=FileSource("order_files", path=incoming, format="json", schema=SCHEMA, **ingest),
        output="orders",
    )
    return pipeline


def run_two_epochs(env: Env) -> None:
    """Epoch 1: orders 1 (ann, 5.0) and 2 (bob, 20.0); epoch 2: order 3 (ann, 30.0)."""
    env.drop(
        [{"id": 1, "customer": "ann", "amount": 5.0}, {"id": 2, "customer": "bob", "amount": 20.0}]
    )
    assert env.runner.run_once().ok
    env.drop([{"id": 3, "customer": "ann", "amount": 30.0}])
    assert env.runner.run_once().ok


def test_append_merge_and_overwrite_modes(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "big_orders",
        output="big",
        query="SELECT id, customer, amount FROM orders WHERE amount >= 10",
        inputs=["orders"],
    )

    @pipeline.job("totals", output="totals", inputs=["orders"], mode="merge", keys=["customer"])
    def totals(ctx):
        new = ctx["orders"].groupBy("customer").agg(F.sum("amount").alias("add"))
        if ctx.previous is None:
            return new.withColumnRenamed("add", "total")
        return new.join(ctx.previous, "customer", "left").select(
            "customer", (F.coalesce("total", F.lit(0.0)) + F.col("add")).alias("total")
        )

    pipeline.sql(
        "ranking",
        output="ranking",
        query="SELECT customer, total, rank() OVER (ORDER BY total DESC) AS pos FROM totals",
        inputs=["totals"],
        mode="overwrite",
    )
    env = Env(tmp_path, spark, pipeline)
    run_two_epochs(env)

    assert env.rows("orders", "id", "_epoch") == [(1, 1), (2, 1), (3, 2)]
    assert env.rows("big", "id", "_epoch") == [(2, 1), (3, 2)]
    assert env.rows("totals", "customer", "total", "_epoch") == [("ann", 35.0, 2), ("bob", 20.0, 1)]
    assert env.rows("ranking", "customer", "pos") == [("ann", 1), ("bob", 2)]
    # Overwrite recomputes: only the latest epoch's rows remain.
    assert {r[0] for r in env.rows("ranking", "_epoch")} == {2}


SQL_SHAPES = {
    "semicolons": "SELECT id, amount FROM orders AS semicolons WHERE amount >= 10;; \n",
    "line_comment": "SELECT id, amount FROM orders AS line_comment WHERE amount >= 10 -- big",
    "cte_order_limit": (
        "WITH cte_order_limit AS (SELECT id, amount FROM orders WHERE amount >= 10) "
        "SELECT * FROM cte_order_limit ORDER BY id LIMIT 100"
    ),
    "from_first": "FROM orders AS from_first SELECT id, amount WHERE amount >= 10",
    "comment_after_semicolon": (
        "SELECT id, amount FROM orders AS comment_after_semicolon WHERE amount >= 10; -- alone"
    ),
}
"""Queries of the same rows, each naming its job (to tell its runs apart)."""


def test_a_sql_transform_is_one_query_with_its_epoch_whatever_its_shape(
    tmp_path, spark, monkeypatch
):
    """The engine runs a SQL transform and its ``_epoch`` as one query (one analysis), the
    transform as a subquery; a query no subquery can hold runs alone, as it is."""
    pipeline = orders_pipeline(tmp_path / "incoming")
    for name, query in SQL_SHAPES.items():
        pipeline.sql(name, output=name, query=query, inputs=["orders"])
    queries: list[str] = []
    session_sql = type(spark).sql

    def counted(self, query, *args, **kwargs):
        queries.append(query)
        return session_sql(self, query, *args, **kwargs)

    monkeypatch.setattr(type(spark), "sql", counted)
    tagged_sql = batch_module.sql_frame

    def counted_tagged(session, query):
        queries.append(query)
        return tagged_sql(session, query)

    monkeypatch.setattr(batch_module, "sql_frame", counted_tagged)
    env = Env(tmp_path, spark, pipeline)
    run_two_epochs(env)
    for name, query in SQL_SHAPES.items():
        assert env.rows(name, "id", "amount", "_epoch") == [(2, 20.0, 1), (3, 30.0, 2)], name
        runs = [q for q in queries if name in q]
        if name == "comment_after_semicolon":  # tried with _epoch once, then run alone
            assert len(runs) == 3 and runs[1:] == [query, query], runs
        else:
            assert len(runs) == 2 and all(q.endswith("\n)") for q in runs), runs


def test_a_small_batch_looks_for_its_rows_in_the_plan_of_a_query_spark_computes_while_planning(
    tmp_path, spark, monkeypatch
):
    """A filter over inputs the driver read is computed by Spark's optimizer: its rows are
    looked for in the query's own plan (no row-bounding limit to analyze); an aggregate's
    need a Spark job, bounded as before."""
    from etl.delta import files as files_module

    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "big",
        output="big",
        query="SELECT id, amount FROM orders WHERE amount > 10",
        inputs=["orders"],
    )
    pipeline.sql(
        "spend",
        output="spend",
        query="SELECT customer, sum(amount) AS amount FROM orders GROUP BY customer",
        inputs=["orders"],
        mode="overwrite",
    )
    seen: dict[tuple[str, ...], list[bool]] = {}
    collect_small = files_module.collect_small

    def recorded(df, *args, planned=False, **kwargs):
        seen.setdefault(tuple(df.columns), []).append(planned)
        return collect_small(df, *args, planned=planned, **kwargs)

    monkeypatch.setattr(files_module, "collect_small", recorded)
    env = Env(tmp_path, spark, pipeline)
    run_two_epochs(env)
    assert env.rows("big", "id", "amount") == [(2, 20.0), (3, 30.0)]
    assert env.rows("spend", "customer", "amount") == [("ann", 35.0), ("bob", 20.0)]
    assert seen[("id", "amount", "_epoch")] == [True, True]
    assert seen[("customer", "amount", "_epoch")] == [False, False]


def test_a_failing_sql_transform_reports_its_own_error_once(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql("typo", output="typo", query="SELECT id, amuont FROM orders", inputs=["orders"])
    env = Env(tmp_path, spark, pipeline)
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    errors = PySparkLogger.getLogger("SQLQueryContextLogger")
    errors.addHandler(handler)
    try:
        env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
        (failure,) = env.runner.run_once().failures
    finally:
        errors.removeHandler(handler)
    assert isinstance(failure.exception, TransformError)
    assert "amuont" in failure.error and "job 'typo'" in failure.error
    assert "AS _epoch FROM" not in failure.error  # the query's own words, not the engine's
    # PySpark logs the error of the query the job runs, not of the engine's attempt.
    assert len([r for r in logged if "amuont" in r.getMessage()]) == 1


def test_snapshot_input_and_epoch_context(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    seen = []

    @pipeline.job("running", output="running", inputs=[Input("orders", read="snapshot")])
    def running(ctx):
        seen.append((ctx.epoch, ctx.first_epoch, ctx.barrier_ts is not None))
        return ctx["orders"].agg(F.count(F.lit(1)).alias("orders_so_far"))

    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    assert env.runner.run_once().ok
    env.drop([{"id": 2, "customer": "b", "amount": 1.0}, {"id": 3, "customer": "c", "amount": 1.0}])
    assert env.runner.run_once().ok
    assert env.rows("running", "_epoch", "orders_so_far") == [(1, 1), (2, 3)]
    assert seen == [(1, 1, True), (2, 2, True)]


def test_micro_batches_commit_processed_before_the_epoch_is_sealed(tmp_path, spark):
    """Each micro-batch but the last is recorded PROCESSED; the last commit of a batch
    without a quality gate is sealed right after it, by the seal alone."""
    pipeline = orders_pipeline(tmp_path / "incoming", files_per_micro_batch=1)
    env = Env(tmp_path, spark, pipeline)
    for i in range(3):
        env.drop([{"id": i, "customer": "x", "amount": 1.0}])
    result = env.runner.run_once()
    assert result.ok
    (batch,) = result.batches
    history = env.catalog.state_history("orders", epoch=1)
    assert [(h.state, h.delta_version, h.rows) for h in history] == [
        (EpochState.PROCESSED, 0, 1),
        (EpochState.PROCESSED, 1, 2),
        (EpochState.WRITTEN, 2, 3),
    ]
    assert batch.rows == 3 and env.rows("orders", "id") == [(0,), (1,), (2,)]


def test_transform_errors_name_the_job_and_epoch(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")

    @pipeline.job("broken", output="broken", inputs=["orders"])
    def broken(ctx):
        raise ValueError("boom")

    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    result = env.runner.run_once()
    assert result.exit_code == 1
    (failure,) = result.failures
    assert failure.job == "broken" and failure.epoch == 1
    assert isinstance(failure.exception, TransformError)
    assert (
        "job 'broken'" in failure.error and "epoch 1" in failure.error and "boom" in failure.error
    )
    # The root job still sealed its epoch: a failing consumer holds nobody back upstream.
    assert env.catalog.table_epoch("orders", 1).state is EpochState.WRITTEN


def test_a_udf_failing_while_rows_are_written_names_job_epoch_and_cause(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    invert = F.udf(lambda amount: 1 / (amount - 1.0), "double")

    @pipeline.job("inverted", output="inverted", inputs=["orders"])
    def inverted(ctx):
        return ctx["orders"].select("id", invert("amount").alias("inverse"))

    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    (failure,) = env.runner.run_once().failures
    assert isinstance(failure.exception, JobExecutionError)
    assert failure.error.startswith("job 'inverted' failed at epoch 1: ")
    assert "ZeroDivisionError" in failure.error and "Traceback" not in failure.error
    assert env.catalog.table_epoch("inverted", 1) is None


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("SELECT id, 7 AS _epoch FROM orders", "_epoch"),
        ("SELECT id FROM orders", "lacks key"),
    ],
)
def test_bad_output_columns_are_refused(tmp_path, spark, query, problem):
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "bad", output="bad", query=query, inputs=["orders"], mode="merge", keys=["customer"]
    )
    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    (failure,) = env.runner.run_once().failures
    assert isinstance(failure.exception, OutputSchemaError)
    assert problem in failure.error and "job 'bad'" in failure.error


def shaping_pipeline(incoming: Path) -> tuple[Pipeline, dict[str, bool]]:
    """The orders and a job ``shape`` whose output has a column ``note`` while
    ``state["note"]`` is set."""
    pipeline = orders_pipeline(incoming)
    state = {"note": False}

    @pipeline.job("shape", output="shape", inputs=["orders"])
    def shape(ctx):
        frame = ctx["orders"].select("id")
        return frame.withColumn("note", F.lit("x")) if state["note"] else frame

    return pipeline, state


def test_an_added_column_evolves_the_table_and_a_dropped_one_is_refused(tmp_path, spark):
    pipeline, state = shaping_pipeline(tmp_path / "incoming")
    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    assert env.runner.run_once().ok
    state["note"] = True  # a new nullable column: the table evolves with epoch 2
    env.drop([{"id": 2, "customer": "a", "amount": 1.0}])
    assert env.runner.run_once().ok
    assert env.rows("shape", "id", "note") == [(1, None), (2, "x")]
    state["note"] = False  # a dropped column: Delta cannot make it in place
    env.drop([{"id": 3, "customer": "a", "amount": 1.0}])
    (failure,) = env.runner.run_once().failures
    assert isinstance(failure.exception, OutputSchemaError)
    assert "note" in failure.error and "in place" in failure.error and failure.epoch == 3
    assert env.catalog.table_epoch("shape", 3) is None


def test_a_running_job_reads_its_tables_recorded_schema_once_and_records_an_added_column(
    tmp_path, spark
):
    """A commit records the table's schema in the catalog when it adds a column the
    recorded one lacks; what is recorded is known from the job's commit before, not read
    again each batch."""
    pipeline, state = shaping_pipeline(tmp_path / "incoming")
    env = Env(tmp_path, spark, pipeline)
    read_by_commits = []
    get_table = env.catalog.get_table

    def counted(name, *args, **kwargs):
        if sys._getframe(1).f_code.co_name == "commit_prepared":
            read_by_commits.append(name)
        return get_table(name, *args, **kwargs)

    env.catalog.get_table = counted
    with env.runner:  # its leases held from batch to batch, as in a continuous run
        for epoch in range(1, 5):
            state["note"] = epoch >= 3
            env.drop([{"id": epoch, "customer": "a", "amount": 1.0}])
            assert env.runner.run_once().ok
    recorded = json.loads(env.catalog.get_table("shape").schema_json)
    assert [f["name"] for f in recorded["fields"]] == ["id", "_epoch", "note"]
    assert sorted(read_by_commits) == ["orders", "shape"]  # once each, for four batches
    assert env.rows("shape", "id", "note") == [(1, None), (2, None), (3, "x"), (4, "x")]


def test_a_recorded_schema_is_known_only_while_the_table_moves_on_by_the_commits_that_saw_it():
    """A commit in between (another writer's, a recompute's switch) may have recorded
    another schema: the next commit asks the catalog again."""
    schemas = RecordedSchemas()
    schemas.remember("/w/t", 4, frozenset({"k", "_epoch"}))
    assert schemas.after("/w/t", 5) == {"k", "_epoch"}
    assert schemas.after("/w/t", 6) is None
    assert schemas.after("/w/t", 4) is None
    assert schemas.after("/w/u", 5) is None


def test_pipeline_definition_errors():
    with pytest.raises(PipelineDefinitionError, match="merge mode needs keys"):
        Pipeline("p").sql("j", output="t", query="SELECT 1", inputs=["a"], mode="merge")
    with pytest.raises(PipelineDefinitionError, match="unknown write mode"):
        Pipeline("p").sql("j", output="t", query="SELECT 1", inputs=["a"], mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError, match="either one source or at least one input"):
        Pipeline("p").sql("j", output="t", query="SELECT 1", inputs=[])


@pytest.mark.slow
@pytest.mark.parametrize("max_parallel_jobs", [None, 1])
def test_a_slow_job_does_not_hold_back_upstream_epochs(tmp_path, spark, max_parallel_jobs):
    """Also with one slot: the slow batch stops counting after slow_batch_seconds."""
    pipeline = orders_pipeline(tmp_path / "incoming")
    upstream_went_on = threading.Event()

    @pipeline.job("slow", output="slow", inputs=["orders"])
    def slow(ctx):
        # Busy until the root sealed two more epochs; a runner that held the root back
        # behind this job would never get there (the wait times out, the check fails).
        upstream_went_on.wait(timeout=120)
        return ctx["orders"].select("id")

    env = Env(tmp_path, spark, pipeline)
    if max_parallel_jobs is not None:
        env.runner.max_parallel_jobs = max_parallel_jobs
        env.runner.slow_batch_seconds = 1.0
    stop = threading.Event()
    sealed_while_slow: list[int] = []

    def watch(batch):
        if (
            batch.job == "ingest_orders"
            and env.catalog.latest_written(["slow"]).get("slow") is None
        ):
            sealed_while_slow.append(batch.epoch)
            if len(sealed_while_slow) >= 2:
                upstream_went_on.set()

    env.runner.on_batch = watch
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    result = env.runner.run_continuous(epoch_interval=0.5, stop=stop, max_epochs=4)
    assert result.ok
    assert len(sealed_while_slow) >= 2, sealed_while_slow
    assert env.catalog.latest_written(["slow"])["slow"].epoch == 4


def test_with_one_slot_each_epoch_leaves_the_chain_before_the_next_enters(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql("copy", output="copied", query="SELECT id, amount FROM orders", inputs=["orders"])
    pipeline.sql(
        "total", output="totals", query="SELECT sum(amount) AS s FROM copied", inputs=["copied"]
    )
    env = Env(tmp_path, spark, pipeline)
    env.runner.max_parallel_jobs = 1
    env.runner.register()
    for i in range(3):
        env.drop([{"id": i, "customer": "a", "amount": float(i)}])
        env.runner.open_epoch()
    order: list[tuple[str, int]] = []
    env.runner.on_batch = lambda batch: order.append((batch.job, batch.epoch))

    with env.runner:
        assert env.runner.run_pending().ok

    # Oldest epoch first, then the job furthest downstream: a wave per epoch. All at once
    # (or upstream first) would run the root's epochs 2 and 3 before epoch 1 reached totals.
    assert order == [
        (job, epoch) for epoch in (1, 2, 3) for job in ("ingest_orders", "copy", "total")
    ]


def test_runner_options_are_validated():
    pipeline = Pipeline("p")
    for option in (
        {"max_parallel_jobs": 0},
        {"slow_batch_seconds": -1.0},
        {"backlog_threshold": 0},
        {"backlog_threshold": "sometimes"},
    ):
        with pytest.raises(UsageError, match=next(iter(option))):
            Runner(pipeline, catalog=None, warehouse="w", spark=None, **option)  # type: ignore[arg-type]


def test_a_continuous_run_coalesces_as_soon_as_a_job_is_behind_and_a_run_once_does_not(
    tmp_path, spark
):
    from etl.scheduling import BATCH_BACKLOG_THRESHOLD, CONTINUOUS_BACKLOG_THRESHOLD

    assert CONTINUOUS_BACKLOG_THRESHOLD <= 2 < 3 < BATCH_BACKLOG_THRESHOLD
    env = Env(tmp_path, spark, orders_pipeline(tmp_path / "incoming"))
    env.runner.register()

    def pending(count: int) -> None:
        for _ in range(count):
            env.drop([{"id": env._n, "customer": "a", "amount": 1.0}])
            env.runner.open_epoch()

    pending(3)
    with env.runner:
        once = env.runner.run_pending()
    assert [(b.first_epoch, b.epoch) for b in once.batches] == [(1, 1), (2, 2), (3, 3)]

    pending(3)  # a continuous run opens one more at once: four behind, one batch
    continuous = env.runner.run_continuous(
        epoch_interval=30.0, stop=threading.Event(), max_epochs=1
    )
    assert [(b.first_epoch, b.epoch) for b in continuous.batches] == [(4, 7)]
    assert env.rows("orders", "id") == [(i,) for i in range(6)]


def test_a_stopping_run_finishes_the_epochs_left_in_one_batch_per_job(tmp_path, spark):
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "copy", output="copied", query="SELECT id, customer, amount FROM orders", inputs=["orders"]
    )
    env = Env(tmp_path, spark, pipeline)
    env.runner.register()
    for i in range(5):
        env.drop([{"id": i, "customer": "a", "amount": float(i)}])
        env.runner.open_epoch()
    stop = threading.Event()
    stop.set()  # told to stop before it ran anything: what is issued is finished, coalesced

    result = env.runner.run_continuous(epoch_interval=0.5, stop=stop)

    assert result.ok and not result.epochs_opened
    assert sorted((b.job, b.first_epoch, b.epoch) for b in result.batches) == [
        ("copy", 1, 5),
        ("ingest_orders", 1, 5),
    ]
    assert env.rows("copied", "id") == [(i,) for i in range(5)]
    assert env.catalog.latest_written(["copied"])["copied"].epoch == 5


def test_a_continuous_run_moves_what_the_process_holds_out_of_the_collectors_way(tmp_path, spark):
    """Every full collection scanned all the objects the process held at the start (its
    modules, Spark's and the catalog's), pausing every thread: a continuous run freezes
    them."""
    env = Env(tmp_path, spark, orders_pipeline(tmp_path / "incoming"))
    env.runner.register()
    stop = threading.Event()
    stop.set()
    gc.unfreeze()
    try:
        assert env.runner.run_continuous(epoch_interval=0.5, stop=stop).ok
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_merge_strategy_is_validated_naming_the_job():
    with pytest.raises(PipelineDefinitionError, match=r"job 'j'.*'in-place'.*deletion-vectors"):
        Pipeline("p").sql(
            "j",
            output="t",
            query="SELECT 1",
            inputs=["a"],
            mode="merge",
            keys=["k"],
            merge_strategy="in-place",  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("strategy", "small_table_path"),
    [("deletion-vectors", False), ("copy-on-write", False), ("deletion-vectors", True)],
)
def test_merge_jobs_by_deletion_vectors_or_copy_on_write(
    tmp_path, spark, monkeypatch, strategy, small_table_path
):
    import etl.delta.merge as merge_module
    from etl.delta import active_files, open_table

    if not small_table_path:
        # Past the small-table fast path (which rewrites every file) even for a few rows.
        monkeypatch.setattr(merge_module, "REWRITE_ALL_BYTES", 0)
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "latest",
        output="latest",
        query="SELECT id, customer, amount FROM orders",
        inputs=["orders"],
        mode="merge",
        keys=["id"],
        merge_strategy=strategy,
    )
    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": i, "customer": f"c{i}", "amount": 1.0} for i in range(20)])
    assert env.runner.run_once().ok
    env.drop(
        [{"id": 3, "customer": "x", "amount": 2.0}, {"id": 30, "customer": "y", "amount": 2.0}]
    )
    assert env.runner.run_once().ok
    env.drop([{"id": 3, "customer": "z", "amount": 3.0}, {"id": 4, "customer": "z", "amount": 3.0}])
    assert env.runner.run_once().ok

    expected = {i: (i, f"c{i}", 1.0, 1) for i in range(20)}
    expected[3] = (3, "z", 3.0, 3)
    expected[4] = (4, "z", 3.0, 3)
    expected[30] = (30, "y", 2.0, 2)
    assert env.rows("latest", "id", "customer", "amount", "_epoch") == sorted(expected.values())
    table = open_table(env.catalog.get_table("latest").location)
    deleting = [f for f in active_files(table) if f.deletion_vector is not None]
    if small_table_path:  # every file rewritten: nothing to delete by deletion vector
        assert "deletionVectors" in table.protocol().reader_features and not deleting
    elif strategy == "deletion-vectors":
        assert "deletionVectors" in table.protocol().reader_features
        assert sum(f.deletion_vector.cardinality for f in deleting) == 3  # 3 (twice) and 4
    else:
        assert table.protocol().min_reader_version == 1 and not deleting


@pytest.mark.parametrize("small", [True, False])
def test_a_batch_over_small_input_tables_runs_with_the_small_batch_settings_on_its_own_session(
    tmp_path, spark, monkeypatch, small
):
    import etl.engine.batch as batch_module
    from etl.spark import SMALL_BATCH_CONF

    if not small:
        monkeypatch.setattr(batch_module, "SMALL_BATCH_BYTES", 0)
    pipeline = orders_pipeline(tmp_path / "incoming")
    seen: dict[str, dict[str, str | None]] = {}

    @pipeline.job("look", output="looked", inputs=["orders"])
    def look(ctx):
        seen["batch"] = {key: ctx.spark.conf.get(key, None) for key in SMALL_BATCH_CONF}
        return ctx["orders"].groupBy("customer").agg(F.sum("amount").alias("total"))

    before = {key: spark.conf.get(key, None) for key in SMALL_BATCH_CONF}
    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": i, "customer": f"c{i % 3}", "amount": float(i)} for i in range(9)])
    assert env.runner.run_once().ok

    assert (seen["batch"] == SMALL_BATCH_CONF) is small
    assert {key: spark.conf.get(key, None) for key in SMALL_BATCH_CONF} == before
    assert env.rows("looked", "customer", "total") == [("c0", 9.0), ("c1", 12.0), ("c2", 15.0)]


def test_a_sql_jobs_reused_session_has_the_settings_of_each_batchs_size(
    tmp_path, spark, monkeypatch
):
    """A SQL job's batches share one session: a large batch after a small one runs with
    Spark's settings again, and a small one after it with the small-batch ones."""
    import etl.engine.batch as batch_module

    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "flag",
        output="flags",
        # Spark substitutes the session's setting into the query when it parses it.
        query="SELECT max(id) AS last_id, '${spark.sql.adaptive.enabled}' AS adaptive FROM orders",
        inputs=["orders"],
        mode="append",
    )
    env = Env(tmp_path, spark, pipeline)
    default = spark.newSession().conf.get("spark.sql.adaptive.enabled")
    for i, small in enumerate((True, False, False, True, False), start=1):
        monkeypatch.setattr(batch_module, "SMALL_BATCH_BYTES", 8 * 1024 * 1024 if small else 0)
        env.drop([{"id": i, "customer": "a", "amount": 1.0}])
        result = env.runner.run_once()
        assert result.ok, result.failures
    assert env.rows("flags", "last_id", "adaptive") == [
        (1, "false"),
        (2, default),
        (3, default),
        (4, "false"),
        (5, default),
    ]
    assert default == "true"


def test_a_source_job_runs_with_the_small_batch_settings_when_its_source_knows_the_slice_is_small(
    tmp_path, spark, monkeypatch
):
    import etl.engine.batch as batch_module
    from etl.spark import SMALL_BATCH_CONF

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    seen: list[bool] = []

    def record(ctx):
        seen.append({k: ctx.spark.conf.get(k, None) for k in SMALL_BATCH_CONF} == SMALL_BATCH_CONF)
        return ctx["order_files"]

    pipeline = Pipeline("shop")
    pipeline.ingest(
        "ingest_orders",
        source=FileSource("order_files", path=incoming, format="json", schema=SCHEMA),
        output="orders",
        transform=record,
    )
    env = Env(tmp_path, spark, pipeline)
    env.drop([{"id": 1, "customer": "a", "amount": 1.0}])
    assert env.runner.run_once().ok
    monkeypatch.setattr(batch_module, "SMALL_BATCH_BYTES", 10)  # the next file is larger
    env.drop([{"id": 2, "customer": "b", "amount": 2.0}])
    assert env.runner.run_once().ok
    assert seen == [True, False]
    assert env.rows("orders", "id") == [(1,), (2,)]
