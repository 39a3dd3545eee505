"""Diagnostics, not a benchmark (the leading underscore keeps it out of ``python -m bench``):
where the time of a small epoch goes, function by function.

Unlike the benchmarks, this wraps INTERNAL functions of the engine (etl.engine,
etl.delta_*, the catalog class), PySpark, delta-rs and pyarrow with timers, so it will
need its target list updated when those modules move; every target that is missing is
skipped with a note. Nothing of the product is changed on disk.

Each wrapped call records its wall time exclusive of other wrapped calls beneath it, so
the rows of one thread add up to its wall time inside the outermost wrapped call.
Catalog SQL statements are counted and timed through SQLAlchemy events, Spark jobs
through the JVM's status store (submission -> completion).

    python -m bench._profile small [EPOCHS]      # tiny epochs per write mode
    python -m bench._profile freshness           # the freshness bench, instrumented
                                                 # (DB_BENCH_* variables apply)
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable

_state = threading.local()


class Recorder:
    def __init__(self) -> None:
        self.exclusive: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.skipped: list[str] = []
        self.sql_count = 0
        self.sql_seconds = 0.0

    def reset(self) -> None:
        with self.lock:
            self.exclusive.clear()
            self.calls.clear()
            self.sql_count = 0
            self.sql_seconds = 0.0

    def wrap(self, owner: object, attribute: str, label: str) -> None:
        original = getattr(owner, attribute, None)
        if original is None or getattr(original, "__profiled__", False):
            if original is None:
                self.skipped.append(f"{getattr(owner, '__name__', owner)}.{attribute}")
            return
        recorder = self

        @functools.wraps(original)
        def timed(*args, **kwargs):
            stack = getattr(_state, "stack", None)
            if stack is None:
                stack = _state.stack = []
            frame = [0.0]  # time spent in wrapped children
            stack.append(frame)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                stack.pop()
                if stack:
                    stack[-1][0] += elapsed
                with recorder.lock:
                    recorder.exclusive[label] += elapsed - frame[0]
                    recorder.calls[label] += 1

        timed.__profiled__ = True  # type: ignore[attr-defined]
        if isinstance(owner, type) and isinstance(owner.__dict__.get(attribute), staticmethod):
            setattr(owner, attribute, staticmethod(timed))
        elif isinstance(owner, type) and isinstance(owner.__dict__.get(attribute), classmethod):
            setattr(owner, attribute, classmethod(timed))
        else:
            setattr(owner, attribute, timed)

    def sql_events(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        def before(conn, cursor, statement, parameters, context, executemany):
            conn.info.setdefault("_profile_started", []).append(time.perf_counter())

        def after(conn, cursor, statement, parameters, context, executemany):
            started = conn.info["_profile_started"].pop()
            with self.lock:
                self.sql_count += 1
                self.sql_seconds += time.perf_counter() - started

        event.listen(Engine, "before_cursor_execute", before)
        event.listen(Engine, "after_cursor_execute", after)


def instrument(recorder: Recorder) -> None:
    """Wrap the targets; module functions are wrapped in every module that bound them."""
    import deltalake
    import pyarrow.parquet as pq
    import pyspark.sql.pandas.types as pandas_types
    from pyspark.sql import DataFrame, DataFrameReader, DataFrameWriter, SparkSession

    from catalog import sql as catalog_sql

    modules = []
    for name in (
        "etl.engine",
        "etl.delta",
        "etl.delta_write",
        "etl.delta_read",
        "etl.runner",
        "etl.sources.files",
        "etl.snapshot",
    ):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            recorder.skipped.append(name)

    def wrap_function(name: str, label: str) -> None:
        found = False
        for module in modules:
            if callable(getattr(module, name, None)):
                recorder.wrap(module, name, label)
                found = True
        if not found:
            recorder.skipped.append(name)

    for name in (
        "write_files",
        "commit_files",
        "merge_files",
        "read_table",
        "read_epochs",
        "table_version",
        "active_files",
        "scan",
        "find_commit",
        "_check_unique_keys",
        "_place",
        "_check_schema",
        "_remove_actions",
        "check_supported",
        "spark_schema",
    ):
        wrap_function(name, f"etl.{name}")
    recorder.wrap(pandas_types, "to_arrow_schema", "schema: to_arrow_schema")
    for module in modules:
        if getattr(module, "to_arrow_schema", None) is not None:
            recorder.wrap(module, "to_arrow_schema", "schema: to_arrow_schema")
    recorder.wrap(pq, "read_metadata", "parquet footer read")

    engine_module = sys.modules.get("etl.engine")
    engine_class = getattr(engine_module, "EpochEngine", None)
    if engine_class is not None:
        for method in (
            "run_batch",
            "_run_batch",
            "_publish",
            "_slice_bounds",
            "_read_inputs",
            "_previous",
            "_transform",
            "_check_columns",
            "_write",
            "_commit",
            "_current_version",
        ):
            recorder.wrap(engine_class, method, f"engine.{method}")
    runner_module = sys.modules.get("etl.runner")
    runner_class = getattr(runner_module, "Runner", None)
    if runner_class is not None:
        for method in ("plan", "_lease", "open_epoch"):
            recorder.wrap(runner_class, method, f"runner.{method}")
    files_module = sys.modules.get("etl.sources.files")
    source_class = getattr(files_module, "FileSource", None)
    if source_class is not None:
        for method in ("cut", "read", "_arrivals"):
            recorder.wrap(source_class, method, f"source.{method}")

    from catalog import Catalog

    catalog_class = catalog_sql.SqlCatalog
    for name, member in vars(Catalog).items():
        if callable(member) and not name.startswith("_"):
            recorder.wrap(catalog_class, name, f"catalog.{name}")

    recorder.wrap(deltalake.DeltaTable, "__init__", "delta-rs: open table (log replay)")
    for method in (
        "is_deltatable",
        "history",
        "get_add_actions",
        "create_write_transaction",
        "transaction_version",
        "schema",
        "metadata",
        "protocol",
        "version",
        "files",
    ):
        recorder.wrap(deltalake.DeltaTable, method, f"delta-rs: {method}")
    from deltalake import transaction

    recorder.wrap(
        transaction, "create_table_with_add_actions", "delta-rs: create_table_with_add_actions"
    )
    write_module = sys.modules.get("etl.delta_write")
    if write_module is not None and hasattr(write_module, "create_table_with_add_actions"):
        recorder.wrap(
            write_module,
            "create_table_with_add_actions",
            "delta-rs: create_table_with_add_actions",
        )

    recorder.wrap(SparkSession, "newSession", "spark: newSession")
    recorder.wrap(SparkSession, "sql", "spark: session.sql (parse/analyze)")
    recorder.wrap(SparkSession, "createDataFrame", "spark: createDataFrame")
    for method in ("parquet", "json", "load", "text"):
        recorder.wrap(DataFrameReader, method, f"spark: read.{method} (listing/footers)")
    recorder.wrap(DataFrameWriter, "parquet", "spark: write.parquet (job)")
    # PySpark 4: the classic (non-Connect) DataFrame overrides the base class's methods.
    frame_classes: list[type] = [DataFrame]
    try:
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        frame_classes.append(ClassicDataFrame)
    except ImportError:
        pass
    for method in (
        "count",
        "collect",
        "persist",
        "unpersist",
        "createOrReplaceTempView",
        "withColumn",
        "select",
        "join",
        "drop",
        "unionAll",
        "where",
        "distinct",
        "groupBy",
    ):
        for frame_class in frame_classes:
            if method in frame_class.__dict__:
                recorder.wrap(frame_class, method, f"spark: DataFrame.{method}")
    for prop in ("schema", "columns"):
        for frame_class in frame_classes:
            descriptor = frame_class.__dict__.get(prop)
            if isinstance(descriptor, property) and descriptor.fget is not None:
                holder = type("holder", (), {"fget": descriptor.fget})
                recorder.wrap(holder, "fget", f"spark: DataFrame.{prop} (JVM round trip)")
                setattr(frame_class, prop, property(holder.fget))
    recorder.sql_events()


def spark_jobs(spark) -> list[tuple[int, float, int]]:
    """(job id, seconds from submission to completion, tasks) of finished Spark jobs."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        submitted, completed = job.submissionTime(), job.completionTime()
        if submitted.isEmpty() or completed.isEmpty():
            continue
        out.append(
            (
                job.jobId(),
                (completed.get().getTime() - submitted.get().getTime()) / 1000,
                job.numTasks(),
            )
        )
    return out


