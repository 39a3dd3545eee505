"""Wide pipelines: freshness and catalog statements per epoch from 10 to 100 tables.

The pipeline of ``n`` tables has one root fed from local JSON files (1,000 rows/s), a
fan-out of ``f`` append jobs each taking one slice of the root's customers, a fan-in of
merge jobs each combining up to five of them (``UNION ALL``, grouped by category), and one
final merge job combining every fan-in table: ``1 + f + ceil(f / 5) + 1 = n``. It runs
continuously with ``DB_BENCH_EPOCH_INTERVAL`` (2 s) epochs on a local warehouse with an
embedded catalog; a probe (a separate process) resolves repeatable-read cuts of all ``n``
tables every 0.2 s.

Per size: freshness of the full cut (first cut at or past an epoch minus its barrier)
p50 / p95 over the measured window, the catalog statements the run sent per epoch (every
SQLAlchemy engine of the run's process; the probe's are another process's) and per epoch and table, and
the share of epochs the final table coalesced; the run's CPU per batch (driver Python and
JVM) and, per kind of job (root, branch, group, total), its batches, their median time in
the engine's stages and epochs per batch. Then how both grow against the smallest
size: the targets are p95 within 3x of the ten-table pipeline and statements per epoch
that grow no faster than the number of tables.

Each size warms up for ``DB_BENCH_WARMUP`` seconds and then on until the driver JVM's JIT
compilers have settled (``bench._common.warm_up``), at most ``DB_BENCH_WARMUP_MAX``
seconds: on a slow host the JIT took about a core for the first minutes.

Environment (defaults in brackets): DB_BENCH_SIZES [10,30,100], DB_BENCH_WARMUP [60],
DB_BENCH_WARMUP_MAX [300], DB_BENCH_SECONDS [60], DB_BENCH_EPOCH_INTERVAL [2],
DB_BENCH_ROWS_PER_SECOND [1000], DB_BENCH_PARALLEL [runner default] ``max_parallel_jobs``.

Run: ``python -m bench wide_pipeline``.
"""

from __future__ import annotations

import math
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench._common import (
    LoadSampler,
    ProcessCpu,
    StatementCounter,
    env_float,
    env_int,
    env_ints,
    load_average,
    median,
    percentile,
    warm_up,
)
from bench.freshness_bench import (
    ROOT_TABLE,
    BatchLog,
    ContinuousRun,
    Probe,
    finish,
    source_and_feeder,
    visible_after_barrier,
)
from etl.engine.timing import STAGES

FAN_IN = 5
"""Fan-out tables combined by one fan-in table."""


def fan_out_width(tables: int) -> int:
    """The fan-out ``f`` with ``1 + f + ceil(f / FAN_IN) + 1 == tables`` (or just under)."""
    if tables < 4:
        raise SystemExit(f"DB_BENCH_SIZES: a wide pipeline has at least 4 tables, not {tables}")
    width = 1
    while 2 + (width + 1) + math.ceil((width + 1) / FAN_IN) <= tables:
        width += 1
    return width


def build_wide_pipeline(source, tables: int):
    """(pipeline, every table name, the final table)."""
    from etl import Pipeline

    width = fan_out_width(tables)
    pipeline = Pipeline("wide")
    pipeline.ingest("ingest_events", source=source, output=ROOT_TABLE)
    branches = []
    for i in range(width):
        name = f"branch_{i:03d}"
        pipeline.sql(
            f"job_{name}",
            output=name,
            query=(
                f"SELECT customer, category, amount FROM {ROOT_TABLE} "
                f"WHERE customer % {width} = {i}"
            ),
            inputs=[ROOT_TABLE],
            mode="append",
        )
        branches.append(name)
    groups = []
    for start in range(0, width, FAN_IN):
        members = branches[start : start + FAN_IN]
        name = f"group_{start // FAN_IN:03d}"
        union = " UNION ALL ".join(f"SELECT category, amount FROM {m}" for m in members)
        pipeline.sql(
            f"job_{name}",
            output=name,
            query=(
                "SELECT category, count(*) AS orders, sum(amount) AS amount "
                f"FROM ({union}) GROUP BY category"
            ),
            inputs=members,
            mode="merge",
            keys=("category",),
        )
        groups.append(name)
    union = " UNION ALL ".join(f"SELECT category, orders, amount FROM {g}" for g in groups)
    pipeline.sql(
        "job_total",
        output="total",
        query=(
            "SELECT category, sum(orders) AS orders, sum(amount) AS amount "
            f"FROM ({union}) GROUP BY category"
        ),
        inputs=groups,
        mode="merge",
        keys=("category",),
    )
    return pipeline, [ROOT_TABLE, *branches, *groups, "total"], "total"


