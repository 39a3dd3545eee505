"""The epoch engine: run one batch of epochs of one job, and recover a job after a crash.

One batch (epochs first..last, first < last when backlog catch-up coalesces them) goes:

1. read the inputs: each input table at the Delta version its epoch ``last`` was sealed
   at, or the source slice recorded in the catalog (cut and recorded first if new);
2. run the transform, add ``_epoch = last`` to every row;
3. Spark tasks write Parquet files (a small output: the driver, from the rows collected
   as Arrow), the driver commits them through delta-rs with an app transaction and
   commit metadata (epoch, job, attempt, final) -> PROCESSED (not the final commit of a
   job without a quality gate: the seal follows at once and records it);
4. run the table's quality gate, if any (write, audit, publish);
5. seal the output and its side outputs in one catalog transaction -> WRITTEN, and
   COMMIT when the last table of the pipeline sealed the epoch.

Step 3 is :mod:`etl.engine.commit`, step 4 :mod:`etl.engine.audit`; recovery after a
crash is :mod:`etl.engine.recovery`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from catalog import Catalog, CommitManifest, Epoch, EpochState, Lease, SealRequest, TableEpoch
from consistency import EpochBatch
from etl.delta import (
    DRIVER_READ_BYTES,
    EPOCH_COLUMN,
    TableRead,
    epoch_rows,
    read_epochs_sized,
    read_table_sized,
    table_version,
)
from etl.delta.files import check_write_options
from etl.delta.layout import normalize_location
from etl.delta.logfile import same_rows_version
from etl.engine.audit import audit
from etl.engine.commit import (
    BatchWrite,
    EpochWriter,
    LeaseCheck,
    PreparedWrite,
    RecordedSchemas,
    columns_schema,
    current_version,
    next_attempt,
    with_epoch_column,
)
from etl.engine.timing import StageClock
from etl.errors import (
    DeltaBarrierError,
    InternalError,
    JobExecutionError,
    OutputSchemaError,
    TransformError,
)
from etl.faults import maybe_crash
from etl.pipeline import EpochContext, Job, Pipeline
from etl.sources.base import DirectSlice, DirectWrite, SealedTable, SliceRequest, TableTarget
from etl.spark import (
    SMALL_BATCH_BYTES,
    BatchSessions,
    BatchSize,
    answer_without_delay,
    configure_small_batch,
    evaluated_while_planning,
    replace_temp_view,
    single_partition,
    sql_frame,
)

log = logging.getLogger(__name__)


def _names(sql: str, table: str) -> bool:
    """Whether ``sql`` mentions ``table`` as a word (case-insensitive, as Spark resolves it)."""
    return (
        re.search(rf"(?<![\w`]){re.escape(table)}(?![\w`])|`{re.escape(table)}`", sql, re.I)
        is not None
    )


_TRAILING_SEMICOLONS = re.compile(r"[\s;]+$")
_SQL_ERROR_LOGGER = "SQLQueryContextLogger"
"""PySpark's logger of every SQL error it converts (the query's text and position)."""


class _QuietAttempts(logging.Filter):
    """Drops the SQL errors PySpark logs in a thread while it makes an attempt whose
    failure is expected and handled (other threads' errors are logged)."""

    def __init__(self) -> None:
        super().__init__()
        self._attempting = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self._attempting, "on", False)

    def attempt(self, call: Callable[[], DataFrame]) -> DataFrame | None:
        self._attempting.on = True
        try:
            return call()
        except Exception:  # noqa: BLE001 - the caller runs the query alone instead
            return None
        finally:
            self._attempting.on = False


_quiet = _QuietAttempts()
PySparkLogger.getLogger(_SQL_ERROR_LOGGER).addFilter(_quiet)


