"""Epoch states of each table, seals and COMMIT manifests."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from catalog.models import (
    BatchStart,
    CommitManifest,
    JobProgress,
    ProgressRequest,
    SealRequest,
)
from consistency.records import TableEpoch


class StateStore(ABC):
    """Epoch states of each table, seals and COMMIT manifests."""

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
        become COALESCED: only the epochs of the table's pipeline in that range. If,
        after this, every active (non-retired) table of the epoch's pipeline responsible
        for the epoch has it WRITTEN, the COMMIT manifest is recorded in the same
        transaction and returned. Every transition is checked by
        :func:`consistency.states.check_transition`.
        """

    @abstractmethod
    def mark_rolled_back(
        self, table: str, epoch: int, *, job: str, generation: int, reason: str
    ) -> TableEpoch:
        """Record that recovery undid a PROCESSED epoch (kept for audit).

        Resolving a blocked epoch by SKIP is: Delta RESTORE, this, then a replay with a
        higher attempt that records the epoch PROCESSED and seals it empty (WRITTEN).
        """

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
        the audit trail. ``updated_at`` of each entry is when the transition was recorded.

        Operators' resolutions of blocked epochs are kept beside it: see
        :meth:`resolutions` (merge the two by time for a full account)."""

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
    def max_attempt(self, tables: Iterable[str], epoch: int) -> int:
        """The highest attempt ever recorded for ``epoch`` in any of ``tables``, history
        included (0 if none): a replay's attempt is this plus one."""

    @abstractmethod
    def jobs_progress(self, jobs: Sequence[ProgressRequest]) -> list[JobProgress]:
        """What planning the batches of each job in ``jobs`` reads (in their order), in one
        read transaction of a few statements whatever their number (a scheduler plans
        every job that an ended batch may have made runnable at once): per job, the newest
        epoch its output has WRITTEN, the epochs of its pipeline issued after it, the
        states of its output and of its inputs at those epochs, and the epochs its source
        has a slice recorded for among them. UnknownTableError for an unknown output.

        Each statement sees at least what the ones before it saw (on PostgreSQL they need
        not see one snapshot): an epoch issued or sealed meanwhile is planned next time.
        """

    def job_progress(
        self, output: str, *, inputs: Iterable[str] = (), source: str | None = None
    ) -> JobProgress:
        """:meth:`jobs_progress` of one job."""
        (progress,) = self.jobs_progress([ProgressRequest(output, tuple(inputs), source)])
        return progress

    @abstractmethod
    def batch_start(
        self, tables: Iterable[str], epoch: int, *, inputs: Iterable[str] = ()
    ) -> BatchStart:
        """:meth:`max_attempt` and :meth:`latest_written` of a job's ``tables`` and
        :meth:`states_at` ``epoch`` of its ``inputs``, in one read: what a batch at
        ``epoch`` reads of the catalog before it runs."""

    @abstractmethod
    def get_commit(self, epoch: int) -> CommitManifest | None:
        """The COMMIT manifest of an epoch (epoch ids are unique across pipelines)."""

    @abstractmethod
    def latest_commit(self, *, pipeline: str | None = None) -> CommitManifest | None:
        """The newest COMMIT manifest (of ``pipeline`` when given)."""
