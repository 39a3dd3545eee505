"""Errors of the Spark/Delta runtime (``etl``). All derive from :class:`EtlError`.

Delta I/O, pipeline definition and running, sources and data quality each have their own
branch; :class:`InternalError` marks a bug (an invariant that does not hold).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import IntEnum

from catalog.errors import DeltaBarrierError

__all__ = [
    "without_ansi",
    "CommitConflictError",
    "ExitCode",
    "DeltaBarrierError",
    "DeltaIOError",
    "DeletionVectorFormatError",
    "FilesRemovedError",
    "DuplicateMergeKeyError",
    "EtlError",
    "ExpectationError",
    "FencedError",
    "GateDefinitionError",
    "InternalError",
    "InvalidWriteOptionError",
    "JobError",
    "JobExecutionError",
    "LeaseLostError",
    "MissingParamError",
    "OutputSchemaError",
    "PipelineBusyError",
    "PipelineDefinitionError",
    "PipelineInvalidError",
    "PipelineLoadError",
    "QualityError",
    "QuarantineMismatchError",
    "RecomputeError",
    "SchemaMismatchError",
    "SourceError",
    "StorageError",
    "SqlTablesError",
    "TransformError",
    "UnclaimedTableError",
    "UnsupportedTableFeatureError",
    "UsageError",
]


class ExitCode(IntEnum):
    """The ``etl`` command's exit codes (README, "Exit codes"). A second Ctrl-C/SIGTERM
    exits at once with the shell's 128 + signal number instead."""

    OK = 0
    JOB_FAILED = 1
    """A job failed, or an internal error (a bug)."""
    USAGE = 2
    """Usage or configuration error: nothing was done."""
    BUSY = 3
    """Another run holds the pipeline."""
    BLOCKED = 4
    """An epoch is blocked by a quality gate."""


class EtlError(DeltaBarrierError):
    """A problem in the Spark/Delta runtime."""


class InternalError(EtlError):
    """An invariant of the runtime does not hold: a bug in Delta Barrier, not in the input.

    The ``etl`` command exits 1 and asks for a report.
    """


class UsageError(EtlError):
    """Bad input from the command line: the ``etl`` command exits 2 with the message."""


class DeltaIOError(EtlError):
    """Reading or committing a Delta table failed (storage, log, or delta-rs error)."""

    def __init__(self, *, table: str, operation: str, reason: str):
        self.table = table
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation} of Delta table {table!r} failed: {reason}")


class StorageError(EtlError):
    """A warehouse location cannot be used: unreachable, or an object store that does not
    honour what Delta commits rely on (conditional writes)."""

    def __init__(self, *, location: str, reason: str):
        self.location = location
        self.reason = reason
        super().__init__(f"warehouse storage {location!r} cannot be used: {reason}")


class FilesRemovedError(DeltaIOError):
    """Files a version of a table needs are gone from storage: removed outside Delta
    Barrier's retention (another tool's VACUUM with a short retention, or by hand), so
    that version can no longer be read. ``still_readable`` says what can (a reader fills
    it in: the latest cut, the nearest intact one)."""

    def __init__(
        self,
        *,
        table: str,
        version: int,
        missing: Sequence[str],
        epoch: int | None = None,
        still_readable: str | None = None,
    ):
        self.version = version
        self.missing = tuple(missing)
        self.epoch = epoch
        self.still_readable = still_readable
        at = f"Delta version {version}" + (f" (epoch {epoch})" if epoch is not None else "")
        example = self.missing[0] if self.missing else "?"
        reason = (
            f"the files of table {table!r} at {at} are gone: {len(self.missing)} file(s) it "
            f"needs (e.g. {example}) were removed outside Delta Barrier's retention, e.g. by "
            "another tool's VACUUM with a short retention (Delta Barrier's own maintenance "
            "never removes a file a kept cut needs); that cut cannot be read any more"
            + (f". Still readable: {still_readable}" if still_readable else "")
        )
        self.table = table
        self.operation = "read"
        self.reason = reason
        EtlError.__init__(self, reason)