def _epoch_tagged_sql(session: SparkSession, query: str, epoch: int) -> DataFrame | None:
    """A SQL transform's rows with ``_epoch`` as their last column, as one query: Spark
    analyzes a query once, where a projection added to its result (``withColumn``) is a
    second analysis of the whole plan (about 8 ms of driver JVM a batch). None when it
    fails: a query no subquery can hold (a command, a comment after a semicolon), or one
    with an error, which the caller runs alone to report the error in the query's own
    words and positions."""
    body = _TRAILING_SEMICOLONS.sub("", query)
    return _quiet.attempt(
        lambda: sql_frame(
            session, f"SELECT *, CAST({int(epoch)} AS BIGINT) AS {EPOCH_COLUMN} FROM (\n{body}\n)"
        )
    )


def _small_inputs(inputs: Mapping[str, TableRead]) -> bool:
    """Whether a batch's input tables are small enough for the small-batch settings (by the
    bytes of the files each input reads, as the log gives them: what Spark's optimizer
    estimates the scans at, without planning them); large inputs keep Spark's defaults. A
    source job asks its source instead (``Source.slice_bytes``): a Kafka slice's plan (a
    range of tasks expanded by mapInArrow) is estimated at a few bytes whatever it reads."""
    return sum(read.bytes for read in inputs.values()) <= SMALL_BATCH_BYTES


def previous_output(session: SparkSession, location: str, version: int) -> DataFrame:
    """A job's output at ``version`` without ``_epoch``: ``ctx.previous``, read as the
    batch's inputs are (small ones by the driver)."""
    read = read_table_sized(session, location, version=version, driver_read_bytes=DRIVER_READ_BYTES)
    return read.frame.drop(EPOCH_COLUMN)


def _write_directly(
    writer: EpochWriter, written: BatchWrite, direct: DirectSlice, *, part: int, final: bool
) -> BatchWrite:
    """Micro-batch ``part`` of a job that copies its source's slice as it is: the source's
    tasks write the files of its rows and rejects, with ``_epoch``, into the tables
    (:attr:`etl.sources.base.DirectSlice.write`), then the rejects' files and the rows' are
    committed as :meth:`EpochWriter.write` commits them."""
    job = writer.job
    location = writer.location(job.output)
    prefix = writer.file_prefix(part)
    partition_by = writer.partition_by(job.output)
    rows = with_epoch_column(direct.rows)
    check_write_options(rows, location, partition_by=partition_by, file_prefix=prefix)
    rejects = (
        TableTarget(
            writer.location(job.rejects_table), columns_schema(_epoch_tagged(direct.rejects))
        )
        if direct.rejects is not None and job.rejects_table
        else None
    )
    writer.check_lease()
    with writer.clock.stage("write"):
        slice_files = direct.write(
            DirectWrite(
                epoch=writer.batch.last,
                file_prefix=prefix,
                rows=TableTarget(location, columns_schema(rows), partition_by),
                rejects=rejects,
            )
        )
    for table, files in ((job.rejects_table, slice_files.rejects), (job.output, slice_files.rows)):
        if table is not None and files is not None:
            written = writer.append_prepared(
                written,
                table=table,
                prepared=PreparedWrite(schema=files.schema, files=files.files, rows=files.rows),
                part=part,
                final=final,
            )
    return written


def _epoch_tagged(rejects: StructType) -> StructType:
    """A source's rejects as the engine writes them: with ``_epoch``, unless the source
    tags them itself."""
    return rejects if EPOCH_COLUMN in rejects.fieldNames() else with_epoch_column(rejects)


