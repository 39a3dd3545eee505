"""The runner: registers a pipeline, recovers it, opens epochs and runs every job until
all are caught up, in lineage order, with barrier alignment.

Every batch runs in a worker thread of one Spark application. A batch's fixed cost is
driver CPU (Spark planning, scheduling and committing), so batches beyond the cores only
stretch each other: the runner runs at most ``max_parallel_jobs`` at once (default: the
cores this process may use), the oldest epoch first and, among equals, the job furthest
downstream, so that an epoch leaves the chain before the next one enters it. A batch
that has run longer than ``slow_batch_seconds`` no longer counts against that limit, so
a slow job never holds back the epochs of the jobs upstream of it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TypeVar

from pyspark.sql import SparkSession

from catalog import (
    Catalog,
    CatalogError,
    CatalogUnavailableError,
    Epoch,
    EpochState,
    JobFailureRecord,
    JobProgress,
    Lease,
    LeaseHeldError,
    ProgressRequest,
    Revision,
)
from consistency import EpochBatch, admission_order, inputs_sealed_through, plan_batches
from etl.engine import BatchResult, EpochEngine, RecoveryStep, StepAction, recover
from etl.errors import (
    ExitCode,
    InternalError,
    JobError,
    UnclaimedTableError,
    UsageError,
)
from etl.leases import LeaseKeeper, busy_error, make_owner
from etl.pipeline import Job, Pipeline
from etl.recompute import discard_abandoned
from etl.registration import catalog_pipeline_name, register_pipeline
from etl.retention.gate import BatchGate
from etl.revisions import requested_jobs
from etl.scheduling import (
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_SLOW_BATCH_SECONDS,
    BacklogThreshold,
    RetryPolicy,
    backlog_threshold_for,
    default_parallel_batches,
)
from etl.storage import check_conditional_writes

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_RECOVERIES_AFTER_INTERRUPTION = 3
"""Times one run recovers a job again after a batch was interrupted from outside (a table
appeared under it, or the catalog lost its session mid-transaction); past that the batch
fails (something else keeps creating the job's tables, or the catalog keeps failing)."""
_RECOMPUTE_CHECK_SECONDS = 1.0
"""How often a run looks for a recompute asking for its jobs (one catalog query)."""


def _once_more_if_interrupted(call: Callable[[], T]) -> T:
    """``call()``, and once more if the catalog ended its session (PostgreSQL ends the
    transaction of a process that froze inside it): a new session answers. For calls that
    only read, for recovery (which reads again what it does) and for opening an epoch
    (if the first try committed after all, the second opens one more, empty, epoch)."""
    try:
        return call()
    except CatalogUnavailableError as exc:
        log.warning("%s; trying once more on a new catalog session", exc)
        return call()


@dataclass(frozen=True)
class JobFailure:
    job: str
    epoch: int | None
    error: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    attempt: int | None = None
    error_class: str | None = None
    retries_spent: bool = False
    """The run's retry policy allowed no more attempts: the run ended because of it."""


def one_line(exc: BaseException) -> str:
    """An error as one line for an operator: no JVM stack trace, no Python traceback."""
    text = str(exc).split("JVM stacktrace:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text and lines:
        lines = [lines[-1]]
    line = " ".join(lines)
    return line if len(line) <= 500 else line[:497] + "..."


def error_class(exc: BaseException) -> str:
    """The class of the error's cause (e.g. AnalysisException), else of the error."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return type(cause).__name__
    return type(exc).__name__


@dataclass(frozen=True)
class RunResult:
    """What a run did. ``exit_code``: 0 done, 1 a job failed, 4 an epoch is blocked by a
    quality gate (and nothing failed)."""

    epochs_opened: tuple[Epoch, ...] = ()
    batches: tuple[BatchResult, ...] = ()
    recovered: tuple[RecoveryStep, ...] = ()
    failures: tuple[JobFailure, ...] = ()
    """Failed batches no later attempt of the job made good (each is on record in the
    catalog): the run exits 1."""
    retried: tuple[JobFailure, ...] = ()
    """Failed batches a retry made good (also on record in the catalog)."""
    discarded: tuple[Revision, ...] = ()
    """Revisions a killed ``etl recompute`` left building, rolled back by this run's
    recovery (:func:`etl.recompute.discard_abandoned`)."""
    left_to_recompute: tuple[str, ...] = ()
    """Jobs a live ``etl recompute`` was building a revision of when the run ended: the run
    left them to it; they go on from its switch (in this run, or the next)."""

    @property
    def blocked(self) -> tuple[BatchResult, ...]:
        return tuple(b for b in self.batches if not b.sealed)

    @property
    def blocked_in_recovery(self) -> tuple[RecoveryStep, ...]:
        return tuple(s for s in self.recovered if s.action is StepAction.BLOCKED)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> ExitCode:
        if self.failures:
            return ExitCode.JOB_FAILED
        if self.blocked or self.blocked_in_recovery:
            return ExitCode.BLOCKED
        return ExitCode.OK

    def merged(self, other: RunResult) -> RunResult:
        return RunResult(
            epochs_opened=self.epochs_opened + other.epochs_opened,
            batches=self.batches + other.batches,
            recovered=self.recovered + other.recovered,
            failures=self.failures + other.failures,
            retried=self.retried + other.retried,
            discarded=self.discarded + other.discarded,
            left_to_recompute=other.left_to_recompute,
        )


ProgressCallback = Callable[[BatchResult], None]


@dataclass(frozen=True)
class Undeclared:
    """What catalog pipeline holds active that its file no longer declares: jobs, and
    tables no declared job writes (e.g. the quarantine table of a gate that was removed).
    Each holds the pipeline's COMMIT back until retired (``etl retire job|table``)."""

    jobs: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    """Tables of undeclared jobs are not repeated here: retiring the job retires them."""


def undeclared(pipeline: Pipeline, catalog: Catalog, name: str) -> Undeclared:
    """The active jobs and tables of catalog pipeline ``name`` that ``pipeline`` does not
    declare."""
    declared_jobs = {job.name for job in pipeline.ordered_jobs()}
    jobs = tuple(j.name for j in catalog.list_jobs(pipeline=name) if j.name not in declared_jobs)
    declared_tables = {t for job in pipeline.ordered_jobs() for t in pipeline.tables_of(job)}
    tables = tuple(
        t.name
        for t in catalog.list_tables(pipeline=name)
        if t.name not in declared_tables and t.writer_job not in jobs
    )
    return Undeclared(jobs=jobs, tables=tables)


def _batches(job: Job, progress: JobProgress, backlog_threshold: int | None) -> list[EpochBatch]:
    """The batches ``job`` may run, as ``progress`` shows its output and inputs."""
    if not progress.issued:
        return []
    if any(s.state is EpochState.PROCESSED for s in progress.states[job.output]):
        # Recovery has run, so a PROCESSED epoch here is one its quality gate blocked:
        # epochs go in order, the job waits until a rerun lets that one through.
        return []
    inputs_written: Mapping[str, list[int]] | None = None
    if job.inputs:
        inputs_written = {
            item.table: [
                s.epoch for s in progress.states[item.table] if s.state is EpochState.WRITTEN
            ]
            for item in job.inputs
        }
    return plan_batches(
        done_through=progress.done_through,
        issued=progress.issued,
        inputs_written=inputs_written,
        backlog_threshold=backlog_threshold,
        recorded_slices=progress.recorded_slices,
    )


class Runner:
    """Runs one pipeline against one catalog and warehouse."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        catalog: Catalog,
        warehouse: str,
        spark: SparkSession,
        owner: str | None = None,
        lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS,
        backlog_threshold: BacklogThreshold = "auto",
        max_parallel_jobs: int | None = None,
        slow_batch_seconds: float = DEFAULT_SLOW_BATCH_SECONDS,
        on_batch: ProgressCallback | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        for name, value in (
            ("max_parallel_jobs", max_parallel_jobs),
            ("slow_batch_seconds", slow_batch_seconds),
        ):
            if value is not None and value <= 0:
                raise UsageError(f"Runner({name}={value!r}): give a positive number")
        if backlog_threshold != "auto" and not (
            backlog_threshold is None
            or (isinstance(backlog_threshold, int) and backlog_threshold >= 1)
        ):
            raise UsageError(
                f"Runner(backlog_threshold={backlog_threshold!r}): give a number of epochs "
                "(at least 1), None (never coalesce) or 'auto'"
            )
        self.pipeline = pipeline
        self.catalog = catalog
        self.warehouse = str(warehouse)
        self.spark = spark
        self.owner = owner or make_owner()
        self.lease_ttl_seconds = lease_ttl_seconds
        self.backlog_threshold = backlog_threshold
        self.max_parallel_jobs = max_parallel_jobs or default_parallel_batches()
        self.slow_batch_seconds = slow_batch_seconds
        self.on_batch = on_batch
        self.retry = retry
        self.engine = EpochEngine(pipeline=pipeline, catalog=catalog, spark=spark)
        self._keeper: LeaseKeeper | None = None
        self._registered = False
        self._catalog_pipeline: str | None = None
        self._running: dict[str, EpochBatch] = {}
        self._claimed: dict[str, int] = {}
        """Per job, the lease generation its recovery claimed the job's tables for."""
        self.gate = BatchGate()
        """Every batch passes it: maintenance in this process commits only to idle jobs."""
        self.undeclared = Undeclared()
        """Active jobs and tables registered in the pipeline that its file no longer declares."""

    # -- setup -------------------------------------------------------------------------

    @property
    def catalog_pipeline(self) -> str:
        """The pipeline's name in the catalog (see :func:`catalog_pipeline_name`)."""
        if self._catalog_pipeline is None:
            self._catalog_pipeline = catalog_pipeline_name(
                self.pipeline, self.catalog, self.warehouse
            )
        return self._catalog_pipeline

    def register(self) -> None:
        """Register the pipeline's tables and jobs under its name (idempotent, one catalog
        transaction: NameOwnedError for a job, source or table name another pipeline owns
        leaves the catalog as it was), and its retention policy when the file declares one."""
        name = self.catalog_pipeline
        check_conditional_writes(self.warehouse)
        register_pipeline(self.catalog, self.pipeline, self.warehouse, name)
        self.undeclared = undeclared(self.pipeline, self.catalog, name)
        if self.pipeline.retention is not None:
            self.catalog.set_retention_policy(name, self.pipeline.retention.to_json())
        self._registered = True

    def acquire(self) -> None:
        """Take the lease of every job; PipelineBusyError if another runner holds one.

        The jobs a live ``etl recompute`` builds a revision of are left to it: the run
        takes them once the revision is switched or discarded. The leases are renewed in
        the background until :meth:`release`.
        """
        if not self._registered:
            self.register()
        keeper = LeaseKeeper(self.catalog, owner=self.owner, ttl_seconds=self.lease_ttl_seconds)
        left = requested_jobs(self.catalog, self.pipeline, self.catalog_pipeline, owner=self.owner)
        try:
            keeper.acquire(j.name for j in self.pipeline.ordered_jobs() if j.name not in left)
        except LeaseHeldError as exc:
            raise busy_error(self.pipeline.name, exc) from exc
        self._keeper = keeper

    def leases(self) -> dict[str, Lease]:
        """The leases this runner holds now, by job."""
        keeper = self._keeper
        if keeper is None:
            return {}
        return {
            job.name: keeper.lease(job.name)
            for job in self.pipeline.ordered_jobs()
            if keeper.holds(job.name)  # a job left to a recompute is not
        }

    @property
    def taken_over(self) -> list[Lease]:
        """Leases of dead runs this runner took over without waiting for them to expire."""
        return list(self._keeper.taken_over) if self._keeper is not None else []

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

    def recover(self, jobs: list[Job] | None = None) -> RunResult:
        """Recover ``jobs`` (default: every job of the pipeline), upstream first, after
        discarding the revisions a killed ``etl recompute`` left building."""
        discarded = discard_abandoned(
            self.catalog, self.pipeline, self.catalog_pipeline, self.leases()
        )
        steps: list[RecoveryStep] = []
        held = self.leases()
        for job in self.pipeline.ordered_jobs() if jobs is None else jobs:
            if job.name not in held:
                continue  # left to a recompute: recovered when the run takes it back
            try:
                steps.extend(self._recover_job(job))
            except Exception as exc:
                self._record_failure(job, None, exc)
                raise
        return RunResult(recovered=tuple(steps), discarded=tuple(discarded))

    def _recover_job(self, job: Job) -> list[RecoveryStep]:
        """Recover ``job`` under the lease held now: its tables are claimed for this
        generation first, which every commit of its batches requires."""
        lease = self._lease(job)
        steps = recover(self.engine, job, lease, check_lease=self._lease_check(job))
        self._claimed[job.name] = lease.generation
        return steps

    def _unclaimed(self, jobs: list[Job]) -> list[Job]:
        """The jobs not recovered (their tables not claimed) under the leases held now."""
        held = self.leases()
        return [
            j
            for j in jobs
            if j.name in held and self._claimed.get(j.name) != held[j.name].generation
        ]

    def open_epoch(self, barrier_ts: datetime | None = None) -> Epoch:
        return self.catalog.open_epoch(barrier_ts, pipeline=self.catalog_pipeline)

    def remaining(self) -> dict[str, int]:
        """Per job, how many of the pipeline's opened epochs it has not sealed yet."""
        jobs = self.pipeline.ordered_jobs()
        progress = self.catalog.jobs_progress([ProgressRequest(job.output) for job in jobs])
        return {job.name: len(p.issued) for job, p in zip(jobs, progress, strict=True)}

    def in_flight(self) -> dict[str, EpochBatch]:
        """The batch each job is running now."""
        return dict(self._running)

    def plan(
        self, job: Job, *, draining: bool = False, continuous: bool = False
    ) -> list[EpochBatch]:
        """The batches the job may run now (barrier alignment, backlog coalescing), over
        its pipeline's own epochs. ``draining`` (a run told to stop): every pending epoch
        is coalesced, so the epochs left are finished in as few batches as possible.
        ``continuous``: a continuous run's backlog threshold applies (``"auto"``)."""
        return self.plan_jobs([job], draining=draining, continuous=continuous)[job.name]

    def plan_jobs(
        self, jobs: Sequence[Job], *, draining: bool = False, continuous: bool = False
    ) -> dict[str, list[EpochBatch]]:
        """:meth:`plan` of each of ``jobs``, read of the catalog in one round trip."""
        planned = self._plan_jobs(jobs, draining=draining, continuous=continuous)
        return {name: batches for name, (batches, _) in planned.items()}

    def _plan_jobs(
        self, jobs: Sequence[Job], *, draining: bool, continuous: bool
    ) -> dict[str, tuple[list[EpochBatch], int]]:
        """:meth:`plan_jobs`, with the epoch each job's tables are sealed through."""
        progress = self.catalog.jobs_progress(
            [
                ProgressRequest(
                    job.output,
                    inputs=tuple(i.table for i in job.inputs),
                    source=job.source.name if job.source is not None else None,
                )
                for job in jobs
            ]
        )
        threshold = (
            1 if draining else backlog_threshold_for(self.backlog_threshold, continuous=continuous)
        )
        return {
            job.name: (_batches(job, found, threshold), found.done_through)
            for job, found in zip(jobs, progress, strict=True)
        }

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
        (or ``max_epochs`` were opened); then finish the epochs issued and return. Once
        ``stop`` is set, each job coalesces all its pending epochs into one batch.

        What the process holds when the run starts (its modules, Spark's and the catalog's
        objects, recovered state) is moved out of the garbage collector's way
        (``gc.freeze``): a full collection scanned all of it again, a pause of every
        thread of about 60 ms every 15 s in a run of 100 tables (bench/RESULTS-issue28.md,
        session 52)."""
        gc.collect()  # what is garbage already is not kept for good
        gc.freeze()
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
        # A batch commits only to tables its runner created or claimed: recover first.
        recovered = list(
            _once_more_if_interrupted(lambda: self.recover(self._unclaimed(jobs))).recovered
        )
        interruptions = dict.fromkeys((job.name for job in jobs), 0)
        next_epoch_at = time.monotonic()

        failed_in_a_row = dict.fromkeys((job.name for job in jobs), 0)
        retry_at: dict[str, float] = {}
        """Jobs whose failed batch waits for its retry, and when it is due."""
        retried: list[JobFailure] = []
        giving_up = False
        """A job's retries are spent (and not --keep-going): no new epoch, no new batch."""

        def opening() -> bool:
            return (
                epoch_interval is not None
                and stop is not None
                and not stop.is_set()
                and not giving_up
                and (max_epochs is None or len(opened) < max_epochs)
            )

        def job_failed(job: Job, batch: EpochBatch | None, exc: BaseException) -> None:
            """Record the failure; retry the job after a backoff, or stop it once its
            retries are spent (and the run with it, unless the policy keeps going). Without
            a policy the job stops and the other jobs go on."""
            nonlocal giving_up
            failed_in_a_row[job.name] += 1
            count = failed_in_a_row[job.name]
            epoch = batch.last if batch is not None else None
            attempt = self.engine.attempt_of(job, batch) if batch is not None else None
            failure = self._record_failure(job, epoch, exc, attempt)
            stopped.add(job.name)
            policy = self.retry
            # Keeping going lasts while the run opens epochs; a run that is finishing
            # (--max-epochs reached, a run once) retries no more than the policy's count.
            stopping = stop is not None and stop.is_set()
            spent = (
                policy is not None
                and not stopping
                and (policy.spent(count) or (not opening() and count > policy.retries))
            )
            if policy is None or spent or stopping:
                if spent:
                    failure = replace(failure, retries_spent=True)
                    giving_up = True
                failures.append(failure)
                return
            delay = policy.delay(count)
            log.warning(
                "job %s failed (attempt %d in a row; retrying in %.1f s): %s",
                job.name,
                count,
                delay,
                failure.error,
            )
            failures.append(failure)
            retry_at[job.name] = time.monotonic() + delay

        def retry_due(now: float) -> None:
            """Recover each job whose retry is due (a failed batch may have left commits
            behind), then let it plan again."""
            for name, due in list(retry_at.items()):
                if due > now:
                    continue
                del retry_at[name]
                job = by_name[name]
                try:
                    recovered.extend(self._recover_job(job))
                except Exception as exc:  # noqa: BLE001 - counted as another failed attempt
                    job_failed(job, None, exc)
                    continue
                stopped.discard(name)
                dirty.add(name)

        def run_one(job: Job, batch: EpochBatch) -> BatchResult:
            self._running[job.name] = batch
            try:
                with self.gate.batch(job.name):
                    result = self.engine.run_batch(
                        job, batch, self._lease(job), check_lease=self._lease_check(job)
                    )
            finally:
                self._running.pop(job.name, None)
            if self.on_batch:
                self.on_batch(result)
            return result

        running: dict[Future[BatchResult], tuple[Job, EpochBatch, float]] = {}
        own_tables = {t for job in jobs for t in self.pipeline.tables_of(job)}
        consumers = {
            table: [j.name for j in jobs if any(i.table == table for i in j.inputs)]
            for table in own_tables
        }
        by_name = {job.name: job for job in jobs}
        lineage = list(by_name)  # upstream first, as ordered_jobs gives them
        writers = {t: job.name for job in jobs for t in self.pipeline.tables_of(job)}
        # Jobs that may have a new runnable batch: all at first; then a job whose batch
        # ended and the jobs reading its tables, and source jobs when an epoch opens.
        # The others are not planned again (planning costs catalog round trips): epochs
        # belong to the pipeline, so only its own jobs make another job's epochs runnable.
        dirty = {job.name for job in jobs}
        sealed_through: dict[str, int] = {}
        """Per table of this run's jobs, the epoch it was last seen sealed through: by a
        batch's end, or by planning its job (recovery seals epochs without a batch)."""

        def readers_to_plan(tables: Sequence[str], epoch: int | None) -> set[str]:
            """The jobs reading ``tables`` that their sealing through ``epoch`` can have
            made runnable (all of them for ``None``: a batch that failed or sealed
            nothing): those whose other inputs this run writes and drives are sealed
            through ``epoch`` too."""
            readers = {c for t in tables for c in consumers[t]}
            if epoch is None:
                return readers
            return {
                c
                for c in readers
                if inputs_sealed_through(
                    (i.table for i in by_name[c].inputs if followed(i.table)),
                    sealed_through,
                    epoch,
                )
            }

        def followed(table: str) -> bool:
            """Whether this run drives the job writing ``table``, so that its sealing
            shows in ``sealed_through``."""
            writer = writers.get(table)
            return writer is not None and writer not in stopped and writer not in left

        def seen_sealed(tables: Sequence[str], epoch: int) -> list[str]:
            """Record ``tables`` sealed through ``epoch``; those this moves forward from an
            earlier sighting."""
            moved = [t for t in tables if t in sealed_through and sealed_through[t] < epoch]
            for table in tables:
                sealed_through[table] = max(epoch, sealed_through.get(table, epoch))
            return moved

        left = {job.name for job in jobs} - set(self.leases())
        """Jobs left to a recompute (their leases not held) until its revision is switched."""
        recomputes_checked_at = 0.0

        def follow_recomputes(busy: set[str]) -> None:
            """Leave the jobs a live ``etl recompute`` asks for to it once their batch ends
            (the rest of the pipeline goes on); take them back once its revision is no
            longer BUILDING, recover them (claim their tables) and go on from the switch."""
            keeper = self._keeper
            if keeper is None:
                return
            asked = requested_jobs(
                self.catalog, self.pipeline, self.catalog_pipeline, owner=self.owner
            )
            for name in sorted(asked - left - busy):
                keeper.give_up(name)
                left.add(name)
                ready.pop(name, None)
                log.info("job %s waits for a recompute of its tables (etl recompute)", name)
            for name in sorted(left - asked):
                try:
                    keeper.take(name)
                except LeaseHeldError:
                    continue  # the recompute has not given it back yet
                left.discard(name)
                recovered.extend(self._recover_job(by_name[name]))
                dirty.add(name)
                log.info("job %s goes on after the recompute of its tables", name)

        ready: dict[str, EpochBatch] = {}
        """The next batch of each job that is runnable but waits for a free slot."""
        more_planned: set[str] = set()
        """Jobs whose last plan found more batches than the one it gave them."""
        draining = False

        def holding_slots(now: float) -> list[float]:
            """When each running batch that still counts against the limit stops counting."""
            return [
                started + self.slow_batch_seconds
                for _, _, started in running.values()
                if now - started < self.slow_batch_seconds
            ]

        # One thread per job: a slow batch that stopped counting still has its thread.
        with ThreadPoolExecutor(max_workers=max(1, len(jobs)), thread_name_prefix="job") as pool:
            while True:
                if opening() and time.monotonic() >= next_epoch_at:
                    opened.append(_once_more_if_interrupted(self.open_epoch))
                    next_epoch_at = time.monotonic() + (epoch_interval or 0.0)
                    dirty |= {job.name for job in jobs if not job.inputs}
                if stop is not None and stop.is_set() and not draining:
                    draining = True  # re-plan what waits: every pending epoch in one batch
                    dirty |= set(ready)
                    retry_at.clear()  # a stopping run retries nothing more
                retry_due(time.monotonic())
                busy = {job.name for job, _, _ in running.values()}
                if time.monotonic() >= recomputes_checked_at:
                    recomputes_checked_at = time.monotonic() + _RECOMPUTE_CHECK_SECONDS
                    _once_more_if_interrupted(partial(follow_recomputes, busy))
                to_plan = [
                    job
                    for job in jobs
                    if job.name in dirty
                    and job.name not in busy
                    and job.name not in stopped
                    and job.name not in left
                ]
                dirty.difference_update(job.name for job in to_plan)
                planned = (
                    _once_more_if_interrupted(
                        partial(
                            self._plan_jobs,
                            to_plan,
                            draining=draining,
                            continuous=epoch_interval is not None,
                        )
                    )
                    if to_plan
                    else {}
                )
                for name, (batches, done_through) in planned.items():
                    moved = seen_sealed(self.pipeline.tables_of(by_name[name]), done_through)
                    if moved:
                        dirty |= readers_to_plan(moved, done_through)
                    if batches:
                        ready[name] = batches[0]
                    else:
                        ready.pop(name, None)
                    if len(batches) > 1:
                        more_planned.add(name)
                    else:
                        more_planned.discard(name)
                if giving_up:  # finish what runs, start nothing
                    retry_at.clear()
                    ready.clear()
                now = time.monotonic()
                holding = len(holding_slots(now))
                for name in admission_order(ready, lineage):
                    if holding >= self.max_parallel_jobs:
                        break
                    batch = ready.pop(name)
                    job = by_name[name]
                    running[pool.submit(run_one, job, batch)] = (job, batch, now)
                    holding += 1
                if not running and not opening() and not retry_at:
                    break
                wake_at = list(retry_at.values())
                if opening():
                    wake_at.append(next_epoch_at)
                if ready:
                    wake_at.extend(holding_slots(now))  # a slot frees when a batch turns slow
                timeout = max(0.0, min(wake_at) - time.monotonic()) if wake_at else None
                if not running:
                    assert timeout is not None
                    if stop is not None:
                        stop.wait(timeout)
                    else:
                        time.sleep(timeout)
                    continue
                finished, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
                for future in finished:
                    job, batch, _ = running.pop(future)
                    ended = None if future.exception() is not None else future.result()
                    tables = self.pipeline.tables_of(job)
                    if ended is not None and ended.sealed:
                        seen_sealed(tables, ended.epoch)
                        dirty |= readers_to_plan(tables, ended.epoch)
                    else:
                        dirty |= readers_to_plan(tables, None)
                    # A batch that ended well leaves its job nothing to run unless its last
                    # plan found more: any other epoch becomes runnable by an event that
                    # marks the job (an input's batch ending, an epoch opening). Planning
                    # costs catalog round trips on the way of the epoch downstream.
                    if job.name in more_planned or future.exception() is not None:
                        dirty.add(job.name)
                    try:
                        result = future.result()
                    except (UnclaimedTableError, CatalogUnavailableError) as exc:
                        # Interrupted from outside, not failed: a table of the job appeared
                        # under the batch, created by a runner this one took over from; or
                        # the catalog ended the batch's session mid-transaction (PostgreSQL
                        # ends the transaction of a process that froze inside it). Recover
                        # the job again (claim its tables, seal or roll back what was
                        # committed), then re-plan.
                        failed: BaseException = exc
                        if interruptions[job.name] < _MAX_RECOVERIES_AFTER_INTERRUPTION:
                            interruptions[job.name] += 1
                            log.warning("job %s: %s; recovering the job again", job.name, exc)
                            try:
                                recovered.extend(self._recover_job(job))
                                continue
                            except Exception as err:
                                failed = err
                        job_failed(job, batch, failed)
                        continue
                    except Exception as exc:  # reported as a JobFailure; other jobs go on
                        job_failed(job, batch, exc)
                        continue
                    if failed_in_a_row[job.name]:
                        # A retry made good what failed: those failures no longer fail the run.
                        failed_in_a_row[job.name] = 0
                        retried.extend(f for f in failures if f.job == job.name)
                        failures[:] = [f for f in failures if f.job != job.name]
                    results.append(result)
                    if not result.sealed:
                        stopped.add(job.name)
        return RunResult(
            epochs_opened=tuple(opened),
            batches=tuple(results),
            failures=tuple(failures),
            recovered=tuple(recovered),
            retried=tuple(retried),
            left_to_recompute=tuple(j.name for j in jobs if j.name in left),
        )

    def _record_failure(
        self, job: Job, epoch: int | None, exc: BaseException, attempt: int | None = None
    ) -> JobFailure:
        """Keep a failed batch on record in the catalog (job, epoch, attempt, error class,
        one line, time); the full error goes to the log at debug level only."""
        message = one_line(exc)
        if not isinstance(exc, JobError):
            at = f" at epoch {epoch}" if epoch is not None else " in recovery"
            message = f"job {job.name!r} failed{at}: {type(exc).__name__}: {message}"
        log.debug("job %s failed at epoch %s", job.name, epoch, exc_info=exc)
        generation = None
        if self._keeper is not None:
            try:
                generation = self._keeper.lease(job.name).generation
            except Exception:
                generation = None
        try:
            self.catalog.record_failure(
                JobFailureRecord(
                    job=job.name,
                    error_class=error_class(exc),
                    message=message,
                    owner=self.owner,
                    epoch=epoch,
                    attempt=attempt,
                    generation=generation,
                )
            )
        except CatalogError as err:  # the run's own report still names the failure
            log.warning("could not record the failure of job %s: %s", job.name, err)
        return JobFailure(
            job.name, epoch, message, exc, attempt=attempt, error_class=error_class(exc)
        )


__all__ = [
    "JobFailure",
    "ProgressCallback",
    "RunResult",
    "Runner",
    "catalog_pipeline_name",
    "error_class",
    "one_line",
    "Undeclared",
    "undeclared",
]
