"""What a batch asks of Spark, per kind of job: Spark jobs, SQL executions and the
DataFrames the engine has Spark analyse or optimise (each a pass of Catalyst's rules in the
driver JVM: most of a small batch's JVM CPU besides its one Spark job). Counted over the
batches of ``run_once``s of a small chain, after the first epochs (which create the
tables); a step that comes back (a second size estimate, a projection or filter that
changes nothing, another collect) raises a count above its bound."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from catalog import load_catalog
from etl import FileSource, Pipeline, Runner
from etl.delta.read import DRIVER_READ_BYTES, read_arrow
from tests.support.chains import SCHEMA, three_jobs
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


def _fan_in(incoming: Path) -> Pipeline:
    """Two branches of one input, merged back by a union and by a join."""
    pipeline = Pipeline("fan_in")
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    for parity in (0, 1):
        pipeline.sql(
            f"branch_{parity}",
            output=f"branch_{parity}",
            inputs=["events"],
            query=f"SELECT id, customer, amount FROM events WHERE id % 2 = {parity}",
        )
    pipeline.sql(
        "totals",
        output="totals",
        inputs=["branch_0", "branch_1"],
        mode="merge",
        keys=("customer",),
        query=(
            "SELECT customer, count(*) AS orders, sum(amount) AS amount FROM "
            "(SELECT * FROM branch_0 UNION ALL SELECT * FROM branch_1) GROUP BY customer"
        ),
    )
    pipeline.sql(
        "pairs",
        output="pairs",
        inputs=["branch_0", "branch_1"],
        query=(
            "SELECT a.customer, count(*) AS matches FROM branch_0 a "
            "JOIN branch_1 b ON a.customer = b.customer GROUP BY a.customer"
        ),
    )
    return pipeline


def _work_per_batch(
    tmp_path: Path,
    spark,
    epochs: int,
    chain: Callable[[Path], Pipeline] = _chain,
    first_rows: int = 9,
) -> dict[str, list[SparkWork]]:
    incoming = tmp_path / "in"
    incoming.mkdir()
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    pipeline = chain(incoming)
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
            for i in range(first_rows if epoch == 0 else 9)
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
    # less). A SQL query the optimizer computes has its own plan looked at, without the
    # limit (session 53: one analysis less). Before session 35: 8 or 9.
    # Tasks: a small batch's local relations are one partition each (session 46: the
    # merge's aggregate over its input ran three tasks, a map task per core), and a query
    # the optimizer does not compute reads its inputs in one partition, so that its
    # aggregate needs no exchange: one task (session 49: a map task and a reduce task).
    assert most == {
        "ingest": SparkWork(jobs=1, executions=1, planning=4, tasks=1),
        "clean": SparkWork(jobs=0, executions=0, planning=2, tasks=0),
        "latest": SparkWork(jobs=1, executions=1, planning=3, tasks=1),
        "ranked": SparkWork(jobs=0, executions=0, planning=2, tasks=0),
        "doubled": SparkWork(jobs=0, executions=0, planning=4, tasks=0),
    }, most


def test_a_query_spark_cannot_compute_while_planning_runs_in_one_task(tmp_path, spark):
    """A union's aggregate and a join of small inputs: each input in one partition, so the
    query needs no exchange (before session 49: a map task per input, then a reduce task;
    a join also broadcast one side in a job of its own). Projections and filters stay
    without a job. The rows are the query's all the same."""
    epochs = 5
    work = _work_per_batch(tmp_path, spark, epochs, chain=_fan_in)
    for job in ("totals", "pairs"):
        assert [w.tasks for w in work[job]] == [1] * (epochs - 2), (job, work[job])
        assert [w.jobs for w in work[job]] == [1] * (epochs - 2), (job, work[job])
    for job in ("branch_0", "branch_1"):
        assert {w.jobs for w in work[job]} == {0}, (job, work[job])

    # What the JSON files held (_work_per_batch: ids epoch * 10 + i, customer i % 3).
    orders = [(e * 10 + i, i % 3, i + 0.5) for e in range(epochs) for i in range(9)]
    # A merge by customer: each customer's row is its latest batch's (the last epoch's).
    last = [(c, a) for id_, c, a in orders if id_ // 10 == epochs - 1]
    expected_totals = {
        c: (sum(1 for k, _ in last if k == c), sum(a for k, a in last if k == c)) for c in range(3)
    }
    totals = read_arrow(str(tmp_path / "wh" / "totals")).to_pylist()
    assert {r["customer"]: (r["orders"], r["amount"]) for r in totals} == expected_totals

    # Each epoch's pairs (an append of a join of the epoch's two slices).
    by_parity = Counter((id_ // 10, id_ % 2, c) for id_, c, _ in orders)
    expected_pairs = Counter()
    for (epoch, parity, customer), n in by_parity.items():
        if parity == 0:
            expected_pairs[(epoch, customer)] += n * by_parity[(epoch, 1, customer)]
    pairs = read_arrow(str(tmp_path / "wh" / "pairs")).to_pylist()
    first = min(r["_epoch"] for r in pairs)  # the run's epochs are numbered from its first
    assert {(r["_epoch"] - first, r["customer"]): r["matches"] for r in pairs} == {
        key: n for key, n in expected_pairs.items() if n
    }


def test_a_first_batch_larger_than_the_driver_reads_leaves_the_next_ones_without_a_job(
    tmp_path, spark
):
    """The first epoch's slice is more than the driver reads (a Parquet scan, a Spark job);
    the filter reading it is still a filter: its next batches, over small slices the
    driver reads, are computed while planning, not in one task of a job of their own."""
    assert DRIVER_READ_BYTES < 100_000 * 16  # ids and amounts: 16 bytes a row in Parquet
    work = _work_per_batch(tmp_path, spark, 5, first_rows=100_000)
    assert {w.jobs for w in work["clean"]} == {0}, work["clean"]
    assert {w.tasks for w in work["latest"]} == {1}, work["latest"]