def spark_stages(spark, after_stage: int) -> dict[str, float]:
    """Task-side totals of the stages after ``after_stage``: run time, CPU time (seconds)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    stages = store.stageList(None, False, False, getattr(store, "stageList$default$4")(), None)
    totals = {"stages": 0.0, "tasks": 0.0, "run": 0.0, "cpu": 0.0, "deserialize": 0.0, "max": 0.0}
    for i in range(stages.size()):
        stage = stages.apply(i)
        totals["max"] = max(totals["max"], stage.stageId())
        if stage.stageId() <= after_stage:
            continue
        totals["stages"] += 1
        totals["tasks"] += stage.numCompleteTasks()
        totals["run"] += stage.executorRunTime() / 1000
        totals["cpu"] += stage.executorCpuTime() / 1e9
        totals["deserialize"] += stage.executorDeserializeTime() / 1000
    return totals


def _codegen(spark) -> tuple[int, float]:
    """(compilations, total compile ms) so far, from Spark's CodegenMetrics histograms."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    histogram = metrics.METRIC_COMPILATION_TIME()
    snapshot = histogram.getSnapshot()
    return histogram.getCount(), snapshot.getMean() * histogram.getCount()


def report(recorder: Recorder, *, per: int, wall: float, title: str, top: int = 40) -> None:
    with recorder.lock:
        rows = sorted(recorder.exclusive.items(), key=lambda item: -item[1])
        calls = dict(recorder.calls)
        sql_count, sql_seconds = recorder.sql_count, recorder.sql_seconds
    print(f"--- {title}: wall {wall / per * 1000:.0f} ms per epoch ({per} epochs) ---")
    print(f"  {'exclusive ms/epoch':>18} {'calls/epoch':>11}  function")
    for label, seconds in rows[:top]:
        print(f"  {seconds / per * 1000:18.1f} {calls[label] / per:11.1f}  {label}")
    print(
        f"  catalog SQL statements: {sql_count / per:.1f} per epoch, "
        f"{sql_seconds / per * 1000:.1f} ms per epoch in the driver (execute only)"
    )