class DeletionVectorFormatError(EtlError):
    """Bytes or a descriptor that are not a deletion vector of the Delta protocol
    ("Deletion Vector Format"); ``table`` is the table root when known."""

    def __init__(self, reason: str, *, table: str | None = None):
        self.reason = reason
        self.table = table
        where = f" of Delta table {table!r}" if table else ""
        super().__init__(f"invalid deletion vector{where}: {reason}")


class UnsupportedTableFeatureError(EtlError):
    """The table uses Delta features this runtime cannot read correctly; it refuses to guess."""

    def __init__(self, table: str, features: Sequence[str]):
        self.table = table
        self.features = tuple(features)
        super().__init__(
            f"Delta table {table!r} uses features this runtime does not support: "
            f"{', '.join(self.features)}. Read it with an engine that supports them, or "
            "rewrite it without them (e.g. disable deletion vectors and purge, or drop "
            "column mapping)"
        )


class SchemaMismatchError(EtlError):
    """Rows to commit differ from the table's schema in a way Delta cannot evolve in place
    (nullability is ignored; new nullable columns are added, not refused)."""

    def __init__(self, table: str, expected: Mapping[str, str], got: Mapping[str, str]):
        self.table = table
        self.expected = dict(expected)
        self.got = dict(got)
        missing = [c for c in self.expected if c not in self.got]
        changed = [
            f"{c}: {self.expected[c]} -> {self.got[c]}"
            for c in self.expected
            if c in self.got and self.expected[c] != self.got[c]
        ]
        details = "; ".join(
            part
            for part in (
                f"missing columns {missing} (dropped or renamed)" if missing else "",
                f"changed types {changed}" if changed else "",
            )
            if part
        )
        super().__init__(
            f"schema change for Delta table {table!r} that Delta cannot make in place: "
            f"{details}. The table has {self.expected}, the rows have {self.got}. New "
            "nullable columns are added in place; for any other change make the job produce "
            "the table's columns and types again, or recompute the table and everything "
            f"derived from it with the new transform: etl recompute {table.rstrip('/').rsplit('/', 1)[-1]} "
            "--downstream "
            "--pipeline FILE"
        )


class RecomputeError(EtlError):
    """A recompute (``etl recompute``) that cannot be done as asked: nothing was switched."""

    def __init__(self, message: str, *, tables: Sequence[str] = ()):
        self.tables = tuple(tables)
        super().__init__(message)


class InvalidWriteOptionError(EtlError):
    """A write was asked for with options that cannot work for this table."""

    def __init__(self, *, table: str, option: str, reason: str):
        self.table = table
        self.option = option
        self.reason = reason
        super().__init__(f"cannot write Delta table {table!r}: {option}: {reason}")


class CommitConflictError(EtlError):
    """The table changed under a commit in a way that would lose or duplicate data."""

    def __init__(self, *, table: str, reason: str):
        self.table = table
        self.reason = reason
        super().__init__(
            f"refusing to commit to Delta table {table!r}: {reason}. Another writer changed "
            "the table; re-plan the write from its current version"
        )


class UnclaimedTableError(CommitConflictError):
    """A job's table does not record the committing runner's claim: it was created, or last
    claimed, by another runner of the job (an older generation, or none).

    A runner commits only to tables it created or claimed; one it did not plan for may
    hold commits nobody recovered (a superseded runner that created it late). The batch
    stops, and recovery claims the table and seals or rolls back what it holds.
    """

    def __init__(self, *, table: str, job: str, generation: int, recorded: int | None):
        self.job = job
        self.generation = generation
        self.recorded = recorded
        claimed = "no runner's claim" if recorded is None else f"generation {recorded}'s claim"
        EtlError.__init__(
            self,
            f"refusing to commit to Delta table {table!r} for job {job!r} at generation "
            f"{generation}: the table holds {claimed}, not this runner's (it was created or "
            "claimed by another runner of the job); recovery must claim it and seal or roll "
            "back what it holds first",
        )
        self.table = table
        self.reason = "not claimed by this runner"


