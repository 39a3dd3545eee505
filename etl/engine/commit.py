"""Where an epoch is committed: write a micro-batch's files, commit them to Delta, record
PROCESSED in the catalog.

Every commit of a batch carries commit metadata (epoch, first epoch, job, attempt,
micro-batch, final) that recovery reads back from the Delta log, and a Delta app
transaction ``(app_id(job/table), txn_version(epoch, attempt, batch))`` that makes the
commit idempotent. What a batch has committed so far travels as a frozen
:class:`BatchWrite` value: each step returns a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from consistency import (
    META_ATTEMPT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    EpochBatch,
)
from etl.delta import DataFile, commit_files, merge_files, table_version, write_files
from etl.errors import InternalError, OutputSchemaError, SchemaMismatchError
from etl.faults import maybe_crash

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from catalog import Catalog, Lease, WriteMode
    from etl.pipeline import Job

# A Delta app transaction version must grow with every commit of the job, also across a
# RESTORE (which does not reset it): epoch, then attempt, then micro-batch.
_ATTEMPT_BITS = 12
_BATCH_BITS = 12

AUDIT_PART = (1 << _BATCH_BITS) - 1
"""Micro-batch index of the commit that takes quarantined rows out of the output: above
every real micro-batch, so its app transaction version is the epoch's highest."""


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
class BatchWrite:
    """Per table, the Delta version and the rows a batch has committed so far.

    A value: :meth:`committed` and :meth:`counted` return a new one.
    """

    versions: Mapping[str, int] = field(default_factory=dict)
    rows: Mapping[str, int] = field(default_factory=dict)

    def rows_of(self, table: str) -> int:
        return self.rows.get(table, 0)

    def committed(self, table: str, *, version: int, rows: int) -> BatchWrite:
        """This batch plus a commit of ``rows`` more rows of ``table`` at ``version``."""
        return BatchWrite(
            versions={**self.versions, table: version},
            rows={**self.rows, table: rows},
        )

    def counted(self, table: str) -> BatchWrite:
        """This batch, with ``table`` counted as written even though nothing was committed."""
        return BatchWrite(versions=self.versions, rows={**self.rows, table: self.rows_of(table)})


@dataclass(frozen=True)
class EpochWriter:
    """Writes and commits the tables of one attempt at one batch of one job."""

    catalog: Catalog
    spark: SparkSession
    job: Job
    batch: EpochBatch
    attempt: int
    lease: Lease

    @property
    def metadata(self) -> dict[str, str | int | bool]:
        return commit_metadata(self.job, self.batch, self.attempt)

    def write(
        self,
        written: BatchWrite,
        *,
        table: str,
        frame: DataFrame,
        part: int,
        final: bool,
        mode: WriteMode,
    ) -> BatchWrite:
        """Write and commit micro-batch ``part`` of ``table``; ``written`` plus what it committed."""
        job, batch = self.job, self.batch
        info = self.catalog.get_table(table)
        location = info.location
        current = table_version(location)
        prefix = f"{batch.last}-{self.attempt}-{part}"
        removes: Sequence[str] = ()
        if mode == "merge" and current is not None:
            merged = merge_files(
                self.spark,
                location,
                version=written.versions.get(table, current),
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
            return written.counted(table)
        maybe_crash("before_commit", job=job.name, epoch=batch.last)
        version = self.commit(
            table=table,
            frame=frame,
            files=files,
            removes=removes,
            part=part,
            final=final,
            mode=mode,
        )
        maybe_crash("after_commit", job=job.name, epoch=batch.last)
        written = self.record(
            written, table=table, version=version, rows=written.rows_of(table) + rows
        )
        if info.schema_json is None:
            from deltalake import DeltaTable

            self.catalog.update_table_schema(table, DeltaTable(location).schema().to_json())
        return written

    def commit(
        self,
        *,
        table: str,
        frame: DataFrame,
        files: Sequence[DataFile],
        removes: Sequence[str],
        part: int,
        final: bool,
        mode: WriteMode,
    ) -> int:
        """Commit written files of micro-batch ``part`` to ``table``; returns the version."""
        from pyspark.sql.pandas.types import to_arrow_schema

        job = self.job
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
                txn_version=txn_version(self.batch.last, self.attempt, part),
                metadata={**self.metadata, META_BATCH: part, META_FINAL: final},
            )
        except SchemaMismatchError as exc:
            raise OutputSchemaError(job=job.name, epoch=self.batch.last, problem=str(exc)) from exc

    def record(self, written: BatchWrite, *, table: str, version: int, rows: int) -> BatchWrite:
        """Record ``table`` PROCESSED at ``version`` with ``rows`` rows of the batch in all."""
        self.catalog.record_processed(
            table,
            self.batch.last,
            delta_version=version,
            job=self.job.name,
            attempt=self.attempt,
            generation=self.lease.generation,
            rows=rows,
        )
        return written.committed(table, version=version, rows=rows)


def current_version(catalog: Catalog, table: str) -> int:
    """The table's latest Delta version; it must have one (it is about to be sealed)."""
    version = table_version(catalog.get_table(table).location)
    if version is None:
        raise InternalError(f"table {table!r} has no Delta version to seal at")
    return version


__all__ = [
    "AUDIT_PART",
    "BatchWrite",
    "EpochWriter",
    "app_id",
    "commit_metadata",
    "current_version",
    "txn_version",
]
