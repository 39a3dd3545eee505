"""Where an epoch is committed: write a micro-batch's files, commit them to Delta, record
PROCESSED in the catalog.

Every commit of a batch carries commit metadata (epoch, first epoch, job, attempt,
micro-batch, final) that recovery reads back from the Delta log, and the job's fence
(:class:`etl.delta.Fence`: its lease generation), so that a runner whose lease was taken
over cannot commit any more. What a batch has committed so far travels as a frozen
:class:`BatchWrite` value: each step returns a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from catalog import EpochState
from consistency import (
    META_ATTEMPT,
    META_AUDIT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    EpochBatch,
)
from etl.delta import (
    EPOCH_COLUMN,
    CommitRequest,
    DataFile,
    DeletedRows,
    Fence,
    commit_files,
    log_commits,
    merge_files,
    open_table,
    require_unique_keys,
    table_exists,
    table_version,
    write_files,
)
from etl.engine.timing import StageClock
from etl.errors import InternalError, OutputSchemaError, SchemaMismatchError
from etl.faults import maybe_crash

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from catalog import (
        BatchStart,
        Catalog,
        CommitManifest,
        Lease,
        SealRequest,
        ValidationRecord,
        WriteMode,
    )
    from etl.pipeline import Job

LeaseCheck = Callable[[], None]
"""Raises LeaseLostError when the runner no longer holds the job's lease."""


def commit_metadata(job: Job, batch: EpochBatch, attempt: int) -> dict[str, str | int | bool]:
    """What every commit of a batch records in the Delta log for recovery to read back."""
    return {
        META_EPOCH: batch.last,
        META_FIRST_EPOCH: batch.first,
        META_ATTEMPT: attempt,
    }


def next_attempt(start: BatchStart, tables: Mapping[str, str], batch: EpochBatch) -> int:
    """The attempt number of a new run of ``batch``: above every attempt that ever touched
    its epochs in ``tables`` (name -> location), as the catalog's audit trail (``start``,
    read of the catalog for ``tables`` at ``batch.last``) and the Delta logs show them.

    A RESTORE undoes an attempt's rows but not its commits: the log is the witness of an
    attempt that died before the catalog heard of it, and recovery tells attempts apart
    by their number.
    """
    seen = start.max_attempt
    for table, location in tables.items():
        sealed = start.latest_written.get(table)
        for commit in log_commits(location, after_version=sealed.delta_version if sealed else None):
            first = commit.first_epoch if commit.first_epoch is not None else commit.epoch
            if commit.epoch is None or first is None:
                continue
            if first <= batch.last and commit.epoch >= batch.first:
                seen = max(seen, commit.attempt or 1)
    return seen + 1


def frame_schema(frame: DataFrame) -> pa.Schema:
    """The Arrow schema a write of ``frame`` commits (timestamps in UTC)."""
    return columns_schema(frame.schema)