class BatchOutcome(StrEnum):
    """How a batch ended: its epoch sealed (WRITTEN), or held PROCESSED by a quality gate."""

    SEALED = "sealed"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class BatchResult:
    """What one batch of one job did."""

    job: str
    first_epoch: int
    epoch: int
    attempt: int
    versions: Mapping[str, int]
    rows: int
    rejected: int = 0
    quarantined: int = 0
    blocked_reason: str | None = None
    """Why the quality gate kept the epoch from being sealed; None when it was sealed."""
    commit: CommitManifest | None = None
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Wall seconds per stage of the batch (:mod:`etl.engine.timing`)."""

    @property
    def outcome(self) -> BatchOutcome:
        return BatchOutcome.SEALED if self.blocked_reason is None else BatchOutcome.BLOCKED

    @property
    def sealed(self) -> bool:
        return self.outcome is BatchOutcome.SEALED


_EPOCHS_KEPT = 64
"""Epochs :meth:`EpochEngine.epoch` keeps: enough for a backlog of pending epochs."""

IDLE_SEALED_MODES = ("overwrite", "merge")
"""Write modes whose batch over unchanged inputs is sealed at the output's current
version without running (docs/design.md, "Idle epochs"). An append job over inputs
without new rows already commits nothing: its output for the epoch is empty."""


@dataclass(frozen=True)
class _Computed:
    """What a job's last batch in this process read and sealed: the inputs' locations and
    versions, and the epoch and version it sealed its output at."""

    epoch: int
    output_version: int
    inputs: Mapping[str, tuple[str, int]]


class EpochEngine:
    """Runs the batches of the jobs of one pipeline (recovery: :mod:`etl.engine.recovery`)."""

    def __init__(self, *, pipeline: Pipeline, catalog: Catalog, spark: SparkSession) -> None:
        self.pipeline = pipeline
        self.catalog = catalog
        self.spark = spark
        self._histories: dict[str, Callable[[int], list[Mapping[str, object]]]] = {}
        self._attempts: dict[str, tuple[int, int]] = {}
        """Per job: (epoch, attempt) of its latest batch."""
        self._computed: dict[str, _Computed] = {}
        """Per overwrite or merge job: what its latest batch in this process read and sealed
        (only a job whose transform read nothing that changes from one epoch to the next)."""
        self._locations: dict[str, str] = {}
        """Where each table lives, as :meth:`location` looked it up."""
        self._schemas = RecordedSchemas()
        """What the catalog records of the tables' schemas, as the batches saw it."""
        self._epochs: OrderedDict[int, Epoch] = OrderedDict()
        """The epochs :meth:`epoch` looked up lately (every job of the pipeline runs each)."""
        self._epochs_lock = threading.Lock()
        self._sessions = BatchSessions(spark)
        """The sessions of the jobs whose batches change nothing in them but views and
        the small-batch settings (SQL transforms, none)."""
        self._run_alone: set[str] = set()
        """SQL transforms that ran alone after their query with ``_epoch`` failed: ones no
        subquery can hold (:func:`_epoch_tagged_sql` is not tried again)."""
        self._one_task: dict[str, bool] = {}
        """Per SQL transform (known after its first small batch): whether its small
        batches read each input in one partition (:func:`etl.spark.single_partition`),
        for a query the optimizer cannot evaluate over local relations (an aggregate, a
        join, a window, a union...) that reads nothing but its inputs."""
        self._planned: dict[str, bool] = {}
        """Per SQL transform (known after its first small batch): whether the optimizer
        evaluates its query over local relations (:func:`etl.spark.evaluated_while_planning`),
        so that its small batches' rows are looked for in the optimized plan first."""

    def location(self, table: str) -> str:
        """Where ``table`` lives: asked of the catalog once per engine, since the catalog
        never changes a registered table's location (TableConflictError)."""
        known = self._locations.get(table)
        if known is None:
            known = self._locations[table] = self.catalog.get_table(table).location
        return known

    def epoch(self, epoch: int) -> Epoch:
        """Epoch ``epoch`` (an issued epoch never changes): asked of the catalog once for
        the jobs of the pipeline, which all run it."""
        with self._epochs_lock:
            known = self._epochs.get(epoch)
        if known is None:
            known = self.catalog.get_epoch(epoch)
            with self._epochs_lock:
                self._epochs[epoch] = known
                while len(self._epochs) > _EPOCHS_KEPT:
                    self._epochs.popitem(last=False)
        return known

    def attempt_of(self, job: Job, batch: EpochBatch) -> int | None:
        """The attempt number the engine gave the job's latest run of ``batch`` (to report a
        failure with); None when it failed before numbering it."""
        epoch, attempt = self._attempts.get(job.name, (None, None))
        return attempt if epoch == batch.last else None

    def _slice_history(self, source: str) -> Callable[[int], list[Mapping[str, object]]]:
        """The bounds of ``source``'s slices recorded after an epoch: one function per
        source and engine, so that a source may cache what it learnt from it."""
        if source not in self._histories:

            def recorded(after: int) -> list[Mapping[str, object]]:
                return [r.bounds for r in self.catalog.slices(source, after=after)]

            self._histories[source] = recorded
        return self._histories[source]

    def writer(
        self,
        job: Job,
        batch: EpochBatch,
        *,
        attempt: int,
        lease: Lease,
        check_lease: LeaseCheck | None = None,
        resumed: bool = False,
        clock: StageClock | None = None,
    ) -> EpochWriter:
        return EpochWriter(
            catalog=self.catalog,
            spark=self.spark,
            job=job,
            batch=batch,
            attempt=attempt,
            lease=lease,
            check_lease=check_lease or (lambda: None),
            resumed=resumed,
            locations={table: self.location(table) for table in self.pipeline.tables_of(job)},
            clock=clock or StageClock(),
            schemas=self._schemas,
            sealed_after_commit=not resumed and self.pipeline.gate_of(job) is None,
        )

    # -- running a batch ---------------------------------------------------------------

    def run_batch(
        self, job: Job, batch: EpochBatch, lease: Lease, *, check_lease: LeaseCheck | None = None
    ) -> BatchResult:
        """Run one batch of the job; a failure raises a JobError naming job and epoch.

        ``check_lease`` is called before every write and raises LeaseLostError once the
        runner lost the job's lease: the batch stops before it changes anything more.
        """
        answer_without_delay(self.spark)
        try:
            return self._run_batch(job, batch, lease, check_lease)
        except DeltaBarrierError:
            raise
        except Exception as exc:
            raise JobExecutionError(job=job.name, epoch=batch.last, cause=exc) from exc

    def _size(self, job: Job, session: SparkSession, *, small: bool) -> None:
        """The small-batch settings for a batch of ``job`` in ``session`` (or not)."""
        if callable(job.transform):  # a new session: Spark's settings
            if small:
                configure_small_batch(session)
        else:
            self._sessions.size(job.name, self._batch_size(job, small=small))

    def _batch_size(self, job: Job, *, small: bool) -> BatchSize:
        """The settings of a SQL transform's batch: ``one_task`` for a small one whose
        query its first small batch showed needs Spark (:attr:`_one_task`)."""
        if not small:
            return "default"
        return "one_task" if self._one_task.get(job.name) else "small"

    def _run_batch(
        self, job: Job, batch: EpochBatch, lease: Lease, check_lease: LeaseCheck | None
    ) -> BatchResult:
        clock = StageClock()
        with clock.stage("read"):
            epoch = self.epoch(batch.last)
            tables = {t: self.location(t) for t in self.pipeline.tables_of(job)}
            start = self.catalog.batch_start(
                tables, batch.last, inputs=[i.table for i in job.inputs]
            )
            # Any table of the job may hold an earlier attempt (a crash after a side
            # output's commit leaves nothing of the epoch in the output): replay above all.
            attempt = next_attempt(start, tables, batch)
            self._attempts[job.name] = (batch.last, attempt)
            # A Python transform may change its session in any way: a new one each batch.
            session = (
                self.spark.newSession()
                if callable(job.transform)
                else self._sessions.session(job.name)
            )
            writer = self.writer(
                job, batch, attempt=attempt, lease=lease, check_lease=check_lease, clock=clock
            )
        written = BatchWrite()
        if job.source is not None:
            with clock.stage("read"):
                bounds = self._slice_bounds(job, batch, epoch.barrier_ts, lease)
                parts = job.source.micro_batches(bounds)
                size = job.source.slice_bytes(bounds)
                small = size is not None and size <= SMALL_BATCH_BYTES
                self._size(job, session, small=small)
            copies = job.transform is None and job.mode == "append" and not writer.resumed
            for index, part in enumerate(parts):
                final = index == len(parts) - 1
                direct = None
                if copies:
                    with clock.stage("read"):
                        direct = job.source.read_direct(session, part, epoch=batch.last)
                if direct is not None:
                    self._check_columns(job, batch, direct.rows.fieldNames())
                    written = _write_directly(writer, written, direct, part=index, final=final)
                else:
                    with clock.stage("read"):
                        data = job.source.read(session, part, epoch=batch.last)
                    with clock.stage("transform"):
                        rows, _ = self.transform(
                            job,
                            session,
                            batch,
                            epoch.barrier_ts,
                            {job.source.name: data.rows},
                            small=small,
                        )
                    if job.rejects_table and data.rejects is not None:
                        rejects = data.rejects
                        if EPOCH_COLUMN not in rejects.columns:  # every row a job writes has one
                            rejects = rejects.withColumn(
                                EPOCH_COLUMN, F.lit(batch.last).cast("long")
                            )
                        written = writer.write(
                            written,
                            table=job.rejects_table,
                            frame=rejects,
                            part=index,
                            final=final,
                            mode="append",
                        )
                    written = writer.write(
                        written,
                        table=job.output,
                        frame=rows,
                        part=index,
                        final=final,
                        mode=job.mode,
                    )
                if not final:
                    maybe_crash("between_micro_batches", job=job.name, epoch=batch.last)
        else:
            with clock.stage("read"):
                versions = self._input_versions(job, batch, start.input_states)
                if self._inputs_unchanged(job, versions, start.latest_written):
                    return replace(self._seal_idle(writer), timings=clock.totals())
                self._computed.pop(job.name, None)
                reads = self._read_inputs_sized(job, batch, session, versions)
                small = _small_inputs(reads)
                self._size(job, session, small=small)
            with clock.stage("transform"):
                rows, per_epoch = self.transform(
                    job,
                    session,
                    batch,
                    epoch.barrier_ts,
                    {table: read.frame for table, read in reads.items()},
                    small=small,
                )
            written = writer.write(
                written,
                table=job.output,
                frame=rows,
                part=0,
                final=True,
                mode=job.mode,
                planned=small and self._planned.get(job.name, False),
            )
            result = self.publish(writer, written)
            if result.sealed and job.mode in IDLE_SEALED_MODES and not per_epoch:
                self._computed[job.name] = _Computed(
                    epoch=batch.last, output_version=result.versions[job.output], inputs=versions
                )
            return replace(result, timings=clock.totals())
        rejected = written.rows_of(job.rejects_table) if job.rejects_table else 0
        result = self.publish(writer, written, rejected=rejected)
        return replace(result, timings=clock.totals())

    def _inputs_unchanged(
        self,
        job: Job,
        versions: Mapping[str, tuple[str, int]],
        sealed_now: Mapping[str, TableEpoch],
    ) -> bool:
        """Whether this batch would compute what the job's last batch in this process
        computed: the same transform (loaded once per process) over inputs whose rows did
        not change (every commit since the versions it read changed no row: none, or
        compaction and claims), its output untouched since it sealed it. ``sealed_now``:
        the newest WRITTEN state of each of the job's tables."""
        computed = self._computed.get(job.name)
        if computed is None or job.mode not in IDLE_SEALED_MODES:
            return False
        tables = self.pipeline.tables_of(job)
        sealed = sealed_now.get(job.output)
        if (
            sealed is None
            or sealed.epoch != computed.epoch
            or sealed.delta_version != computed.output_version
            or set(versions) != set(computed.inputs)
        ):
            return False
        for table, (location, version) in versions.items():
            read_location, read_version = computed.inputs[table]
            if location != read_location or version < read_version:
                return False
            if version > read_version and same_rows_version(location, read_version) < version:
                return False
        for table in tables:
            location = self.location(table)
            table_sealed = sealed_now.get(table)
            latest = table_version(location)
            if table_sealed is None or table_sealed.delta_version is None or latest is None:
                return False
            if same_rows_version(location, table_sealed.delta_version) < latest:
                return False
        return True

    def _seal_idle(self, writer: EpochWriter) -> BatchResult:
        """Seal a batch over unchanged inputs at its tables' current versions: no commit
        (an earlier epoch may be sealed at the same version)."""
        job, batch = writer.job, writer.batch
        with writer.clock.stage("seal"):
            requests = self._seal_requests(writer, BatchWrite())
            commit = writer.seal(requests)
        versions = {r.table: r.delta_version for r in requests}
        self._computed[job.name] = replace(
            self._computed[job.name], epoch=batch.last, output_version=versions[job.output]
        )
        log.debug(
            "job %s epoch %s: inputs unchanged, sealed without a commit", job.name, batch.last
        )
        return BatchResult(
            job=job.name,
            first_epoch=batch.first,
            epoch=batch.last,
            attempt=writer.attempt,
            versions=versions,
            rows=0,
            commit=commit,
        )

    def publish(
        self, writer: EpochWriter, written: BatchWrite, *, rejected: int = 0
    ) -> BatchResult:
        """Quality gate, then seal the output and side outputs together."""
        job, batch = writer.job, writer.batch
        quarantined = 0
        gate = self.pipeline.gate_of(job)
        if gate is not None:
            with writer.clock.stage("audit"):
                verdict = audit(writer, gate, written)
            written = verdict.written
            if verdict.blocked_reason is not None:
                return BatchResult(
                    job=job.name,
                    first_epoch=batch.first,
                    epoch=batch.last,
                    attempt=writer.attempt,
                    versions=dict(written.versions),
                    rows=written.rows_of(job.output),
                    rejected=rejected,
                    blocked_reason=verdict.blocked_reason,
                )
            quarantined = verdict.quarantined
        with writer.clock.stage("seal"):
            requests = self._seal_requests(writer, written)
            commit = writer.seal(requests)
        return BatchResult(
            job=job.name,
            first_epoch=batch.first,
            epoch=batch.last,
            attempt=writer.attempt,
            versions={r.table: r.delta_version for r in requests},
            rows=written.rows_of(job.output),
            rejected=rejected,
            quarantined=quarantined,
            commit=commit,
        )

    def _seal_requests(self, writer: EpochWriter, written: BatchWrite) -> list[SealRequest]:
        """What sealing the batch records, per table of the job; a table this attempt did not
        commit to after an earlier attempt was rolled back is recorded PROCESSED first."""
        job, batch = writer.job, writer.batch
        requests = []
        for table in self.pipeline.tables_of(job):
            version = written.versions.get(table)
            if version is None:
                version = current_version(writer.location(table), table)
            # A batch counts the rows it commits; recovery seals what an earlier run
            # committed, so it counts them in the table.
            rows = (
                epoch_rows(writer.location(table), version=version, epoch=batch.last)
                if writer.resumed
                else written.rows_of(table)
            )
            # Only an earlier attempt at the epoch can have been rolled back: a first
            # attempt has nothing to look up.
            state = (
                self.catalog.table_epoch(table, batch.last)
                if writer.attempt > 1 or writer.resumed
                else None
            )
            if state is not None and state.state is EpochState.ROLLED_BACK:
                # An earlier attempt was undone and this one committed nothing to the table
                # (a side output without rows this time): WRITTEN may not follow
                # ROLLED_BACK, the table records this attempt first.
                written = writer.record(written, table=table, version=version, rows=rows)
            requests.append(
                SealRequest(
                    table=table,
                    epoch=batch.last,
                    delta_version=version,
                    attempt=writer.attempt,
                    rows=rows,
                    first_epoch=batch.first,
                )
            )
        return requests

    def _slice_bounds(
        self, job: Job, batch: EpochBatch, barrier_ts, lease: Lease
    ) -> Mapping[str, object]:
        assert job.source is not None
        source = job.source.name
        recorded = self.catalog.slices(source, after=batch.first - 1, up_to=batch.last)
        if recorded and recorded[-1].epoch == batch.last and len(recorded) == 1:
            return recorded[-1].bounds
        if recorded:
            # consistency.plan_batches ends a batch at an epoch with a recorded slice.
            raise InternalError(
                f"job {job.name!r}: batch {batch.first}..{batch.last} spans the recorded "
                f"slices of epochs {[r.epoch for r in recorded]}"
            )
        previous = self.catalog.latest_slice(source)
        previous_bounds = previous.bounds if previous else None
        catch_up = batch.coalesced or job.source.is_backlogged(previous_bounds)
        bounds = job.source.cut(
            SliceRequest(
                epoch=batch.last,
                first_epoch=batch.first,
                barrier_ts=barrier_ts,
                previous_bounds=previous_bounds,
                catch_up=catch_up,
                recorded=self._slice_history(source),
                sealed=self._sealed_table_at(job.source.table_location),
            )
        )
        recorded_slice = self.catalog.record_slice(
            source,
            batch.last,
            bounds,
            catch_up=catch_up,
            job=job.name,
            generation=lease.generation,
        )
        maybe_crash("after_slice_recorded", job=job.name, epoch=batch.last)
        return recorded_slice.bounds

    def _sealed_table_at(self, location: str | None) -> SealedTable | None:
        """The table of the catalog at ``location`` and its newest sealed version, or None
        when no table of the catalog is there (a foreign table)."""
        if location is None:
            return None
        for table in self.catalog.list_tables(include_retired=True):
            if normalize_location(table.location) == location:
                written = self.catalog.latest_written([table.name]).get(table.name)
                return SealedTable(table.name, written.delta_version if written else None)
        return None

    def _input_versions(
        self, job: Job, batch: EpochBatch, states: Mapping[str, TableEpoch]
    ) -> dict[str, tuple[str, int]]:
        """Each input's location and the Delta version its epoch ``batch.last`` is sealed at
        (``states``: the inputs' states at that epoch)."""
        versions: dict[str, tuple[str, int]] = {}
        for item in job.inputs:
            state = states.get(item.table)
            if (
                state is None
                or state.state is not EpochState.WRITTEN
                or state.delta_version is None
            ):
                raise InternalError(
                    f"job {job.name!r} epoch {batch.last}: input {item.table!r} does not have the "
                    "epoch WRITTEN (alignment was violated)"
                )
            versions[item.table] = (self.location(item.table), state.delta_version)
        return versions

    def read_inputs(
        self,
        job: Job,
        batch: EpochBatch,
        session: SparkSession,
        versions: Mapping[str, tuple[str, int]],
    ) -> dict[str, DataFrame]:
        reads = self._read_inputs_sized(job, batch, session, versions)
        return {table: read.frame for table, read in reads.items()}

    def _read_inputs_sized(
        self,
        job: Job,
        batch: EpochBatch,
        session: SparkSession,
        versions: Mapping[str, tuple[str, int]],
    ) -> dict[str, TableRead]:
        """Each input of the batch, with the bytes of the files it reads."""
        reads: dict[str, TableRead] = {}
        for item in job.inputs:
            location, version = versions[item.table]
            if job.read_mode(item) == "slice":
                reads[item.table] = read_epochs_sized(
                    session,
                    location,
                    version=version,
                    first_epoch=batch.first,
                    last_epoch=batch.last,
                    driver_read_bytes=DRIVER_READ_BYTES,
                )
            else:
                reads[item.table] = read_table_sized(
                    session, location, version=version, driver_read_bytes=DRIVER_READ_BYTES
                )
        return reads

    def _previous(self, job: Job, session: SparkSession) -> DataFrame | None:
        sealed = self.catalog.latest_written([job.output]).get(job.output)
        if sealed is None or sealed.delta_version is None:
            return None
        return previous_output(session, self.location(job.output), sealed.delta_version)

    def transform(
        self,
        job: Job,
        session: SparkSession,
        batch: EpochBatch,
        barrier_ts,
        inputs: Mapping[str, DataFrame],
        *,
        read_previous: Callable[[], DataFrame | None] | None = None,
        small: bool = False,
    ) -> tuple[DataFrame, bool]:
        """The transform's rows with ``_epoch``, and whether it read anything that changes
        from one epoch to the next (its epoch, barrier time or own previous output).

        ``read_previous`` gives ``ctx.previous`` (default: the output at its latest sealed
        version; a recompute gives the revision it builds). ``small``: the batch runs with
        the small-batch settings (:meth:`_size`), a SQL transform's inputs then in one
        partition each where its first small batch showed that they should be."""
        per_epoch = False
        if job.transform is None:
            (result,) = inputs.values()
        else:
            ctx = EpochContext(
                spark=session,
                job=job.name,
                epoch=batch.last,
                first_epoch=batch.first,
                barrier_ts=barrier_ts,
                inputs=dict(inputs),
                read_previous=read_previous or (lambda: self._previous(job, session)),
            )
            tagged = None
            try:
                if isinstance(job.transform, str):
                    one_task = self._batch_size(job, small=small) == "one_task"
                    for name, frame in ctx.inputs.items():
                        replace_temp_view(single_partition(frame) if one_task else frame, name)
                    # Reading the previous output costs a table open and a file listing:
                    # only for a query that names the output.
                    reads_previous = _names(job.transform, job.output)
                    if reads_previous and ctx.previous is not None:
                        replace_temp_view(ctx.previous, job.output)
                    if job.name not in self._run_alone:
                        tagged = _epoch_tagged_sql(session, job.transform, batch.last)
                    if tagged is None:
                        result = session.sql(job.transform)
                        self._run_alone.add(job.name)
                    else:
                        result = tagged
                    if small and job.name not in self._one_task:
                        local = evaluated_while_planning(result._jdf.queryExecution().analyzed())
                        self._planned[job.name] = local
                        # A source's slice keeps its tasks (a Kafka slice: one per partition).
                        self._one_task[job.name] = (
                            job.source is None and not reads_previous and not local
                        )
                else:
                    result = job.transform(ctx)
                if not isinstance(result, DataFrame):
                    raise TypeError(
                        f"the transform returned {type(result).__name__}, not a DataFrame"
                    )
            except DeltaBarrierError:
                raise
            except Exception as exc:
                raise TransformError(job=job.name, epoch=batch.last, cause=exc) from exc
            per_epoch = bool(ctx.per_epoch_reads)
            if tagged is not None:
                self._check_columns(job, batch, tagged.columns[:-1])
                return tagged, per_epoch
        self._check_columns(job, batch, result.columns)
        return result.withColumn(EPOCH_COLUMN, F.lit(batch.last).cast("long")), per_epoch

    def _check_columns(self, job: Job, batch: EpochBatch, columns: Sequence[str]) -> None:
        if EPOCH_COLUMN in columns and job.transform is not None:
            raise OutputSchemaError(
                job=job.name,
                epoch=batch.last,
                problem=f"the transform's output has a column {EPOCH_COLUMN!r}; "
                "the engine sets it, drop it from the result",
            )
        missing = [k for k in (*job.keys, *job.partition_by) if k not in columns]
        if missing:
            raise OutputSchemaError(
                job=job.name,
                epoch=batch.last,
                problem=f"the output lacks key/partition columns {missing}; it has {columns}",
            )
        if len(set(columns)) != len(columns):
            raise OutputSchemaError(
                job=job.name, epoch=batch.last, problem=f"duplicate column names in {columns}"
            )


__all__ = [
    "BatchOutcome",
    "BatchResult",
    "EpochEngine",
]