def job_kind(job: str) -> str:
    """Which part of the wide pipeline a job is: root, branch (fan-out), group (fan-in),
    total."""
    if job.startswith("job_branch_"):
        return "branch"
    if job.startswith("job_group_"):
        return "group"
    return "total" if job == "job_total" else "root"


@dataclass(frozen=True)
class Kind:
    """The batches of one kind of job in the measured window."""

    batches: int
    batch_seconds: float
    """Median of the stages the engine timed (read, transform, write, commit, seal)."""
    epochs_per_batch: float
    stage_seconds: dict[str, float]
    """Median seconds of each stage, in the engine's order."""


@dataclass(frozen=True)
class Size:
    tables: int
    freshness: tuple[float, ...]
    statements_per_epoch: float
    final_coalesced: float
    python_cpu: float
    jvm_cpu: float
    jit_cpu: float
    """Of ``jvm_cpu``: the JIT compilers'."""
    warmed: str
    kinds: dict[str, Kind]

    @property
    def p95(self) -> float:
        return percentile(self.freshness, 95)

    def line(self) -> str:
        return (
            f"  {self.tables:>4} tables: freshness p50 {median(self.freshness):6.2f} s  p95 "
            f"{self.p95:6.2f} s ({len(self.freshness)} epochs); catalog statements per epoch "
            f"{self.statements_per_epoch:8.1f} ({self.statements_per_epoch / self.tables:5.2f} "
            f"per table); final table coalesced {self.final_coalesced:4.0%} of epochs"
        )

    def details(self) -> str:
        batches = sum(k.batches for k in self.kinds.values())
        lines = [
            f"         {self.warmed}; CPU in the window: driver Python {self.python_cpu:.1f} s, "
            f"JVM {self.jvm_cpu:.1f} s (JIT {self.jit_cpu:.1f} s) over {batches} batches: "
            f"{self.python_cpu / max(1, batches) * 1000:.0f} + "
            f"{self.jvm_cpu / max(1, batches) * 1000:.0f} ms per batch"
        ]
        for name, kind in self.kinds.items():
            lines.append(
                f"         {name:<7} {kind.batches:5} batches, {kind.batch_seconds:6.3f} s each "
                f"(median of the engine's stages), {kind.epochs_per_batch:5.2f} epochs a batch; "
                + " ".join(
                    f"{stage} {secs * 1000:.0f}" for stage, secs in kind.stage_seconds.items()
                )
                + " ms"
            )
        return "\n".join(lines)