def columns_schema(columns: StructType) -> pa.Schema:
    """The Arrow schema a write of rows of ``columns`` commits (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(columns, timezone="UTC")


def with_epoch_column(columns: StructType) -> StructType:
    """``columns`` as ``withColumn(EPOCH_COLUMN, lit(epoch).cast("long"))`` leaves them: an
    ``_epoch`` column already there is replaced in place, else one is added last."""
    from pyspark.sql.types import LongType, StructField, StructType

    epoch = StructField(EPOCH_COLUMN, LongType(), nullable=False)
    names = [f.name for f in columns.fields]
    if EPOCH_COLUMN in names:
        return StructType([epoch if f.name == EPOCH_COLUMN else f for f in columns.fields])
    return StructType([*columns.fields, epoch])


@dataclass(frozen=True)
class PreparedWrite:
    """Files written into a table for one commit, not committed yet."""

    schema: pa.Schema
    files: tuple[DataFile, ...]
    removes: tuple[str, ...] = ()
    """Relative paths of the files the commit replaces (a merge's copy-on-write)."""
    deletes: tuple[DeletedRows, ...] = ()
    """Files whose rows of updated keys deletion vectors delete (a merge-on-read merge)."""
    rows: int = 0
    """Rows the commit adds for the batch (a merge: the rows upserted)."""


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


def _no_check() -> None:
    return None


class RecordedSchemas:
    """The columns of each table's schema as the catalog records them, as this process
    last read or recorded them, and the Delta version the table had then (a table's
    location -> (version, column names)).

    A commit records the table's schema when it adds columns the catalog's lacks: known
    here from the commit before, that is no catalog read per commit (about 5% of the
    driver's Python in a 100-table pipeline). Known only while the table moves on by this
    process's commits: a version in between (another writer's commit, a recompute's switch)
    sends the check back to the catalog."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, frozenset[str]]] = {}

    def after(self, location: str, version: int) -> frozenset[str] | None:
        """The recorded columns of the table at ``location`` if they are known at the
        version just before ``version``."""
        known = self._known.get(location)
        return known[1] if known is not None and known[0] == version - 1 else None

    def remember(self, location: str, version: int, columns: frozenset[str]) -> None:
        self._known[location] = (version, columns)


@dataclass(frozen=True)
class EpochWriter:
    """Writes and commits the tables of one attempt at one batch of one job."""

    catalog: Catalog
    spark: SparkSession
    job: Job
    batch: EpochBatch
    attempt: int
    lease: Lease
    check_lease: LeaseCheck = field(default=_no_check, compare=False)
    resumed: bool = False
    """Recovery finishes a batch an earlier run committed: a step it repeats may already be
    in the log (found by epoch, attempt and micro-batch) and is not committed twice."""
    locations: Mapping[str, str] = field(default_factory=dict)
    """Where the job's tables live, looked up once for the batch (others: in the catalog)."""
    clock: StageClock = field(default_factory=StageClock, compare=False)
    """Times the batch's ``write`` and ``commit`` stages."""
    schemas: RecordedSchemas = field(default_factory=RecordedSchemas, compare=False)
    """What the catalog records of the tables' schemas, kept from batch to batch."""
    sealed_after_commit: bool = False
    """The batch is sealed right after its final commits (no quality gate between): they
    are not recorded PROCESSED first, the seal records them (one catalog transaction less
    per table and batch). A crash between such a commit and its seal leaves the same state
    as a crash before PROCESSED was recorded: recovery reads the commit from the log."""

    def location(self, table: str) -> str:
        known = self.locations.get(table)
        return known if known is not None else self.catalog.get_table(table).location

    @property
    def fence(self) -> Fence:
        return Fence(self.job.name, self.lease.generation)

    @property
    def metadata(self) -> dict[str, str | int | bool]:
        return commit_metadata(self.job, self.batch, self.attempt)

    def partition_by(self, table: str) -> tuple[str, ...]:
        """The columns ``table``'s files are partitioned by: the job's, for its output only
        (a side output, such as the rejects, is not partitioned)."""
        return tuple(self.job.partition_by) if table == self.job.output else ()

    def file_prefix(self, part: int | str) -> str:
        """How the files of a commit of micro-batch ``part`` (or ``"audit"``) are named."""
        return f"{self.batch.last}-{self.attempt}-{part}"

    def write(
        self,
        written: BatchWrite,
        *,
        table: str,
        frame: DataFrame,
        part: int,
        final: bool,
        mode: WriteMode,
        base: int | None = None,
        audit: bool = False,
        planned: bool = False,
    ) -> BatchWrite:
        """Write and commit micro-batch ``part`` of ``table``; ``written`` plus what it committed.

        ``base``: the version a merge upserts into (default: the batch's previous commit of
        the table, else its latest version). An ``overwrite`` replaces the table's rows with
        the batch's: its first micro-batch overwrites, the later ones append. ``planned``:
        ``frame``'s rows are likely computed while Spark plans it (see
        :func:`etl.delta.write_files`).
        """
        self.check_lease()
        location = self.location(table)
        if self.resumed:
            done = self._committed_before(table, location, part=part, audit=audit)
            if done is not None:
                return self._known(written, table=table, version=done)
        if base is None:
            base = written.versions.get(table)
        if base is None and mode == "merge":
            base = table_version(location)  # None: no table yet, the merge creates it
        with self.clock.stage("write"):
            prepared = self.prepare(
                table=table,
                frame=frame,
                mode=mode,
                base=base,
                name=self.file_prefix("audit" if audit else part),
                planned=planned,
            )
        return self._commit_new(
            written,
            table=table,
            prepared=prepared,
            part=part,
            final=final,
            overwrite=mode == "overwrite" and table not in written.versions,
            base=base,
            audit=audit,
        )

    def append_prepared(
        self, written: BatchWrite, *, table: str, prepared: PreparedWrite, part: int, final: bool
    ) -> BatchWrite:
        """Commit micro-batch ``part`` of ``table`` from files written elsewhere (a source's
        direct write, :attr:`etl.sources.base.DirectSlice.write`), as :meth:`write` commits
        an ``append``; not for a resumed batch (:meth:`write` finds its earlier commits)."""
        if self.resumed:
            raise InternalError(f"table {table!r}: a resumed batch commits through write()")
        self.check_lease()
        return self._commit_new(
            written,
            table=table,
            prepared=prepared,
            part=part,
            final=final,
            overwrite=False,
            base=written.versions.get(table),
            audit=False,
        )

    def _commit_new(
        self,
        written: BatchWrite,
        *,
        table: str,
        prepared: PreparedWrite,
        part: int,
        final: bool,
        overwrite: bool,
        base: int | None,
        audit: bool,
    ) -> BatchWrite:
        nothing = not (prepared.files or prepared.removes or prepared.deletes or overwrite)
        # Even a batch without rows commits to create a table that does not exist yet (asked
        # only then: a look at the store).
        if nothing and (base is not None or table_exists(self.location(table))):
            return written.counted(table)
        with self.clock.stage("commit"):
            return self.commit_prepared(
                written,
                table=table,
                prepared=prepared,
                part=part,
                final=final,
                overwrite=overwrite,
                audit=audit,
            )

    def prepare(
        self,
        *,
        table: str,
        frame: DataFrame,
        mode: WriteMode,
        base: int | None,
        name: str,
        planned: bool = False,
    ) -> PreparedWrite:
        """Write the files of ``frame`` into ``table`` (nothing is committed yet).

        A merge upserts into the table at version ``base`` (copy-on-write: the files holding
        an updated key are rewritten and listed to be removed); without a ``base`` it creates
        the table, with the same check that no key appears twice.
        """
        location = self.location(table)
        schema = frame_schema(frame)
        if mode == "merge" and base is not None:
            merged = merge_files(
                self.spark,
                location,
                version=base,
                updates=frame,
                keys=self.job.keys,
                partition_by=self.partition_by(table),
                file_prefix=name,
                strategy=self.job.merge_strategy,
            )
            return PreparedWrite(
                schema=schema,
                files=tuple(merged.adds),
                removes=tuple(merged.removes),
                deletes=tuple(merged.deletes),
                rows=merged.upserted,
            )
        if mode == "merge":
            require_unique_keys(frame, location, list(self.job.keys))
        files = write_files(
            frame,
            location,
            partition_by=self.partition_by(table),
            file_prefix=name,
            planned=planned,
        )
        return PreparedWrite(schema=schema, files=tuple(files), rows=sum(f.rows for f in files))

    def commit_prepared(
        self,
        written: BatchWrite,
        *,
        table: str,
        prepared: PreparedWrite,
        part: int,
        final: bool,
        overwrite: bool,
        audit: bool = False,
        replace_schema: bool = False,
    ) -> BatchWrite:
        """Commit prepared files to ``table`` and record it PROCESSED, unless the batch is
        :attr:`sealed_after_commit` and this is its final commit (``replace_schema``: see
        :func:`etl.delta.commit_files`)."""
        self.check_lease()
        job, batch = self.job, self.batch
        maybe_crash("before_commit", job=job.name, epoch=batch.last)
        version = self.commit(
            table=table,
            schema=prepared.schema,
            files=prepared.files,
            removes=prepared.removes,
            deletes=prepared.deletes,
            part=part,
            final=final,
            overwrite=overwrite,
            audit=audit,
            replace_schema=replace_schema,
        )
        maybe_crash("after_commit", job=job.name, epoch=batch.last)
        rows = written.rows_of(table) + prepared.rows
        if final and not audit and self.sealed_after_commit:
            written = written.committed(table, version=version, rows=rows)
        else:
            written = self.record(written, table=table, version=version, rows=rows)
            maybe_crash("after_processed", job=job.name, epoch=batch.last)
        location = self.location(table)
        recorded = self.schemas.after(location, version)
        if recorded is None:
            recorded = _columns(self.catalog.get_table(table).schema_json)
        if recorded is None or not recorded.issuperset(prepared.schema.names):
            recorded = self.record_schema(table)
        if recorded is not None:
            self.schemas.remember(location, version, recorded)
        return written

    def record_schema(self, table: str) -> frozenset[str] | None:
        """Record ``table``'s schema in the catalog after a commit evolved (or created) it;
        returns its columns as recorded (None: nothing recorded)."""
        schema_json = open_table(self.location(table)).schema().to_json()
        self.catalog.update_table_schema(table, schema_json)
        return _columns(schema_json)

    def commit(
        self,
        *,
        table: str,
        schema: pa.Schema,
        files: Sequence[DataFile],
        removes: Sequence[str],
        part: int,
        final: bool,
        overwrite: bool,
        audit: bool = False,
        deletes: Sequence[DeletedRows] = (),
        replace_schema: bool = False,
    ) -> int:
        """Commit written files of micro-batch ``part`` to ``table``; returns the version.
        ``replace_schema``: see :class:`etl.delta.CommitRequest`."""
        job = self.job
        location = self.location(table)
        metadata: dict[str, str | int | bool] = {
            **self.metadata,
            META_BATCH: part,
            META_FINAL: final,
        }
        if audit:
            metadata[META_AUDIT] = True
        try:
            return commit_files(
                location,
                CommitRequest(
                    files,
                    schema=schema,
                    mode="overwrite" if overwrite else "append",
                    partition_by=self.partition_by(table),
                    removes=removes,
                    deletes=deletes,
                    fence=self.fence,
                    metadata=metadata,
                    # A merge job's new table is created ready for merge-on-read.
                    deletion_vectors=table == job.output
                    and job.mode == "merge"
                    and job.merge_strategy == "deletion-vectors",
                    replace_schema=replace_schema,
                ),
            )
        except SchemaMismatchError as exc:
            raise OutputSchemaError(job=job.name, epoch=self.batch.last, problem=str(exc)) from exc

    def record(self, written: BatchWrite, *, table: str, version: int, rows: int) -> BatchWrite:
        """Record ``table`` PROCESSED at ``version`` with ``rows`` rows of the batch in all."""
        self.check_lease()
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

    def version_before(self, table: str) -> int | None:
        """The version ``table`` held before this batch (None: empty), which a quality gate's
        quarantine rolls the table back to: its latest sealed version."""
        sealed = self.catalog.latest_written([table]).get(table)
        return sealed.delta_version if sealed is not None else None

    def record_validation(self, record: ValidationRecord) -> None:
        """Record the quality gate's verdict on the batch."""
        self.check_lease()
        self.catalog.record_validation(record, job=self.job.name, generation=self.lease.generation)

    def seal(self, requests: Sequence[SealRequest]) -> CommitManifest | None:
        """Seal the batch's tables (WRITTEN) in one catalog transaction; the manifest when
        the pipeline's epoch reached COMMIT with it."""
        self.check_lease()
        maybe_crash("before_seal", job=self.job.name, epoch=self.batch.last)
        commit = self.catalog.seal(self.job.name, self.lease.generation, requests)
        maybe_crash("after_seal", job=self.job.name, epoch=self.batch.last)
        return commit

    def audited_version(self, table: str) -> int | None:
        """The version of this attempt's quality-gate rewrite of ``table``, if it committed."""
        return self._committed_before(table, self.location(table), part=0, audit=True)

    def _committed_before(self, table: str, location: str, *, part: int, audit: bool) -> int | None:
        sealed = self.catalog.latest_written([table]).get(table)
        for commit in reversed(
            log_commits(location, after_version=sealed.delta_version if sealed else None)
        ):
            if (
                commit.job == self.job.name
                and commit.epoch == self.batch.last
                and commit.attempt == self.attempt
                and (commit.audit if audit else commit.part == part and not commit.audit)
            ):
                return commit.version
        return None

    def _known(self, written: BatchWrite, *, table: str, version: int) -> BatchWrite:
        """``written`` plus a commit an earlier run made at ``version``, recorded PROCESSED
        if that run died before recording it."""
        state = self.catalog.table_epoch(table, self.batch.last)
        if (
            state is not None
            and state.state is EpochState.PROCESSED
            and state.attempt == self.attempt
            and state.delta_version is not None
            and state.delta_version >= version
        ):
            return written.committed(table, version=version, rows=state.rows or 0)
        return self.record(written, table=table, version=version, rows=written.rows_of(table))


def _columns(schema_json: str | None) -> frozenset[str] | None:
    """The column names of a recorded table schema (None: none recorded)."""
    import json

    if schema_json is None:
        return None
    return frozenset(f["name"] for f in json.loads(schema_json).get("fields", []))


def current_version(location: str, table: str) -> int:
    """The latest Delta version of ``table`` (at ``location``); it must have one (it is
    about to be sealed)."""
    version = table_version(location)
    if version is None:
        raise InternalError(f"table {table!r} has no Delta version to seal at")
    return version


__all__ = [
    "BatchWrite",
    "EpochWriter",
    "LeaseCheck",
    "PreparedWrite",
    "RecordedSchemas",
    "columns_schema",
    "commit_metadata",
    "current_version",
    "frame_schema",
    "next_attempt",
    "with_epoch_column",
]
