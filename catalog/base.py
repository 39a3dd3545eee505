"""The catalog interface: FLIP-276's MetaService.

One abstract class, two backends behind :func:`catalog.load_catalog`: SQLite (embedded
default, a file in the warehouse or in memory) and PostgreSQL (shared by many
processes). Every method that changes state is one database transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from catalog.models import (
    CommitManifest,
    Epoch,
    JobInfo,
    JobSpec,
    Lease,
    LineageEdge,
    SealRequest,
    SourceSlice,
    TableEpoch,
    TableInfo,
    TableSpec,
    TableStatus,
    ValidationRecord,
)

SCHEMA_VERSION = 1


class Catalog(ABC):
    """Tables, jobs, lineage, epochs, source slices, epoch states, commits and leases."""

    url: str
    """The catalog URL with any password masked."""

    # -- tables and jobs -------------------------------------------------------------

    @abstractmethod
    def register_table(self, spec: TableSpec) -> TableInfo:
        """Register a table, or return it unchanged if registered with the same definition.

        A root or derived table's ``first_epoch`` is the next epoch to be issued.
        Raises TableConflictError if it exists with another location or partitioning.
        """

    @abstractmethod
    def update_table_schema(self, table: str, schema_json: str) -> None:
        """Record the Delta schema of a table once its first commit fixed it."""

    @abstractmethod
    def register_job(self, spec: JobSpec) -> JobInfo:
        """Register a job and its lineage edges atomically.

        Refuses, naming the tables and jobs involved: unknown input or output tables
        (UnknownTableError), a second writer of a table (DuplicateWriterError), and
        inputs that would close a cycle (LineageCycleError). Registering the same job
        again with another definition updates it if the new definition passes the same
        checks. A derived output's ``first_epoch`` becomes the largest ``first_epoch``
        of its inputs, so a new job catches up over its inputs' history.
        """

    @abstractmethod
    def get_table(self, name: str) -> TableInfo:
        """Raises UnknownTableError."""

    @abstractmethod
    def list_tables(self) -> list[TableInfo]: ...

    @abstractmethod
    def get_job(self, name: str) -> JobInfo:
        """Raises UnknownJobError."""

    @abstractmethod
    def list_jobs(self) -> list[JobInfo]: ...

    @abstractmethod
    def lineage(self) -> list[LineageEdge]: ...

    # -- epochs and slices -----------------------------------------------------------

    @abstractmethod
    def open_epoch(self, barrier_ts: datetime | None = None) -> Epoch:
        """Issue the next epoch: ids strictly increase, barrier timestamps never decrease.

        ``barrier_ts`` defaults to now; an earlier timestamp than the previous epoch's is
        raised to it. Safe when several processes ask at once.
        """

    @abstractmethod
    def get_epoch(self, epoch: int) -> Epoch:
        """Raises UnknownEpochError."""

    @abstractmethod
    def latest_epoch(self) -> Epoch | None: ...

    @abstractmethod
    def epochs(self, *, after: int = 0, up_to: int | None = None) -> list[Epoch]:
        """Issued epochs with after < id <= up_to, oldest first."""

    @abstractmethod
    def epoch_at_or_before(self, ts: datetime) -> Epoch | None:
        """The newest epoch whose barrier timestamp is at or before ``ts``."""

    @abstractmethod
    def record_slice(
        self, source: str, epoch: int, bounds: Mapping[str, object], *, catch_up: bool = False
    ) -> SourceSlice:
        """Record the bounds of a source's slice for an epoch, once.

        Recording the same bounds again returns the recorded slice; other bounds raise
        SliceConflictError, so that a replay always reads exactly the same input.
        """

    @abstractmethod
    def get_slice(self, source: str, epoch: int) -> SourceSlice | None: ...

    @abstractmethod
    def latest_slice(self, source: str) -> SourceSlice | None: ...

    # -- epoch states ----------------------------------------------------------------

    @abstractmethod
    def record_processed(
        self,
        table: str,
        epoch: int,
        *,
        delta_version: int,
        job: str,
        attempt: int,
        generation: int,
        rows: int | None = None,
    ) -> TableEpoch:
        """Record that rows of ``epoch`` are committed in ``table`` at ``delta_version``.

        Legal from no state, PROCESSED (another micro-batch) or ROLLED_BACK (a replay,
        with a higher attempt). Checks the job's lease generation (StaleLeaseError).
        """

    @abstractmethod
    def seal(
        self, job: str, generation: int, requests: Sequence[SealRequest]
    ) -> CommitManifest | None:
        """Seal epochs WRITTEN, atomically, for one job (its output and side outputs).

        Checks the lease generation first (StaleLeaseError: zombie fencing). WRITTEN
        epochs must increase per table (EpochStateError). Epochs first_epoch..epoch-1
        become COALESCED. If, after this, every table of the pipeline responsible for
        the epoch has it WRITTEN, the COMMIT manifest is recorded in the same transaction
        and returned.
        """

    @abstractmethod
    def mark_rolled_back(
        self, table: str, epoch: int, *, job: str, generation: int, reason: str
    ) -> TableEpoch:
        """Record that recovery undid a PROCESSED epoch (kept for audit)."""

    @abstractmethod
    def table_epoch(self, table: str, epoch: int) -> TableEpoch | None: ...

    @abstractmethod
    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]:
        """A table's epoch states with after < epoch <= up_to, oldest first."""

    @abstractmethod
    def state_history(self, table: str, *, epoch: int | None = None) -> list[TableEpoch]:
        """Every state transition of a table's epochs (ROLLED_BACK included), oldest first:
        the audit trail. ``updated_at`` of each entry is when the transition was recorded."""

    @abstractmethod
    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        """The state of one epoch in each of ``tables`` (tables without one are absent)."""

    @abstractmethod
    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        """Per table, the newest WRITTEN epoch (at or before an epoch when given).

        Must cost O(tables * log(history)): it is on every snapshot's path.
        """

    @abstractmethod
    def latest_processed(self, tables: Iterable[str]) -> dict[str, TableEpoch]:
        """Per table, the newest epoch with any state other than ROLLED_BACK."""

    @abstractmethod
    def get_commit(self, epoch: int) -> CommitManifest | None: ...

    @abstractmethod
    def latest_commit(self) -> CommitManifest | None: ...

    # -- leases ----------------------------------------------------------------------

    @abstractmethod
    def acquire_lease(self, job: str, owner: str, *, ttl_seconds: float) -> Lease:
        """Take the job's lease. Free, expired or already ours: granted.

        Taking over a lease that another owner let expire bumps the generation, which
        fences the old owner. A live lease of another owner raises LeaseHeldError.
        Re-acquiring our own live lease keeps the generation.
        """

    @abstractmethod
    def renew_lease(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Extend a lease we hold; StaleLeaseError if it was taken over."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give a lease up (no-op if it was taken over meanwhile)."""

    @abstractmethod
    def get_lease(self, job: str) -> Lease | None: ...

    # -- data quality and status -----------------------------------------------------

    @abstractmethod
    def record_validation(self, record: ValidationRecord) -> None:
        """Keep the data-quality results of a (table, epoch); a rerun replaces them."""

    @abstractmethod
    def validations(self, table: str, *, epoch: int | None = None) -> list[ValidationRecord]: ...

    @abstractmethod
    def table_status(self) -> list[TableStatus]:
        """One row per table, for `etl status`."""

    # -- lifecycle -------------------------------------------------------------------

    @abstractmethod
    def upgrade(self) -> int:
        """Migrate the schema to SCHEMA_VERSION; returns the version found before."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
