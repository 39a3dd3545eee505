"""Validations, job failures, resolutions of blocked epochs, and the status report.

In SQL, on SQLite and PostgreSQL alike (see catalog.dialect).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from catalog.errors import CatalogError, PipelineMismatchError, WriterMismatchError
from catalog.models import (
    FAILURE_MESSAGE_MAX_CHARS,
    JobFailureRecord,
    Resolution,
    ResolutionAction,
    TableStatus,
    ValidationRecord,
)
from catalog.records.base import RecordStore
from catalog.rows import json_text
from catalog.schema import (
    commits_table,
    epochs_table,
    job_failures_table,
    jobs_table,
    leases_table,
    pipelines_table,
    resolutions_table,
    tables_table,
    validations_table,
)
from catalog.store import SqlStore


class SqlRecordStore(SqlStore, RecordStore):
    """Validations, job failures, resolutions of blocked epochs, and the status report."""

    def record_validation(self, record: ValidationRecord, *, job: str, generation: int) -> None:
        v = validations_table
        with self._write() as conn:
            table_row = self._table_row(conn, record.table, job=job)
            self._check_lease(conn, job, generation)
            if table_row.writer_job != job:
                raise WriterMismatchError(table=record.table, job=job, writer=table_row.writer_job)
            self._check_epoch_pipeline(
                self._epoch_row(conn, record.epoch), table_row.pipeline, table=record.table
            )
            conn.execute(
                v.delete().where(v.c.table_name == record.table, v.c.epoch == record.epoch)
            )
            conn.execute(
                v.insert().values(
                    table_name=record.table,
                    epoch=record.epoch,
                    success=record.success,
                    policy=record.policy,
                    results=json_text(record.results),
                    recorded_at=self._now(conn),
                )
            )

    @staticmethod
    def _validation(row: Any) -> ValidationRecord:
        return ValidationRecord(
            table=row.table_name,
            epoch=row.epoch,
            success=row.success,
            policy=row.policy,
            results=json.loads(row.results),
            recorded_at=row.recorded_at,
        )

    def validations(self, table: str, *, epoch: int | None = None) -> list[ValidationRecord]:
        v = validations_table
        query = sa.select(v).where(v.c.table_name == table)
        if epoch is not None:
            query = query.where(v.c.epoch == epoch)
        with self._read() as conn:
            return [self._validation(row) for row in conn.execute(query.order_by(v.c.epoch))]

    @staticmethod
    def _one_line(message: str) -> str:
        line = " / ".join(part.strip() for part in str(message).splitlines() if part.strip())
        if len(line) > FAILURE_MESSAGE_MAX_CHARS:
            line = line[: FAILURE_MESSAGE_MAX_CHARS - 1] + "…"
        return line

    def record_failure(self, failure: JobFailureRecord) -> JobFailureRecord:
        f = job_failures_table
        with self._write() as conn:
            job_row = self._job_row(conn, failure.job)
            if failure.pipeline is not None and failure.pipeline != job_row.pipeline:
                raise PipelineMismatchError(
                    job=failure.job,
                    table="(failure record)",
                    job_pipeline=job_row.pipeline,
                    table_pipeline=failure.pipeline,
                    role="failure",
                )
            if failure.epoch is not None:
                self._epoch_row(conn, failure.epoch)
            values = dict(
                job=failure.job,
                pipeline=job_row.pipeline,
                epoch=failure.epoch,
                attempt=failure.attempt,
                error_class=failure.error_class[:256],
                message=self._one_line(failure.message),
                owner=failure.owner,
                generation=failure.generation,
                failed_at=self._now(conn),
            )
            new_id = conn.execute(f.insert().values(**values).returning(f.c.id)).scalar_one()
            return JobFailureRecord(id=new_id, **values)

    @staticmethod
    def _failure(row: Any) -> JobFailureRecord:
        return JobFailureRecord(
            job=row.job,
            error_class=row.error_class,
            message=row.message,
            owner=row.owner,
            epoch=row.epoch,
            attempt=row.attempt,
            generation=row.generation,
            pipeline=row.pipeline,
            failed_at=row.failed_at,
            id=row.id,
        )

    def failures(
        self, *, job: str | None = None, epoch: int | None = None, limit: int | None = None
    ) -> list[JobFailureRecord]:
        f = job_failures_table
        query = sa.select(f).order_by(f.c.id.desc()).limit(limit)
        if job is not None:
            query = query.where(f.c.job == job)
        if epoch is not None:
            query = query.where(f.c.epoch == epoch)
        with self._read() as conn:
            return [self._failure(row) for row in conn.execute(query)]

    @staticmethod
    def _last_failures_query() -> sa.Select[Any]:
        # One index descent of ix_job_failures_job per job, then rows by primary key.
        f, inner = job_failures_table, job_failures_table.alias("f2")
        newest = (
            sa.select(sa.func.max(inner.c.id))
            .where(inner.c.job == jobs_table.c.name)
            .scalar_subquery()
        )
        return sa.select(f).where(f.c.id.in_(sa.select(newest).select_from(jobs_table)))

    def record_resolution(
        self,
        table: str,
        epoch: int,
        *,
        action: ResolutionAction | str,
        actor: str,
        reason: str,
    ) -> Resolution:
        try:
            action = ResolutionAction(action)
        except ValueError:
            raise CatalogError(
                f"resolution of table {table!r} epoch {epoch}: unknown action {action!r}; "
                f"use one of {', '.join(ResolutionAction)}"
            ) from None
        with self._write() as conn:
            table_row = self._table_row(conn, table)
            self._check_epoch_pipeline(
                self._epoch_row(conn, epoch), table_row.pipeline, table=table
            )
            resolution = Resolution(
                table=table,
                epoch=epoch,
                action=action,
                actor=actor,
                reason=reason,
                at=self._now(conn),
            )
            conn.execute(
                resolutions_table.insert().values(
                    table_name=table,
                    epoch=epoch,
                    action=action.value,
                    actor=actor,
                    reason=reason,
                    recorded_at=resolution.at,
                )
            )
            return resolution

    def resolutions(self, table: str, *, epoch: int | None = None) -> list[Resolution]:
        r = resolutions_table
        query = sa.select(r).where(r.c.table_name == table)
        if epoch is not None:
            query = query.where(r.c.epoch == epoch)
        with self._read() as conn:
            return [
                Resolution(
                    table=row.table_name,
                    epoch=row.epoch,
                    action=ResolutionAction(row.action),
                    actor=row.actor,
                    reason=row.reason,
                    at=row.recorded_at,
                )
                for row in conn.execute(query.order_by(r.c.id))
            ]

    def table_status(self) -> list[TableStatus]:
        # A fixed number of statements whatever the history: latest-state lookups are
        # index descents per table, per-pipeline newest rows are descents per pipeline.
        p, e, c = pipelines_table, epochs_table, commits_table
        newest_epoch = (
            sa.select(sa.func.max(e.c.id)).where(e.c.pipeline == p.c.name).scalar_subquery()
        )
        cx = c.alias("cx")
        newest_commit = (
            sa.select(sa.func.max(cx.c.epoch)).where(cx.c.pipeline == p.c.name).scalar_subquery()
        )
        with self._read(snapshot=True) as conn:
            tables = [
                self._table_info(row)
                for row in conn.execute(sa.select(tables_table).order_by(tables_table.c.name))
            ]
            names = [table.name for table in tables]
            processed = {
                row.table_name: self._table_epoch(row)
                for row in self._latest_rows(conn, "processed", names)
            }
            written = {
                row.table_name: self._table_epoch(row)
                for row in self._latest_rows(conn, "written", names)
            }
            checked = {
                row.table_name: self._validation(row)
                for row in self._latest_rows(conn, "validation", names)
            }
            writers = sorted({t.writer_job for t in tables if t.writer_job is not None})
            leases = {
                row.job: self._lease(row)
                for row in conn.execute(
                    sa.select(leases_table).where(leases_table.c.job.in_(writers))
                )
            }
            failed = {
                row.job: self._failure(row) for row in conn.execute(self._last_failures_query())
            }
            pipeline_epochs = {
                row.pipeline: self._epoch(row)
                for row in conn.execute(
                    sa.select(e).where(e.c.id.in_(sa.select(newest_epoch).select_from(p)))
                )
            }
            pipeline_commits = {
                row.pipeline: self._commit(row)
                for row in conn.execute(
                    sa.select(c).where(c.c.epoch.in_(sa.select(newest_commit).select_from(p)))
                )
            }
            written_ids = sorted({state.epoch for state in written.values()})
            barrier = dict(
                conn.execute(sa.select(e.c.id, e.c.barrier_ts).where(e.c.id.in_(written_ids))).all()
            )
        statuses = []
        for table in tables:
            latest_written = written.get(table.name)
            writer = table.writer_job
            statuses.append(
                TableStatus(
                    table=table.name,
                    kind=table.kind,
                    writer_job=writer,
                    latest_processed=processed.get(table.name),
                    latest_written=latest_written,
                    latest_validation=checked.get(table.name),
                    pipeline=table.pipeline,
                    retired=table.retired_at is not None,
                    writer_lease=None if writer is None else leases.get(writer),
                    writer_last_failure=None if writer is None else failed.get(writer),
                    pipeline_latest_epoch=pipeline_epochs.get(table.pipeline),
                    latest_written_barrier_ts=None
                    if latest_written is None
                    else barrier.get(latest_written.epoch),
                    pipeline_latest_commit=pipeline_commits.get(table.pipeline),
                )
            )
        return statuses
