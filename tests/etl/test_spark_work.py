"""What a batch asks of Spark, per kind of job: Spark jobs, SQL executions and the
DataFrames the engine has Spark analyse or optimise (each a pass of Catalyst's rules in the
driver JVM: most of a small batch's JVM CPU besides its one Spark job). Counted over the
batches of ``run_once``s of a small chain, after the first epochs (which create the
tables); a step that comes back (a second size estimate, a projection or filter that
changes nothing, another collect) raises a count above its bound."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from catalog import load_catalog
from etl import Pipeline, Runner
from tests.support.chains import three_jobs
from tests.support.spark_work import PLANNING_CALLS, SparkCounters, py4j_calls

pytestmark = [pytest.mark.spark]


@dataclass(frozen=True)
class SparkWork:
    jobs: int
    executions: int
    planning: int
    tasks: int


def _chain(incoming: Path) -> Pipeline:
    """Each kind of batch once: a root append, a SQL append reading a slice, a merge and
    an overwrite reading a whole table, a Python transform."""
    pipeline = three_jobs(incoming, "spark_work")
    pipeline.sql(
        "ranked",
        output="ranked",
        inputs=["latest"],
        mode="overwrite",
        query="SELECT customer, amount, amount > 10 AS big FROM latest",
    )

    @pipeline.job("doubled", output="doubled", inputs=["clean"])
    def doubled(ctx):
        return ctx.inputs["clean"].selectExpr("id", "amount * 2 AS amount")

    return pipeline


def _work_per_batch(tmp_path: Path, spark, epochs: int) -> dict[str, list[SparkWork]]:
    incoming = tmp_path / "in"
    incoming.mkdir()
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    pipeline = _chain(incoming)
    # One batch at a time, so that what Spark did between two looks is one batch's.
    runner = Runner(
        pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark, max_parallel_jobs=1
    )
    runner.register()
    counters = SparkCounters(spark)
    work: dict[str, list[SparkWork]] = {}
    run_batch = runner.engine.run_batch

    def counted_batch(job, batch, lease, **kwargs):
        jobs, executions = counters.latest()
        with py4j_calls() as calls:
            result = run_batch(job, batch, lease, **kwargs)
        planning = sum(n for name, n in calls.items() if name in PLANNING_CALLS)
        after_jobs, after_executions = counters.latest()
        work.setdefault(job.name, []).append(
            SparkWork(
                after_jobs - jobs,
                after_executions - executions,
                planning,
                counters.tasks(jobs, after_jobs),
            )
        )
        return result

    runner.engine.run_batch = counted_batch
    for epoch in range(epochs):
        rows = [
            json.dumps({"id": epoch * 10 + i, "customer": i % 3, "amount": i + 0.5})
            for i in range(9)
        ]
        (incoming / f"{epoch:04d}.json").write_text("\n".join(rows) + "\n")
        result = runner.run_once()
        assert result.ok and len(result.batches) == len(pipeline.ordered_jobs()), result
    catalog.close()
    return {job: batches[2:] for job, batches in work.items()}


def test_a_batch_asks_spark_for_one_job_and_few_plans(tmp_path, spark):
    work = _work_per_batch(tmp_path, spark, 5)
    most = {
        job: SparkWork(
            jobs=max(w.jobs for w in batches),
            executions=max(w.executions for w in batches),
            planning=max(w.planning for w in batches),
            tasks=max(w.tasks for w in batches),
        )
        for job, batches in work.items()
    }
    # Per batch: one Spark job (the output's collect; a merge's, of its updates). An output
    # that Spark's optimizer computes while planning (a projection or filter of a small
    # input, which the driver read into a local relation) needs no job: it is taken from
    # the optimized plan (issue 28, session 45). A SQL transform's input views need no SQL
    # execution of their own: a view the session had before, of the same schema, is put in
    # its catalog directly (session 48: one execution per view before). Planning, a
    # derived SQL batch: its epochs' filter only where a file may hold other epochs, the
    # query with its `_epoch` (one analysis; before session 48 the view's command and
    # `withColumn` were two more), the collect's limit and its optimized plan (the size
    # estimate's, and the one its job runs); its small input, read by the driver, is a
    # local relation that Spark does not plan a read for (session 44: one `parquet` call
    # less). Before session 35: 8 or 9.
    # Tasks: a small batch's local relations are one partition each (session 46: the
    # merge's aggregate over its input ran three tasks, a map task per core).
    assert most == {
        "ingest": SparkWork(jobs=1, executions=1, planning=4, tasks=1),
        "clean": SparkWork(jobs=0, executions=0, planning=3, tasks=0),
        "latest": SparkWork(jobs=1, executions=1, planning=3, tasks=2),
        "ranked": SparkWork(jobs=0, executions=0, planning=3, tasks=0),
        "doubled": SparkWork(jobs=0, executions=0, planning=4, tasks=0),
    }, most
