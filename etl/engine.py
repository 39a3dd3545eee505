"""The epoch engine: run one batch of epochs of one job, and recover a job after a crash.

One batch (epochs first..last, first < last when backlog catch-up coalesces them) goes:

1. read the inputs: each input table at the Delta version its epoch ``last`` was sealed
   at, or the source slice recorded in the catalog (cut and recorded first if new);
2. run the transform, add ``_epoch = last`` to every row;
3. Spark tasks write Parquet files, the driver commits them through delta-rs with an
   app transaction and commit metadata (epoch, job, attempt, final) -> PROCESSED;
4. run the table's quality gate, if any (write, audit, publish);
5. seal the output and its side outputs in one catalog transaction -> WRITTEN, and
   COMMIT when the last table of the pipeline sealed the epoch.

Recovery reads back from the Delta log what a crashed run committed, and seals what is
complete or rolls back (RESTORE) what is partial, so that a replay reads the same input
and writes the same rows exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from catalog import (
    Catalog,
    CommitManifest,
    EpochState,
    Lease,
    SealRequest,
    TableEpoch,
)
from consistency import (
    META_ATTEMPT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    META_ROLLBACK_OF,
    EpochBatch,
    LogCommit,
    RollbackAction,
    SealAction,
    plan_recovery,
)
from etl.delta import (
    DataFile,
    commit_files,
    log_commits,
    merge_files,
    read_epochs,
    read_table,
    remove_staging,
    restore_table,
    table_version,
    write_files,
)
from etl.errors import (
    DeltaBarrierError,
    JobExecutionError,
    OutputSchemaError,
    SchemaMismatchError,
    TransformError,
)
from etl.faults import maybe_crash
from etl.pipeline import EpochContext, Job, Pipeline

log = logging.getLogger(__name__)

EPOCH_COLUMN = "_epoch"

# A Delta app transaction version must grow with every commit of the job, also across a
# RESTORE (which does not reset it): epoch, then attempt, then micro-batch.
_ATTEMPT_BITS = 12
_BATCH_BITS = 12


def txn_version(epoch: int, attempt: int, batch: int) -> int:
    return (epoch << (_ATTEMPT_BITS + _BATCH_BITS)) | (attempt << _BATCH_BITS) | batch


def app_id(job: str) -> str:
    return f"delta-barrier/{job}"


def commit_metadata(job: Job, batch: EpochBatch, attempt: int) -> dict[str, str | int | bool]:
    """What every commit of a batch records in the Delta log for recovery to read back."""
    return {
        META_EPOCH: batch.last,
        META_FIRST_EPOCH: batch.first,
        META_JOB: job.name,
        META_ATTEMPT: attempt,
    }


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
    sealed: bool = True
    blocked_reason: str | None = None
    commit: CommitManifest | None = None


@dataclass(frozen=True)
class RecoveryStep:
    """One thing recovery did to one table."""

    job: str
    table: str
    action: str
    epochs: tuple[int, ...]
    version: int | None


@dataclass(frozen=True)
class AuditVerdict:
    """A quality gate's decision on one batch."""

    blocked_reason: str | None = None
    quarantined: int = 0


@dataclass
class _Written:
    """Per-table versions and row counts committed by the current batch."""

    versions: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