class LeaseLostError(EtlError):
    """This runner's lease of a job was taken over: it may no longer change the job's tables.

    Another runner took the job over (this one paused or stalled past its lease). Nothing
    of the batch in hand is sealed; the new owner recovers and replays it.
    """

    def __init__(self, *, job: str, generation: int, detail: str = ""):
        self.job = job
        self.generation = generation
        super().__init__(
            f"job {job!r}: this runner's lease (generation {generation}) was taken over by "
            f"another runner{': ' + detail if detail else ''}; it stops without changing "
            "anything, and the new owner recovers the job"
        )


class FencedError(LeaseLostError):
    """A Delta table refuses a commit or RESTORE of a superseded lease generation."""

    def __init__(self, *, table: str, job: str, generation: int, fenced_at: int):
        self.table = table
        self.fenced_at = fenced_at
        super().__init__(
            job=job,
            generation=generation,
            detail=f"Delta table {table!r} is fenced at generation {fenced_at}",
        )


class DuplicateMergeKeyError(EtlError):
    """A keyed merge got more than one update row for the same key."""

    def __init__(self, *, table: str, keys: Sequence[str], example: Mapping[str, object]):
        self.table = table
        self.keys = tuple(keys)
        self.example = dict(example)
        super().__init__(
            f"merge into Delta table {table!r} on keys {list(self.keys)}: the updates hold "
            f"several rows for the key {self.example}; deduplicate them so each key has one row"
        )


# -- pipeline definition and running -------------------------------------------------


class PipelineDefinitionError(EtlError):
    """A pipeline file declares something that cannot run."""


class MissingParamError(PipelineDefinitionError):
    """A pipeline file asks for a parameter that was not given and has no default."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"pipeline parameter {key!r} is required: pass --param {key}=VALUE")


class PipelineInvalidError(PipelineDefinitionError):
    """Validation found problems in a pipeline file: all of them, each naming the job,
    table, source or parameter and what to do. Nothing was written."""

    def __init__(self, *, path: str, problems: Sequence[str]):
        self.path = path
        self.problems = tuple(problems)
        count = len(self.problems)
        super().__init__(
            f"pipeline file {path!r} has {count} problem{'s' if count != 1 else ''} "
            "(nothing was run or written):\n  - " + "\n  - ".join(self.problems)
        )


class PipelineLoadError(EtlError):
    """A pipeline file cannot be loaded."""

    def __init__(self, *, path: str, problem: str):
        self.path = path
        super().__init__(f"cannot load pipeline file {path!r}: {problem}")


class PipelineBusyError(EtlError):
    """Another runner holds the pipeline's job leases.

    The message says who holds it, since when, until when, whether that process is alive
    (``owner_state``: alive, dead or unknown for another host) and how to wait.
    """

    def __init__(
        self,
        *,
        pipeline: str,
        job: str,
        owner: str,
        acquired_at: object = None,
        expires_at: object = None,
        owner_state: str | None = None,
    ):
        self.pipeline = pipeline
        self.job = job
        self.owner = owner
        self.acquired_at = acquired_at
        self.expires_at = expires_at
        self.owner_state = owner_state
        held = f"it holds the lease of job {job!r}"
        if acquired_at is not None:
            held += f" since {_when(acquired_at)}"
        if expires_at is not None:
            held += f", until {_when(expires_at)} unless renewed"
        process = {
            "alive": "; its process is alive on this host",
            "dead": "; its process is gone, so its lease is taken over at once",
            "unknown": "; it runs on another host (its lease lapses if it died)",
        }.get(owner_state or "", "")
        super().__init__(
            f"pipeline {pipeline!r} is being run by {owner} ({held}{process}); nothing was "
            "written. Wait for that run with --wait SECONDS, or let it finish"
        )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def without_ansi(text: str) -> str:
    """A library's message without its terminal colour codes (sqlglot and DuckDB colour
    theirs): the text of an error of ours."""
    return _ANSI.sub("", text)


def _when(value: object) -> str:
    from datetime import datetime

    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(value)


class JobError(EtlError):
    """A job failed at an epoch."""

    def __init__(self, message: str, *, job: str, epoch: int):
        self.job = job
        self.epoch = epoch
        super().__init__(message)


def _cause_summary(cause: BaseException) -> str:
    """One line for an operator: a Python worker's traceback is cut to its last line."""
    text = str(cause).split("JVM stacktrace:")[0]
    if "Traceback (most recent call last)" in text:
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[-1].strip() if lines else text
    return f"{type(cause).__name__}: {text.strip()}"


