"""The runner: registers a pipeline, recovers it, opens epochs and runs every job until
all are caught up, in lineage order, with barrier alignment.

Every job runs in its own worker thread of one Spark application, so a slow job never
holds back the epochs of the jobs upstream of it (barriers do not wait for the slowest
consumer). A job's worker runs its runnable batches one after another and re-plans
after each; a worker that has nothing to do waits until another job seals something.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession

from catalog import Catalog, Epoch, EpochState, Lease, LeaseHeldError
from consistency import EpochBatch, plan_batches
from etl.engine import BatchResult, EpochEngine, RecoveryStep, recover
from etl.errors import InternalError, PipelineBusyError
from etl.leases import LeaseKeeper
from etl.pipeline import Job, Pipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobFailure:
    job: str
    epoch: int | None
    error: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RunResult:
    """What a run did. ``exit_code``: 0 done, 1 a job failed (blocked epochs are not failures)."""

    epochs_opened: tuple[Epoch, ...] = ()
    batches: tuple[BatchResult, ...] = ()
    recovered: tuple[RecoveryStep, ...] = ()
    failures: tuple[JobFailure, ...] = ()

    @property
    def blocked(self) -> tuple[BatchResult, ...]:
        return tuple(b for b in self.batches if not b.sealed)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def merged(self, other: RunResult) -> RunResult:
        return RunResult(
            epochs_opened=self.epochs_opened + other.epochs_opened,
            batches=self.batches + other.batches,
            recovered=self.recovered + other.recovered,
            failures=self.failures + other.failures,
        )


ProgressCallback = Callable[[BatchResult], None]


class Runner:
    """Runs one pipeline against one catalog and warehouse."""

    maintenance_interval: float | None = None
    """Seconds between retention maintenance runs inside a continuous run (issue 11): it
    runs between batches, under the run's own leases, so it never fails a job's commit."""
    maintenance_options: dict = {}  # noqa: RUF012 - keyword arguments of maintain()
    _maintained_at: float = 0.0

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        catalog: Catalog,
        warehouse: str,
        spark: SparkSession,
        owner: str | None = None,
        lease_ttl_seconds: float = 120.0,
        backlog_threshold: int | None = 10,
        max_parallel_jobs: int = 4,
        on_batch: ProgressCallback | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.catalog = catalog
        self.warehouse = str(warehouse)
        self.spark = spark
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_ttl_seconds = lease_ttl_seconds
        self.backlog_threshold = backlog_threshold
        self.max_parallel_jobs = max_parallel_jobs
        self.on_batch = on_batch
        self.engine = EpochEngine(pipeline=pipeline, catalog=catalog, spark=spark)
        self._keeper: LeaseKeeper | None = None
        self._registered = False

    # -- setup -------------------------------------------------------------------------

    def register(self) -> None:
        """Register the pipeline's tables and jobs (idempotent)."""
        specs = self.pipeline.table_specs(self.warehouse)
        for spec in specs:
            self.catalog.register_table(spec)
        for job in self.pipeline.ordered_jobs():
            self.catalog.register_job(self.pipeline.job_spec(job))
        if self.pipeline.retention is not None:  # issue 11: the pipeline file's policy
            for name in sorted({spec.pipeline for spec in specs}):  # the catalog's pipelines
                self.catalog.set_retention_policy(name, self.pipeline.retention.to_json())
        self._registered = True

    def acquire(self) -> None:
        """Take the lease of every job; PipelineBusyError if another runner holds one.

        The leases are renewed in the background until :meth:`release`.
        """
        if not self._registered:
            self.register()
        keeper = LeaseKeeper(self.catalog, owner=self.owner, ttl_seconds=self.lease_ttl_seconds)
        try:
            keeper.acquire(job.name for job in self.pipeline.ordered_jobs())
        except LeaseHeldError as exc:
            raise PipelineBusyError(
                pipeline=self.pipeline.name, job=exc.job, owner=exc.owner
            ) from exc
        self._keeper = keeper

    def release(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.release()

    def __enter__(self) -> Runner:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _lease(self, job: Job) -> Lease:
        if self._keeper is None:
            raise InternalError(f"runner does not hold the lease of job {job.name!r}")
        return self._keeper.lease(job.name)

    def _lease_check(self, job: Job) -> Callable[[], None]:
        keeper = self._keeper
        if keeper is None:
            raise InternalError(f"runner does not hold the lease of job {job.name!r}")
        return lambda: keeper.check(job.name)

    # -- the work ----------------------------------------------------------------------

    def recover(self) -> RunResult:
        steps: list[RecoveryStep] = []
        for job in self.pipeline.ordered_jobs():
            steps.extend(
                recover(self.engine, job, self._lease(job), check_lease=self._lease_check(job))
            )
        return RunResult(recovered=tuple(steps))

    def open_epoch(self, barrier_ts: datetime | None = None) -> Epoch:
        return self.catalog.open_epoch(barrier_ts)

    def plan(self, job: Job) -> list[EpochBatch]:
        """The batches the job may run now (barrier alignment, backlog coalescing)."""
        latest = self.catalog.latest_epoch()
        if latest is None:
            return []
        table = self.catalog.get_table(job.output)
        sealed = self.catalog.latest_written([job.output]).get(job.output)
        done_through = sealed.epoch if sealed else table.first_epoch - 1
        if done_through >= latest.id:
            return []
        waiting = self.catalog.table_epoch(job.output, done_through + 1)
        if waiting is not None and waiting.state is EpochState.PROCESSED:
            # Recovery has run, so a PROCESSED epoch here is one its quality gate blocked:
            # epochs go in order, the job waits until a rerun lets that one through.
            return []
        inputs_written: Mapping[str, list[int]] | None = None
        if job.inputs:
            inputs_written = {
                item.table: [
                    s.epoch
                    for s in self.catalog.table_epochs(
                        item.table, after=done_through, up_to=latest.id
                    )
                    if s.state is EpochState.WRITTEN
                ]
                for item in job.inputs
            }
        recorded = ()
        if job.source is not None:
            recorded = tuple(
                s.epoch
                for s in self.catalog.slices(job.source.name, after=done_through, up_to=latest.id)
            )
        return plan_batches(
            done_through=done_through,
            issued_through=latest.id,
            inputs_written=inputs_written,
            backlog_threshold=self.backlog_threshold,
            recorded_slices=recorded,
        )

    def run_pending(self) -> RunResult:
        """Run every job until none has a runnable batch (or it failed or is blocked)."""
        return self._drive()

    def run_once(self, *, barrier_ts: datetime | None = None) -> RunResult:
        """Recover, open one epoch, run every job until caught up.

        Safe to repeat: a second call opens a new (possibly empty) epoch and changes
        nothing that the first one wrote.
        """
        with self._holding_leases():
            result = self.recover()
            epoch = self.open_epoch(barrier_ts)
            return result.merged(RunResult(epochs_opened=(epoch,))).merged(self._drive())

    def run_continuous(
        self,
        *,
        epoch_interval: float,
        stop: threading.Event,
        max_epochs: int | None = None,
    ) -> RunResult:
        """Open an epoch every ``epoch_interval`` seconds while jobs run, until ``stop`` is set
        (or ``max_epochs`` were opened); then finish the epochs in flight and return."""
        with self._holding_leases():
            result = self.recover()
            return result.merged(
                self._drive(epoch_interval=epoch_interval, stop=stop, max_epochs=max_epochs)
            )

    @contextmanager
    def _holding_leases(self) -> Iterator[None]:
        owned = self._keeper is not None
        if not owned:
            self.acquire()
        try:
            yield
        finally:
            if not owned:
                self.release()

    def _drive(
        self,
        *,
        epoch_interval: float | None = None,
        stop: threading.Event | None = None,
        max_epochs: int | None = None,
    ) -> RunResult:
        """The scheduler. Each submitted task runs one batch of one job, so that after every
        batch the jobs downstream of it can start while upstream goes on (pipelining)."""
        results: list[BatchResult] = []
        failures: list[JobFailure] = []
        opened: list[Epoch] = []
        stopped: set[str] = set()
        jobs = self.pipeline.ordered_jobs()
        next_epoch_at = time.monotonic()

        def opening() -> bool:
            return (
                epoch_interval is not None
                and stop is not None
                and not stop.is_set()
                and (max_epochs is None or len(opened) < max_epochs)
            )

        def run_one(job: Job, batch: EpochBatch) -> BatchResult:
            result = self.engine.run_batch(
                job, batch, self._lease(job), check_lease=self._lease_check(job)
            )
            if self.on_batch:
                self.on_batch(result)
            return result

        running: dict[Future[BatchResult], tuple[Job, EpochBatch]] = {}
        with ThreadPoolExecutor(
            max_workers=self.max_parallel_jobs, thread_name_prefix="job"
        ) as pool:
            while True:
                if not running:  # no batch in flight: every table is sealed or idle
                    self._maybe_maintain()
                if opening() and time.monotonic() >= next_epoch_at:
                    opened.append(self.open_epoch())
                    next_epoch_at = time.monotonic() + (epoch_interval or 0.0)
                busy = {job.name for job, _ in running.values()}
                for job in jobs:
                    if job.name in busy or job.name in stopped:
                        continue
                    batches = self.plan(job)
                    if batches:
                        running[pool.submit(run_one, job, batches[0])] = (job, batches[0])
                if not running and not opening():
                    break
                timeout = max(0.0, next_epoch_at - time.monotonic()) if opening() else None
                if not running:
                    assert stop is not None and timeout is not None
                    stop.wait(max(0.0, next_epoch_at - time.monotonic()))
                    continue
                finished, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
                for future in finished:
                    job, batch = running.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # reported as a JobFailure; other jobs go on
                        log.error("job %s failed at epoch %s: %s", job.name, batch.last, exc)
                        failures.append(JobFailure(job.name, batch.last, str(exc), exc))
                        stopped.add(job.name)
                        continue
                    results.append(result)
                    if not result.sealed:
                        stopped.add(job.name)
        return RunResult(
            epochs_opened=tuple(opened), batches=tuple(results), failures=tuple(failures)
        )

    def _maybe_maintain(self) -> None:
        """Retention maintenance while no batch runs (etl/retention/maintain.py)."""
        if self.maintenance_interval is None or self._keeper is None:
            return
        if time.monotonic() - self._maintained_at < self.maintenance_interval:
            return
        from etl.retention.maintain import maintain

        held = {job.name: self._lease(job) for job in self.pipeline.ordered_jobs()}
        try:
            maintain(self.catalog, held_leases=held, **self.maintenance_options)
        except Exception as exc:  # maintenance never stops the run
            log.warning("retention maintenance failed: %s", exc)
        self._maintained_at = time.monotonic()


__all__ = [
    "JobFailure",
    "ProgressCallback",
    "RunResult",
    "Runner",
]
