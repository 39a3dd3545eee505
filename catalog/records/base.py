"""Validations, job failures, resolutions of blocked epochs, and the status report."""

from __future__ import annotations

from abc import ABC, abstractmethod

from catalog.models import (
    JobFailureRecord,
    Resolution,
    ResolutionAction,
    TableStatus,
    ValidationRecord,
)


class RecordStore(ABC):
    """Validations, job failures, resolutions of blocked epochs, and the status report."""

    @abstractmethod
    def record_validation(self, record: ValidationRecord, *, job: str, generation: int) -> None:
        """Keep the data-quality results of a (table, epoch); a rerun replaces them.

        Checks the lease generation (StaleLeaseError) and that ``job`` writes the table
        (WriterMismatchError).
        """

    @abstractmethod
    def validations(self, table: str, *, epoch: int | None = None) -> list[ValidationRecord]: ...

    @abstractmethod
    def table_status(self) -> list[TableStatus]:
        """One row per table (retired ones flagged), for `etl status`: its pipeline, the
        latest states, validation, writer's lease and last failure, its pipeline's latest
        epoch and commit. A fixed number of queries whatever the history."""

    # -- failures and resolutions ----------------------------------------------------

    @abstractmethod
    def record_failure(self, failure: JobFailureRecord) -> JobFailureRecord:
        """Keep a failed batch of a job on record; returns it with id, pipeline (the
        job's) and failed_at set. The message becomes one line of at most
        FAILURE_MESSAGE_MAX_CHARS characters. Raises UnknownJobError, UnknownEpochError."""

    @abstractmethod
    def failures(
        self, *, job: str | None = None, epoch: int | None = None, limit: int | None = None
    ) -> list[JobFailureRecord]:
        """Recorded failures, newest first."""

    @abstractmethod
    def record_resolution(
        self,
        table: str,
        epoch: int,
        *,
        action: ResolutionAction | str,
        actor: str,
        reason: str,
    ) -> Resolution:
        """Keep an operator's resolution of a blocked epoch (ACCEPT, QUARANTINE, SKIP).

        Only the record: the runtime carries the action out. Raises UnknownTableError,
        UnknownEpochError, ForeignEpochError.
        """

    @abstractmethod
    def resolutions(self, table: str, *, epoch: int | None = None) -> list[Resolution]:
        """A table's recorded resolutions, oldest first."""
