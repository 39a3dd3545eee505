"""Counting what a batch asks of Spark: Spark jobs, SQL executions, and the Py4J calls
that have Spark plan."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from py4j.java_gateway import GatewayClient

PLANNING_CALLS = frozenset(
    {
        # a DataFrame derived from another, or read: one analysis each
        "parquet",
        "load",
        "select",
        "selectExpr",
        "filter",
        "withColumn",
        "drop",
        "join",
        "unionAll",
        "limit",
        "sql",
        "createOrReplaceTempView",
        # the optimizer run behind a size estimate
        "optimizedPlan",
    }
)
"""Py4J calls on a DataFrame (or the session) that have Spark plan: the names of the JVM
methods PySpark calls."""


class SparkCounters:
    """Spark jobs and SQL executions started in the driver, as its status store (fed by
    the listener bus, drained before each look) numbers them."""

    def __init__(self, spark) -> None:
        self._context = spark.sparkContext._jsc.sc()
        self._tracker = spark.sparkContext.statusTracker()
        self._executions = spark._jsparkSession.sharedState().statusStore()

    def latest(self) -> tuple[int, int]:
        self._context.listenerBus().waitUntilEmpty()
        jobs = self._tracker.getJobIdsForGroup(None)
        retained = self._executions.executionsCount()
        # Executions are listed by id: the newest is the last one retained.
        newest = (
            self._executions.executionsList(retained - 1, 1).head().executionId()
            if retained
            else -1
        )
        return max(jobs, default=-1), newest

    def tasks(self, after_job: int, through_job: int) -> int:
        """The tasks of the stages of Spark jobs ``after_job`` + 1 to ``through_job``."""
        count = 0
        for job in range(after_job + 1, through_job + 1):
            info = self._tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                stage_info = self._tracker.getStageInfo(stage)
                count += stage_info.numTasks if stage_info is not None else 0
        return count


@contextmanager
def py4j_calls() -> Iterator[Counter[str]]:
    """The names of the JVM methods Python calls meanwhile (from any thread)."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    send = GatewayClient.send_command

    def counting(self, command, *args, **kwargs):
        lines = command.split("\n")
        if lines[0] == "c" and len(lines) > 2:  # a method call: c, target, method, ...
            with lock:
                seen[lines[2]] += 1
        return send(self, command, *args, **kwargs)

    GatewayClient.send_command = counting
    try:
        yield seen
    finally:
        GatewayClient.send_command = send


__all__ = ["PLANNING_CALLS", "SparkCounters", "py4j_calls"]