class EpochEngine:
    """Runs batches and recovery for the jobs of one pipeline."""

    def __init__(self, *, pipeline: Pipeline, catalog: Catalog, spark: SparkSession) -> None:
        self.pipeline = pipeline
        self.catalog = catalog
        self.spark = spark

    # -- running a batch ---------------------------------------------------------------

    def run_batch(self, job: Job, batch: EpochBatch, lease: Lease) -> BatchResult:
        """Run one batch of the job; a failure raises a JobError naming job and epoch."""
        try:
            return self._run_batch(job, batch, lease)
        except DeltaBarrierError:
            raise
        except Exception as exc:
            raise JobExecutionError(job=job.name, epoch=batch.last, cause=exc) from exc

    def _run_batch(self, job: Job, batch: EpochBatch, lease: Lease) -> BatchResult:
        epoch = self.catalog.get_epoch(batch.last)
        # Any table of the job may hold the rolled-back attempt (a crash after a side
        # output's commit leaves nothing of the epoch in the output): replay above all.
        states = [
            self.catalog.table_epoch(table, batch.last) for table in self.pipeline.tables_of(job)
        ]
        attempt = 1 + max(
            (s.attempt for s in states if s and s.state is EpochState.ROLLED_BACK), default=0
        )
        session = self.spark.newSession()
        written = _Written()
        meta = commit_metadata(job, batch, attempt)
        rejected = 0
        if job.source is not None:
            bounds = self._slice_bounds(job, batch, epoch.barrier_ts, lease)
            parts = job.source.micro_batches(bounds)
            for index, part in enumerate(parts):
                final = index == len(parts) - 1
                data = job.source.read(session, part, epoch=batch.last)
                rows = self._transform(
                    job, session, batch, epoch.barrier_ts, {job.source.name: data.rows}
                )
                if job.rejects_table and data.rejects is not None:
                    rejected += self._write(
                        job,
                        job.rejects_table,
                        data.rejects,
                        batch,
                        attempt,
                        index,
                        final,
                        meta,
                        lease,
                        written,
                        mode="append",
                    )
                self._write(
                    job,
                    job.output,
                    rows,
                    batch,
                    attempt,
                    index,
                    final,
                    meta,
                    lease,
                    written,
                    mode=job.mode,
                )
                if not final:
                    maybe_crash("between_micro_batches", job=job.name, epoch=batch.last)
        else:
            inputs = self._read_inputs(job, batch, session)
            rows = self._transform(job, session, batch, epoch.barrier_ts, inputs)
            self._write(
                job, job.output, rows, batch, attempt, 0, True, meta, lease, written, mode=job.mode
            )

        return self._publish(job, batch, attempt, lease, written, rejected=rejected)

    def _publish(
        self,
        job: Job,
        batch: EpochBatch,
        attempt: int,
        lease: Lease,
        written: _Written,
        *,
        rejected: int = 0,
    ) -> BatchResult:
        """Quality gate, then seal the output and side outputs together."""
        quarantined = 0
        gate = self.pipeline.gates.get(job.output)
        if gate is not None:
            verdict = self._audit(job, batch, attempt, lease, written)
            if verdict.blocked_reason is not None:
                return BatchResult(
                    job=job.name,
                    first_epoch=batch.first,
                    epoch=batch.last,
                    attempt=attempt,
                    versions=dict(written.versions),
                    rows=written.rows.get(job.output, 0),
                    rejected=rejected,
                    sealed=False,
                    blocked_reason=verdict.blocked_reason,
                )
            quarantined = verdict.quarantined
        requests = []
        for table in self.pipeline.tables_of(job):
            version = written.versions.get(table)
            if version is None:
                version = self._current_version(table)
            requests.append(
                SealRequest(
                    table=table,
                    epoch=batch.last,
                    delta_version=version,
                    attempt=attempt,
                    rows=written.rows.get(table, 0),
                    first_epoch=batch.first,
                )
            )
        commit = self.catalog.seal(job.name, lease.generation, requests)
        maybe_crash("after_seal", job=job.name, epoch=batch.last)
        return BatchResult(
            job=job.name,
            first_epoch=batch.first,
            epoch=batch.last,
            attempt=attempt,
            versions={r.table: r.delta_version for r in requests},
            rows=written.rows.get(job.output, 0),
            rejected=rejected,
            quarantined=quarantined,
            commit=commit,
        )

    def _audit(
        self, job: Job, batch: EpochBatch, attempt: int, lease: Lease, written: _Written
    ) -> AuditVerdict:
        from etl.gates import audit_epoch

        return audit_epoch(self, job, batch, attempt, lease, written)

    def _slice_bounds(
        self, job: Job, batch: EpochBatch, barrier_ts, lease: Lease
    ) -> Mapping[str, object]:
        assert job.source is not None
        recorded = self.catalog.get_slice(job.source.name, batch.last)
        if recorded is not None:
            return recorded.bounds
        from etl.sources.base import SliceRequest

        previous = self.catalog.latest_slice(job.source.name)
        previous_bounds = previous.bounds if previous else None
        catch_up = batch.coalesced or job.source.is_backlogged(previous_bounds)
        bounds = job.source.cut(
            SliceRequest(
                epoch=batch.last,
                first_epoch=batch.first,
                barrier_ts=barrier_ts,
                previous_bounds=previous_bounds,
                catch_up=catch_up,
            )
        )
        recorded_slice = self.catalog.record_slice(
            job.source.name,
            batch.last,
            bounds,
            catch_up=catch_up,
            job=job.name,
            generation=lease.generation,
        )
        maybe_crash("after_slice_recorded", job=job.name, epoch=batch.last)
        return recorded_slice.bounds

    def _read_inputs(
        self, job: Job, batch: EpochBatch, session: SparkSession
    ) -> dict[str, DataFrame]:
        states = self.catalog.states_at([i.table for i in job.inputs], batch.last)
        inputs: dict[str, DataFrame] = {}
        for item in job.inputs:
            state = states.get(item.table)
            if (
                state is None
                or state.state is not EpochState.WRITTEN
                or state.delta_version is None
            ):
                raise DeltaBarrierError(
                    f"job {job.name!r} epoch {batch.last}: input {item.table!r} does not have the "
                    "epoch WRITTEN (alignment was violated; this is a bug)"
                )
            location = self.catalog.get_table(item.table).location
            if job.read_mode(item) == "slice":
                inputs[item.table] = read_epochs(
                    session,
                    location,
                    version=state.delta_version,
                    first_epoch=batch.first,
                    last_epoch=batch.last,
                )
            else:
                inputs[item.table] = read_table(session, location, version=state.delta_version)
        return inputs

    def _previous(self, job: Job, session: SparkSession) -> DataFrame | None:
        sealed = self.catalog.latest_written([job.output]).get(job.output)
        if sealed is None or sealed.delta_version is None:
            return None
        location = self.catalog.get_table(job.output).location
        return read_table(session, location, version=sealed.delta_version)

    def _transform(
        self,
        job: Job,
        session: SparkSession,
        batch: EpochBatch,
        barrier_ts,
        inputs: Mapping[str, DataFrame],
    ) -> DataFrame:
        previous = self._previous(job, session)
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
                previous=previous.drop(EPOCH_COLUMN) if previous is not None else None,
            )
            try:
                if isinstance(job.transform, str):
                    for name, frame in ctx.inputs.items():
                        frame.createOrReplaceTempView(name)
                    if ctx.previous is not None:
                        ctx.previous.createOrReplaceTempView(job.output)
                    result = session.sql(job.transform)
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
        self._check_columns(job, batch, result)
        return result.withColumn(EPOCH_COLUMN, F.lit(batch.last).cast("long"))

    def _check_columns(self, job: Job, batch: EpochBatch, result: DataFrame) -> None:
        columns = result.columns
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

    def _write(
        self,
        job: Job,
        table: str,
        frame: DataFrame,
        batch: EpochBatch,
        attempt: int,
        index: int,
        final: bool,
        meta: Mapping[str, str | int | bool],
        lease: Lease,
        written: _Written,
        *,
        mode: str,
    ) -> int:
        """Write and commit one micro-batch of one table; returns the rows it committed."""
        info = self.catalog.get_table(table)
        location = info.location
        current = table_version(location)
        prefix = f"{batch.last}-{attempt}-{index}"
        removes: Sequence[str] = ()
        if mode == "merge" and current is not None:
            base = written.versions.get(table, current)
            merged = merge_files(
                self.spark,
                location,
                version=base,
                updates=frame,
                keys=job.keys,
                partition_by=job.partition_by,
                file_prefix=prefix,
            )
            files, removes, rows = merged.adds, merged.removes, merged.upserted
        else:
            files = write_files(frame, location, partition_by=job.partition_by, file_prefix=prefix)
            rows = sum(f.rows for f in files)
        needs_commit = current is None or bool(files) or bool(removes) or mode == "overwrite"
        if not needs_commit:
            written.rows[table] = written.rows.get(table, 0)
            return 0
        maybe_crash("before_commit", job=job.name, epoch=batch.last)
        version = self._commit(
            job, table, frame, files, removes, batch, attempt, index, final, meta, mode=mode
        )
        maybe_crash("after_commit", job=job.name, epoch=batch.last)
        self.catalog.record_processed(
            table,
            batch.last,
            delta_version=version,
            job=job.name,
            attempt=attempt,
            generation=lease.generation,
            rows=written.rows.get(table, 0) + rows,
        )
        if info.schema_json is None:
            from deltalake import DeltaTable

            self.catalog.update_table_schema(table, DeltaTable(location).schema().to_json())
        written.versions[table] = version
        written.rows[table] = written.rows.get(table, 0) + rows
        return rows

    def _commit(
        self,
        job: Job,
        table: str,
        frame: DataFrame,
        files: Sequence[DataFile],
        removes: Sequence[str],
        batch: EpochBatch,
        attempt: int,
        index: int,
        final: bool,
        meta: Mapping[str, str | int | bool],
        *,
        mode: str,
    ) -> int:
        location = self.catalog.get_table(table).location
        try:
            return commit_files(
                location,
                files,
                schema=to_arrow_schema(frame.schema, timezone="UTC"),
                mode="overwrite" if mode == "overwrite" else "append",
                partition_by=job.partition_by if table == job.output else (),
                removes=removes,
                app_id=app_id(f"{job.name}/{table}"),
                txn_version=txn_version(batch.last, attempt, index),
                metadata={**meta, META_BATCH: index, META_FINAL: final},
            )
        except SchemaMismatchError as exc:
            raise OutputSchemaError(job=job.name, epoch=batch.last, problem=str(exc)) from exc

    def _current_version(self, table: str) -> int:
        version = table_version(self.catalog.get_table(table).location)
        if version is None:
            raise DeltaBarrierError(f"table {table!r} has no Delta version to seal at")
        return version

    # -- recovery ----------------------------------------------------------------------

    def recover(self, job: Job, lease: Lease) -> list[RecoveryStep]:
        """Bring the catalog and the Delta logs of the job's tables back into agreement."""
        steps: list[RecoveryStep] = []
        tables = self.pipeline.tables_of(job)
        plans = {}
        complete: set[int] = set()
        for table in tables:
            sealed = self.catalog.latest_written([table]).get(table)
            location = self.catalog.get_table(table).location
            remove_staging(location)
            commits = log_commits(location, after_version=sealed.delta_version if sealed else None)
            states = [
                s
                for s in self.catalog.table_epochs(table, after=sealed.epoch if sealed else 0)
                if s.state in (EpochState.PROCESSED, EpochState.ROLLED_BACK)
            ]
            if table != job.output:
                # A side output's epoch is complete only when the output's is: a crash between
                # the side commit and the output commit leaves the side's commit to undo.
                commits = [replace(c, final=c.final and c.epoch in complete) for c in commits]
            plan = plan_recovery(
                table=table,
                job=job.name,
                sealed_version=sealed.delta_version if sealed else None,
                sealed_epoch=sealed.epoch if sealed else None,
                catalog_states=states,
                log=commits,
            )
            plans[table] = (plan, commits, states)
            if table == job.output:
                complete = {a.epoch for a in plan.actions if isinstance(a, SealAction)}

        for table in tables:
            plan, commits, states = plans[table]
            for action in plan.actions:
                if isinstance(action, RollbackAction):
                    steps.append(self._rollback(job, table, action, commits, states, lease))

        output_plan = plans[job.output][0]
        for action in output_plan.actions:
            if not isinstance(action, SealAction):
                continue
            written = _Written()
            for table in tables:
                seal = next(
                    (
                        a
                        for a in plans[table][0].actions
                        if isinstance(a, SealAction) and a.epoch == action.epoch
                    ),
                    None,
                )
                if seal is not None:
                    written.versions[table] = seal.delta_version
            for table, version in written.versions.items():
                state = self.catalog.table_epoch(table, action.epoch)
                if state is not None and state.state is EpochState.ROLLED_BACK:
                    # A replay committed but was never recorded: WRITTEN may not follow
                    # ROLLED_BACK directly.
                    self.catalog.record_processed(
                        table,
                        action.epoch,
                        delta_version=version,
                        job=job.name,
                        attempt=action.attempt,
                        generation=lease.generation,
                    )
            batch = EpochBatch(first=action.first_epoch, last=action.epoch)
            result = self._publish(job, batch, action.attempt, lease, written)
            steps.append(
                RecoveryStep(
                    job=job.name,
                    table=job.output,
                    action="sealed" if result.sealed else "blocked",
                    epochs=(action.epoch,),
                    version=action.delta_version,
                )
            )
        return steps

    def _rollback(
        self,
        job: Job,
        table: str,
        action: RollbackAction,
        commits: Sequence[LogCommit],
        states: Sequence[TableEpoch],
        lease: Lease,
    ) -> RecoveryStep:
        location = self.catalog.get_table(table).location
        current = table_version(location)
        if current is not None and action.to_version != current:
            restore_table(
                location,
                to_version=action.to_version,
                metadata={META_ROLLBACK_OF: ",".join(map(str, action.epochs)), META_JOB: job.name},
            )
        by_epoch = {s.epoch: s for s in states}
        for epoch in action.epochs:
            state = by_epoch.get(epoch)
            if state is None or state.state is not EpochState.PROCESSED:
                # Committed to Delta but never recorded: record it so the audit shows the undo.
                undone = [c for c in commits if c.epoch == epoch]
                if state is not None and state.state is EpochState.ROLLED_BACK:
                    continue
                self.catalog.record_processed(
                    table,
                    epoch,
                    delta_version=undone[-1].version if undone else (current or 0),
                    job=job.name,
                    attempt=max((c.attempt or 1 for c in undone), default=1),
                    generation=lease.generation,
                )
            self.catalog.mark_rolled_back(
                table,
                epoch,
                job=job.name,
                generation=lease.generation,
                reason="partial epoch undone by recovery",
            )
        return RecoveryStep(
            job=job.name,
            table=table,
            action="rolled back",
            epochs=action.epochs,
            version=action.to_version,
        )