def _run_size(
    spark, tables: int, *, warmup: float, warmup_max: float, seconds: float, interval: float
) -> Size:
    from catalog import EpochState, load_catalog
    from etl import Runner

    with tempfile.TemporaryDirectory(prefix="wide-") as tmp, ExitStack() as stack:
        source, feeder = source_and_feeder(
            "file",
            Path(tmp),
            stack,
            rows_per_second=env_int("DB_BENCH_ROWS_PER_SECOND", 1000),
            ticks_per_second=5.0,
        )
        pipeline, names, final = build_wide_pipeline(source, tables)
        warehouse = str(Path(tmp) / "warehouse")
        catalog = load_catalog(None, warehouse=warehouse)
        stack.callback(catalog.close)
        batches = BatchLog()
        runner = Runner(
            pipeline,
            catalog=catalog,
            warehouse=warehouse,
            spark=spark,
            on_batch=batches.on_batch,
            max_parallel_jobs=env_int("DB_BENCH_PARALLEL", 0) or None,
        )
        runner.register()
        counter = stack.enter_context(StatementCounter())
        probe = Probe(warehouse, names, interval=0.2)  # its statements: another process's
        driver = ContinuousRun(runner, interval=interval)
        feeder.start()
        driver.start()
        probe.start()
        cpu = ProcessCpu(spark)
        warmed = warm_up(cpu, warmup, warmup_max)
        window = (time.time(), time.time() + seconds)
        counted_before = counter.count
        cpu_before = (cpu.python(), cpu.jvm(), cpu.jit())
        time.sleep(seconds)
        statements = counter.count - counted_before
        python_cpu, jvm_cpu = cpu.python() - cpu_before[0], cpu.jvm() - cpu_before[1]
        jit_cpu = cpu.jit() - cpu_before[2]
        in_window = [r for r in list(batches.records) if window[0] <= r.ended < window[1]]
        finish(feeder, driver, probe)
        with counter.muted():
            issued = [
                e.id for e in catalog.epochs() if window[0] <= e.barrier_ts.timestamp() < window[1]
            ]
            states = (
                catalog.table_epochs(final, after=issued[0] - 1, up_to=issued[-1]) if issued else []
            )
            coalesced = sum(1 for s in states if s.state is EpochState.COALESCED)
            freshness = visible_after_barrier(catalog, probe, window)
        return Size(
            tables=len(names),
            freshness=tuple(freshness),
            statements_per_epoch=statements / max(1, len(issued)),
            final_coalesced=coalesced / max(1, len(issued)),
            python_cpu=python_cpu,
            jvm_cpu=jvm_cpu,
            jit_cpu=jit_cpu,
            warmed=warmed,
            kinds=_kinds(in_window),
        )


def _kinds(records) -> dict[str, Kind]:
    kinds: dict[str, list] = {}
    for record in records:
        kinds.setdefault(job_kind(record.job), []).append(record)
    return {
        name: Kind(
            batches=len(kind),
            batch_seconds=median([sum((r.timings or {}).values()) for r in kind]),
            epochs_per_batch=median([r.epoch - r.first_epoch + 1 for r in kind]),
            stage_seconds={
                stage: median([(r.timings or {}).get(stage, 0.0) for r in kind])
                for stage in STAGES
                if any(stage in (r.timings or {}) for r in kind)
            },
        )
        for name, kind in sorted(kinds.items())
    }


def main() -> None:
    from etl import build_spark

    sizes = env_ints("DB_BENCH_SIZES", (10, 30, 100))
    warmup = env_float("DB_BENCH_WARMUP", 60.0)
    warmup_max = max(warmup, env_float("DB_BENCH_WARMUP_MAX", 300.0))
    seconds = env_float("DB_BENCH_SECONDS", 60.0)
    interval = env_float("DB_BENCH_EPOCH_INTERVAL", 2.0)
    spark = build_spark(app_name="bench-wide-pipeline", conf={"spark.ui.enabled": "false"})
    print(
        f"wide pipelines of {sizes} tables (fan-out, fan-in by {FAN_IN}, one final table), "
        f"{interval:g} s epochs, warm-up {warmup:g}-{warmup_max:g} s, window {seconds:g} s; "
        f"{load_average()}"
    )
    measured: list[Size] = []
    with LoadSampler() as load:
        for tables in sizes:
            size = _run_size(
                spark,
                tables,
                warmup=warmup,
                warmup_max=warmup_max,
                seconds=seconds,
                interval=interval,
            )
            measured.append(size)
            print(size.line())
            print(size.details(), flush=True)
    base = measured[0]
    print(f"growth against {base.tables} tables:")
    for size in measured[1:]:
        tables_ratio = size.tables / base.tables
        statements_ratio = size.statements_per_epoch / max(base.statements_per_epoch, 1e-9)
        print(
            f"  {size.tables:>4} tables ({tables_ratio:.1f}x the tables): freshness p95 "
            f"{size.p95 / base.p95:.2f}x (target <= 3x); statements per epoch "
            f"{statements_ratio:.2f}x ({'linear or better' if statements_ratio <= tables_ratio * 1.05 else 'FASTER THAN LINEAR'})"
        )
    print(load.summary() + f"; now {load_average()}")


if __name__ == "__main__":
    main()