class TransformError(JobError):
    """The user's transform raised while the job built its result."""

    def __init__(self, *, job: str, epoch: int, cause: BaseException):
        self.cause = cause
        super().__init__(
            f"job {job!r} failed in its transform at epoch {epoch}: {_cause_summary(cause)}",
            job=job,
            epoch=epoch,
        )


class JobExecutionError(JobError):
    """The job's Spark work failed, e.g. a Python UDF raised while its rows were written.

    ``cause`` keeps the full error (with the worker's traceback); the message has its last line.
    """

    def __init__(self, *, job: str, epoch: int, cause: BaseException):
        self.cause = cause
        super().__init__(
            f"job {job!r} failed at epoch {epoch}: {_cause_summary(cause)}", job=job, epoch=epoch
        )


class OutputSchemaError(JobError):
    """The transform's output does not have the columns the job needs."""

    def __init__(self, *, job: str, epoch: int, problem: str):
        self.problem = problem
        super().__init__(f"job {job!r} epoch {epoch}: {problem}", job=job, epoch=epoch)


class SourceError(EtlError):
    """A source is misconfigured or cannot deliver a slice."""

    def __init__(self, *, source: str, problem: str):
        self.source = source
        super().__init__(f"source {source!r}: {problem}")


class SqlTablesError(EtlError):
    """A consistent read cannot tell which tables to read."""

    def __init__(self, *, sql: str, problem: str):
        self.sql = sql
        super().__init__(f"{problem} (in: {sql[:200]!r})")


# -- data quality ----------------------------------------------------------------------


class QualityError(EtlError):
    """A data-quality gate cannot be defined or run."""

    def __init__(self, table: str, message: str):
        self.table = table
        super().__init__(f"quality gate of table {table!r}: {message}")


class GateDefinitionError(QualityError):
    """The gate's policy or expectations are not usable; raised when the gate is built."""

    def __init__(self, table: str, reason: str, *, expectation: str | None = None):
        self.reason = reason
        self.expectation = expectation
        where = f"expectation {expectation}: " if expectation else ""
        super().__init__(table, where + reason)


class ExpectationError(QualityError):
    """GX raised while evaluating an expectation (e.g. its column does not exist).

    The epoch is neither passed nor failed: the gate itself is wrong for these rows.
    """

    def __init__(self, table: str, expectation: str, reason: str, *, epoch: int | None = None):
        self.expectation = expectation
        self.reason = reason
        self.epoch = epoch
        at = f" at epoch {epoch}" if epoch is not None else ""
        super().__init__(
            table,
            f"expectation {expectation} could not be evaluated{at}: {reason}. "
            "Fix the expectation or the table's schema; the epoch stays unsealed",
        )


class QuarantineMismatchError(QualityError):
    """A quarantine predicate disagrees with GX's unexpected count: the split would be wrong."""

    def __init__(
        self,
        table: str,
        expectation: str,
        *,
        epoch: int,
        gx_unexpected: int | None,
        predicate_rows: int,
    ):
        self.expectation = expectation
        self.epoch = epoch
        self.gx_unexpected = gx_unexpected
        self.predicate_rows = predicate_rows
        super().__init__(
            table,
            f"epoch {epoch}: the quarantine predicate of expectation {expectation} selects "
            f"{predicate_rows} rows but Great Expectations counted {gx_unexpected} unexpected; "
            "refusing to split the epoch. The installed GX version evaluates this expectation "
            "differently from etl.quality's translation: use policy 'block' for this table",
        )