def small(epochs: int) -> None:
    from bench import small_epoch_bench as bench
    from etl import build_spark

    recorder = Recorder()
    conf = {"spark.ui.enabled": "false"}
    for item in filter(None, os.environ.get("PROFILE_SPARK_CONF", "").split(",")):
        key, _, value = item.partition("=")
        conf[key.strip()] = value.strip()
    spark = build_spark(app_name="profile-small", conf=conf)
    print(f"Spark conf overrides: {conf}")
    names = [n for n in os.environ.get("PROFILE_VARIANTS", "").split(",") if n] or list(
        bench.VARIANTS
    )
    import tempfile
    from pathlib import Path

    instrument(recorder)
    if recorder.skipped:
        print(f"not instrumented (missing): {sorted(set(recorder.skipped))}")
    with tempfile.TemporaryDirectory(prefix="profile-small-") as tmp:
        for name in names:
            variant = bench._Variant(name, Path(tmp) / name.strip("+"), spark)
            try:
                variant.epoch()  # warm-up
                variant.epoch()
                recorder.reset()
                jobs_before = {j[0] for j in spark_jobs(spark)}
                last_stage = int(spark_stages(spark, 1 << 30)["max"])
                codegen_before = _codegen(spark)
                cpu_before = _cpu_seconds()
                started = time.perf_counter()
                for _ in range(epochs):
                    variant.epoch()
                wall = time.perf_counter() - started
                cpu = {k: v - cpu_before.get(k, 0.0) for k, v in _cpu_seconds().items()}
                new_jobs = [j for j in spark_jobs(spark) if j[0] not in jobs_before]
                stages = spark_stages(spark, last_stage)
                codegen = _codegen(spark)
                compiled = codegen[0] - codegen_before[0]
                compile_ms = codegen[1] - codegen_before[1]
            finally:
                variant.close()
            report(recorder, per=epochs, wall=wall, title=f"variant {name}")
            print(
                f"  Spark jobs: {len(new_jobs) / epochs:.1f} per epoch, "
                f"{sum(j[1] for j in new_jobs) / epochs * 1000:.0f} ms per epoch submission->"
                f"completion, {sum(j[2] for j in new_jobs) / epochs:.1f} tasks per epoch"
            )
            print(
                f"  Spark stages: {stages['stages'] / epochs:.1f} per epoch; tasks' run time "
                f"{stages['run'] / epochs * 1000:.0f} ms, CPU {stages['cpu'] / epochs * 1000:.0f} ms,"
                f" deserialize {stages['deserialize'] / epochs * 1000:.0f} ms per epoch"
            )
            print(
                f"  codegen: {compiled / epochs:.1f} compilations per epoch, "
                f"{compile_ms / epochs:.0f} ms per epoch"
            )
            print(
                "  process CPU per epoch: "
                + ", ".join(
                    f"{k} {v / epochs * 1000:.0f} ms"
                    for k, v in sorted(cpu.items(), key=lambda x: -x[1])
                    if v > 0
                )
            )


def freshness() -> None:
    from bench import freshness_bench

    recorder = Recorder()
    import etl.runner  # noqa: F401 - instrument the modules the bench will use

    instrument(recorder)
    started = time.perf_counter()
    cpu_before = _cpu_seconds()
    freshness_bench.main()
    wall = time.perf_counter() - started
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in _cpu_seconds().items()}
    report(recorder, per=1, wall=wall, title="freshness run (totals in ms, not per epoch)", top=80)
    print(
        "  CPU seconds over the run: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda x: -x[1]))
        + f" (wall {wall:.0f} s, {os.cpu_count()} cpus)"
    )


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds of this Python process and its children (the Spark JVM, workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}

    def read(pid: int) -> tuple[str, float, list[int]]:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        return name, cpu, children

    pending = [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            name, cpu, children = read(pid)
        except OSError:
            continue
        label = "python driver" if pid == os.getpid() else name
        out[label] = out.get(label, 0.0) + cpu
        pending.extend(children)
    return out


def main(argv: list[str]) -> None:
    commands: dict[str, Callable[..., None]] = {"small": small, "freshness": freshness}
    if not argv or argv[0] not in commands:
        print(__doc__)
        sys.exit(2)
    if argv[0] == "small":
        small(int(argv[1]) if len(argv) > 1 else 10)
    else:
        freshness()


if __name__ == "__main__":
    main(sys.argv[1:])
