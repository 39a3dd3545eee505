"""One run of a pipeline file as ``etl run`` starts it: the task object behind the command.

:class:`PipelineRun` decides what a run does, in order: load the pipeline (validated),
refuse names another pipeline owns and a busy pipeline before Spark starts (waiting up to
``wait_seconds`` for another run to let go), start Spark, take the job leases (leaving the
jobs of a live recompute to it), run once or continuously (with maintenance rounds if
asked), give the leases back, and return a :class:`RunOutcome` value. What the operator
sees along the way goes through :class:`RunEvents`, which the command implements; so does
how the catalog is opened, the file loaded and Spark started (:class:`RunSetup`).
Heavy imports (PySpark, the catalog) happen inside the methods that need them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from etl.scheduling import (
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_RETRY_BACKOFF_SECONDS,
    DEFAULT_SLOW_BATCH_SECONDS,
)

if TYPE_CHECKING:
    from types import TracebackType

    from pyspark.sql import SparkSession

    from catalog import Catalog, Lease
    from consistency import EpochBatch
    from etl.engine.batch import BatchResult
    from etl.errors import PipelineBusyError
    from etl.pipeline import Pipeline
    from etl.retention.in_run import MaintenanceLoop, MaintenanceTotals
    from etl.retention.maintain import MaintenanceReport
    from etl.run_mode import RunMode
    from etl.runner import Runner, RunResult, Undeclared
    from etl.scheduling import BacklogThreshold


@dataclass(frozen=True)
class RunSettings:
    """How ``etl run`` was asked to run (its options, checked)."""

    warehouse: str
    """The warehouse root, as the catalog records it."""
    mode: RunMode
    wait_seconds: float = 0.0
    """How long to wait for another run to release the pipeline (then PipelineBusyError)."""
    lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS
    backlog_threshold: BacklogThreshold = "auto"
    max_parallel_jobs: int | None = None
    slow_batch_seconds: float = DEFAULT_SLOW_BATCH_SECONDS
    retries: int | None = None
    """Retries of a failed batch (None: the mode's default, :func:`retry_policy_for`)."""
    retry_backoff_seconds: float = DEFAULT_RETRY_BACKOFF_SECONDS
    keep_going: bool = False


@dataclass(frozen=True)
class RunSetup:
    """Where a run gets its pipeline, catalog and Spark from (the command's helpers)."""

    load_pipeline: Callable[[Catalog | None], Pipeline]
    """The pipeline file loaded and validated, against the catalog if there is one."""
    existing_catalog: Callable[[], Catalog | None]
    """The catalog if it exists (nothing created), for the checks before Spark starts."""
    open_catalog: Callable[[], Catalog]
    """The catalog, created if need be."""
    start_spark: Callable[[str], SparkSession]
    """A Spark session for the given application name."""


class ProgressDisplay(Protocol):
    """Shows the batches as they end, while the run lasts (a context manager)."""

    def __call__(self, batch: BatchResult) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any: ...


class RunEvents(Protocol):
    """What a run tells the operator as it goes (the command prints it)."""

    def waiting(self, busy: PipelineBusyError, seconds_left: float) -> None:
        """Another run holds a job; the run waits (said every few seconds)."""

    def started(self, run: PipelineRun) -> None:
        """Spark runs and the runner is built; nothing is written yet (a command installs
        its signal handlers here: Spark's SparkContext installs a SIGINT handler)."""

    def took_over(self, lease: Lease) -> None:
        """The lease of a dead run was taken over without waiting for it to expire."""

    def undeclared(self, undeclared: Undeclared, catalog_pipeline: str) -> None:
        """Jobs or tables registered in the pipeline that its file no longer declares."""

    def maintained(self, report: MaintenanceReport | None, error: Exception | None) -> None:
        """A round of in-run maintenance ended (``error``: it failed)."""

    def progress(self, pipeline: Pipeline) -> ProgressDisplay:
        """The display of the run's batches."""


@dataclass(frozen=True)
class RunOutcome:
    """What a run did, with what its report needs."""

    result: RunResult
    pipeline: Pipeline
    catalog_pipeline: str
    undeclared: Undeclared
    maintenance: MaintenanceTotals | None = None
    """The in-run maintenance rounds, summed (None: no maintenance was asked for)."""

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    def to_json(self) -> dict[str, Any]:
        """The outcome as ``etl run --format json`` prints it."""
        from etl.report import run_result_json

        data = run_result_json(self.result, self.pipeline, self.catalog_pipeline, self.undeclared)
        if self.maintenance is not None:
            data["maintenance"] = dataclasses.asdict(self.maintenance)
        return data


class PipelineRun:
    """One ``etl run`` of a pipeline file (see the module docstring)."""

    def __init__(self, settings: RunSettings, setup: RunSetup, events: RunEvents) -> None:
        self.settings = settings
        self.setup = setup
        self.events = events
        self.stopping = threading.Event()
        """Set by :meth:`stop`: a continuous run finishes the epochs open and ends."""
        self.runner: Runner | None = None
        """The runner, once Spark runs (:meth:`RunEvents.started`)."""

    def execute(self) -> RunOutcome:
        """Run the pipeline as settled (see the module docstring)."""
        from etl.leases import retry_while_busy

        deadline = time.monotonic() + self.settings.wait_seconds
        pipeline = self._checked_pipeline(deadline)
        with self.setup.open_catalog() as catalog:
            display = self.events.progress(pipeline)
            runner = self._runner(pipeline, catalog, display)
            self.events.started(self)
            retry_while_busy(runner.acquire, deadline=deadline, on_wait=self.events.waiting)
            for lease in runner.taken_over:
                self.events.took_over(lease)
            if runner.undeclared.jobs or runner.undeclared.tables:
                self.events.undeclared(runner.undeclared, runner.catalog_pipeline)
            upkeep = self._maintenance(runner, catalog)
            try:
                with display:
                    result = self._run(runner, upkeep)
            finally:
                runner.release()
            return RunOutcome(
                result=result,
                pipeline=runner.pipeline,
                catalog_pipeline=runner.catalog_pipeline,
                undeclared=runner.undeclared,
                maintenance=upkeep.totals if upkeep is not None else None,
            )

    def stop(self) -> None:
        """Open no new epoch; finish those open (a continuous run then ends)."""
        self.stopping.set()

    def remaining(self) -> dict[str, int]:
        """Per job, the epochs it has left to run (none before the run started)."""
        return self.runner.remaining() if self.runner is not None else {}

    def in_flight(self) -> dict[str, EpochBatch]:
        """Per job, the batch it runs now."""
        return self.runner.in_flight() if self.runner is not None else {}

    def _checked_pipeline(self, deadline: float) -> Pipeline:
        """The pipeline, loaded; in an existing catalog, names another pipeline owns are
        refused first (their leases are not this one's), then a busy pipeline, before
        PySpark is even imported (acquiring the leases decides)."""
        with contextlib.ExitStack() as closing:
            known = self.setup.existing_catalog()
            if known is not None:
                closing.enter_context(known)
            pipeline = self.setup.load_pipeline(known)
            if known is not None:
                from etl.leases import check_not_held, retry_while_busy
                from etl.registration import catalog_pipeline_name, check_registration
                from etl.revisions import requested_jobs

                check_registration(known, pipeline, self.settings.warehouse)

                def recomputed() -> set[str]:
                    name = catalog_pipeline_name(pipeline, known, self.settings.warehouse)
                    return requested_jobs(known, pipeline, name, owner="")

                retry_while_busy(
                    lambda: check_not_held(known, pipeline, left_to_others=recomputed),
                    deadline=deadline,
                    on_wait=self.events.waiting,
                )
        return pipeline

    def _runner(self, pipeline: Pipeline, catalog: Catalog, display: ProgressDisplay) -> Runner:
        from etl.runner import Runner
        from etl.scheduling import retry_policy_for

        settings = self.settings
        spark = self.setup.start_spark(f"etl-{pipeline.name}")
        self.runner = Runner(
            pipeline,
            catalog=catalog,
            warehouse=settings.warehouse,
            spark=spark,
            lease_ttl_seconds=settings.lease_ttl_seconds,
            backlog_threshold=settings.backlog_threshold,
            max_parallel_jobs=settings.max_parallel_jobs,
            slow_batch_seconds=settings.slow_batch_seconds,
            on_batch=display,
            retry=retry_policy_for(
                settings.retries,
                backoff_seconds=settings.retry_backoff_seconds,
                keep_going=settings.keep_going,
                continuous=settings.mode.continuous,
            ),
        )
        return self.runner

    def _run(self, runner: Runner, upkeep: MaintenanceLoop | None) -> RunResult:
        mode = self.settings.mode
        if not mode.continuous:
            return runner.run_once()
        with upkeep or contextlib.nullcontext():
            return runner.run_continuous(
                epoch_interval=mode.epoch_interval, stop=self.stopping, max_epochs=mode.max_epochs
            )

    def _maintenance(self, runner: Runner, catalog: Catalog) -> MaintenanceLoop | None:
        """The maintenance loop of a continuous run (None without a maintenance interval)."""
        interval = self.settings.mode.maintenance_interval
        if interval is None:
            return None
        from etl.retention.in_run import MaintenanceLoop

        return MaintenanceLoop(
            catalog,
            pipeline=runner.catalog_pipeline,
            interval=interval,
            leases=runner.leases,
            gate=runner.gate,
            on_round=self.events.maintained,
        )


def recover_pipeline(
    catalog: Catalog,
    pipeline: Pipeline,
    *,
    warehouse: str,
    start_spark: Callable[[str], SparkSession],
) -> RunOutcome:
    """``etl recover``: bring the catalog and the pipeline's tables back into agreement
    after a crash. PipelineBusyError before Spark starts if another run holds a job; when
    there is nothing to seal, roll back or discard, no Spark is started to say so."""
    from etl.engine import needs_recovery
    from etl.leases import check_not_held
    from etl.revisions import abandoned_revisions
    from etl.runner import Runner, RunResult, catalog_pipeline_name, undeclared

    check_not_held(catalog, pipeline)
    name = catalog_pipeline_name(pipeline, catalog, warehouse)
    if not abandoned_revisions(catalog, name) and not any(
        needs_recovery(catalog, pipeline, job) for job in pipeline.ordered_jobs()
    ):
        return RunOutcome(
            result=RunResult(),
            pipeline=pipeline,
            catalog_pipeline=name,
            undeclared=undeclared(pipeline, catalog, name),
        )
    runner = Runner(
        pipeline, catalog=catalog, warehouse=warehouse, spark=start_spark("etl-recover")
    )
    with runner:
        result = runner.recover()
    return RunOutcome(
        result=result,
        pipeline=runner.pipeline,
        catalog_pipeline=runner.catalog_pipeline,
        undeclared=runner.undeclared,
    )


__all__ = [
    "PipelineRun",
    "ProgressDisplay",
    "RunEvents",
    "RunOutcome",
    "RunSettings",
    "RunSetup",
    "recover_pipeline",
]
