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
    PIPELINE_DEFAULT,
    CommitManifest,
    Epoch,
    EpochExpiry,
    JobFailureRecord,
    JobInfo,
    JobSpec,
    Lease,
    LineageEdge,
    Pin,
    PipelineInfo,
    Resolution,
    ResolutionAction,
    RetiredPipeline,
    Revision,
    SealRequest,
    SourceSlice,
    TableEpoch,
    TableInfo,
    TableSpec,
    TableStatus,
    Tag,
    ValidationRecord,
)

SCHEMA_VERSION = 3


class Catalog(ABC):
    """Tables, jobs, lineage, epochs, source slices, epoch states, commits and leases;
    pipelines, job failures, resolutions of blocked epochs, pins, tags and expiries.

    Pipelines: every table and job belongs to one named pipeline (PIPELINE_DEFAULT
    unless its spec says otherwise); a pipeline exists once its first table or job is
    registered ("default" always exists). Epoch ids are one sequence per catalog, but
    each epoch belongs to the pipeline that opened it, and a table's epochs are only
    those of its pipeline: states, validations and resolutions of a table at another
    pipeline's epoch are refused with ForeignEpochError.
    """

    url: str
    """The catalog URL with any password masked."""

    # -- tables and jobs -------------------------------------------------------------

    @abstractmethod
    def register_table(self, spec: TableSpec) -> TableInfo:
        """Register a table, or return it unchanged if registered with the same definition.

        A root or derived table's ``first_epoch`` is the next epoch to be issued (in any
        pipeline). Creates the table's pipeline if it is new. Registering a retired table
        again (same definition) revives it: ``retired_at`` is cleared. Raises
        NameOwnedError if another pipeline registered it, TableConflictError if it exists
        with another location, kind or partitioning.
        """

    @abstractmethod
    def register_pipeline(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> PipelineInfo:
        """Register a pipeline's tables and jobs (their ``pipeline`` becomes ``name``) in one
        transaction, as :meth:`register_table` and :meth:`register_job` would one by one.

        First, before anything is written, refuses with NameOwnedError (naming both
        pipelines) every job, source or table name another pipeline owns (job and source
        names are warehouse-wide, like table names), and with PipelineMismatchError an input
        table of another pipeline. Any refusal leaves the catalog as it was; two processes
        registering at once are serialized by the write lock.
        """

    @abstractmethod
    def check_registration(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> None:
        """The up-front refusals of :meth:`register_pipeline`, read-only: NameOwnedError,
        and PipelineMismatchError for an input table another pipeline registered. For a
        check before anything starts; registering checks again under the write lock."""

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

        Every input and output must belong to the job's pipeline (PipelineMismatchError
        naming job, table and both pipelines: a foreign pipeline's table can only be read
        as a source) and be active (RetiredError). A job or source name another pipeline
        owns is refused (NameOwnedError). Registering a retired job again revives it.
        """

    @abstractmethod
    def get_table(self, name: str) -> TableInfo:
        """Raises UnknownTableError. Retired tables are found too."""

    @abstractmethod
    def list_tables(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[TableInfo]:
        """Tables by name; retired ones only with ``include_retired``."""

    @abstractmethod
    def get_job(self, name: str) -> JobInfo:
        """Raises UnknownJobError. Retired jobs are found too."""

    @abstractmethod
    def list_jobs(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[JobInfo]:
        """Jobs by name; retired ones only with ``include_retired``."""

    @abstractmethod
    def lineage(self) -> list[LineageEdge]:
        """The edges of the active jobs."""

    @abstractmethod
    def list_pipelines(self) -> list[PipelineInfo]:
        """Every pipeline, by name."""

    @abstractmethod
    def retire_job(self, name: str) -> JobInfo:
        """Retire a job (idempotent): its history stays readable, its lease can no longer
        be acquired, it leaves list_jobs() and lineage().

        Refused with RetirementBlockedError (naming them) while an active job reads one of
        its outputs. ``register_job`` revives it.
        """

    @abstractmethod
    def retire_pipeline(self, name: str) -> RetiredPipeline:
        """Remove a pipeline's registration: its jobs, their leases and failures, its
        sources' slices, its tables' registration and states, its epochs, commits, pins,
        tags and expiries. Delta files are not touched. Its epoch ids are never issued again.

        Refused with RetirementBlockedError while a job of it holds a live lease (a run of
        it is going on); UnknownPipelineError for a pipeline the catalog does not know.
        """

    @abstractmethod
    def retire_table(self, name: str) -> TableInfo:
        """Retire a table (idempotent): its states stay readable (get_table, table_epochs),
        but COMMIT decisions of its pipeline no longer wait for it.

        Refused with RetirementBlockedError while its writer job is active or an active
        job reads it. ``register_table`` revives it.
        """

    # -- epochs and slices -----------------------------------------------------------

    @abstractmethod
    def open_epoch(
        self, barrier_ts: datetime | None = None, *, pipeline: str = PIPELINE_DEFAULT
    ) -> Epoch:
        """Issue the next epoch for ``pipeline``: ids strictly increase across the catalog,
        barrier timestamps never decrease within the pipeline.

        ``barrier_ts`` defaults to now; an earlier timestamp than the pipeline's previous
        epoch's is raised to it. Safe when several processes ask at once. An unknown
        pipeline (other than the default) raises UnknownPipelineError.
        """

    @abstractmethod
    def get_epoch(self, epoch: int) -> Epoch:
        """Raises UnknownEpochError."""

    @abstractmethod
    def latest_epoch(self, *, pipeline: str | None = None) -> Epoch | None:
        """The newest epoch (of ``pipeline`` when given)."""

    @abstractmethod
    def epochs(
        self, *, after: int = 0, up_to: int | None = None, pipeline: str | None = None
    ) -> list[Epoch]:
        """Issued epochs with after < id <= up_to (of ``pipeline`` when given), oldest first."""

    @abstractmethod
    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        """The newest epoch (of ``pipeline`` when given) whose barrier timestamp is at or
        before ``ts``."""

    @abstractmethod
    def record_slice(
        self,
        source: str,
        epoch: int,
        bounds: Mapping[str, object],
        *,
        job: str,
        generation: int,
        catch_up: bool = False,
    ) -> SourceSlice:
        """Record the bounds of a source's slice for an epoch, once, for ``job``.

        Checks the job's lease generation (StaleLeaseError: zombie fencing) and that the
        epoch is one of the job's pipeline (ForeignEpochError). Recording the same bounds
        again returns the recorded slice; other bounds raise SliceConflictError, so that a
        replay always reads exactly the same input.
        """

    @abstractmethod
    def get_slice(self, source: str, epoch: int) -> SourceSlice | None: ...

    @abstractmethod
    def latest_slice(self, source: str) -> SourceSlice | None: ...

    @abstractmethod
    def slices(self, source: str, *, after: int = 0, up_to: int | None = None) -> list[SourceSlice]:
        """The source's recorded slices with after < epoch <= up_to, oldest first (one
        range scan of the primary key)."""

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
        become COALESCED: only the epochs of the table's pipeline in that range. If,
        after this, every active (non-retired) table of the epoch's pipeline responsible
        for the epoch has it WRITTEN, the COMMIT manifest is recorded in the same
        transaction and returned. Every transition is checked by
        :func:`catalog.states.check_transition`.
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
    def get_commit(self, epoch: int) -> CommitManifest | None:
        """The COMMIT manifest of an epoch (epoch ids are unique across pipelines)."""

    @abstractmethod
    def latest_commit(self, *, pipeline: str | None = None) -> CommitManifest | None:
        """The newest COMMIT manifest (of ``pipeline`` when given)."""

    # -- leases ----------------------------------------------------------------------

    @abstractmethod
    def acquire_lease(self, job: str, owner: str, *, ttl_seconds: float) -> Lease:
        """Take the job's lease. Free, expired or already ours: granted.

        Taking over a lease that another owner let expire bumps the generation, which
        fences the old owner. A live lease of another owner raises LeaseHeldError (who
        holds it, since when, until when). Re-acquiring our own live lease keeps the
        generation. A retired job's lease raises RetiredError.
        """

    @abstractmethod
    def take_over_lease(
        self,
        job: str,
        owner: str,
        *,
        expected_owner: str,
        expected_generation: int,
        ttl_seconds: float,
    ) -> Lease:
        """Take the lease even if it has not expired, bumping the generation, but only if
        it is still held by (``expected_owner``, ``expected_generation``): compare and swap.

        For a runner that has proved the holder's process dead (same host). Otherwise
        raises LeaseHeldError when another holder's lease is live, StaleLeaseError when
        the lease changed hands and is not live. A retired job raises RetiredError.
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
    def last_failures(self) -> dict[str, JobFailureRecord]:
        """The newest failure of each job that has one (one indexed query)."""

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

    # -- retention -------------------------------------------------------------------
    # Pins, tags and expiries are serialized by the write lock: a pin or tag created
    # before an expiry protects its epoch (the expiry skips it); one created after it
    # fails with EpochExpiredError.

    @abstractmethod
    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin:
        """Protect a cut while the pin lives (its holder renews it).

        ``epoch`` None: a read-committed/uncommitted cut, whose versions alone need
        protection. An expired epoch raises EpochExpiredError (naming the rule), an
        unissued one UnknownEpochError.
        """

    @abstractmethod
    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin:
        """Extend a live pin; PinExpiredError if it expired or was released."""

    @abstractmethod
    def release_pin(self, pin: Pin) -> None:
        """Remove a pin (no-op if already gone)."""

    @abstractmethod
    def active_pins(self, *, now: datetime | None = None) -> list[Pin]:
        """Pins not expired at ``now`` (default: the catalog's clock), oldest first."""

    @abstractmethod
    def purge_expired_pins(self) -> int:
        """Delete expired pins; returns how many."""

    @abstractmethod
    def create_tag(
        self, name: str, *, epoch: int, versions: Mapping[str, int], pipeline: str | None
    ) -> Tag:
        """Name a cut until deleted. Raises InvalidNameError, TagExistsError,
        UnknownEpochError, EpochExpiredError."""

    @abstractmethod
    def get_tag(self, name: str) -> Tag:
        """Raises UnknownTagError."""

    @abstractmethod
    def list_tags(self) -> list[Tag]:
        """Every tag, by name."""

    @abstractmethod
    def delete_tag(self, name: str) -> None:
        """Raises UnknownTagError."""

    @abstractmethod
    def expire_epochs(
        self, epochs: Sequence[int], *, rule: str, pipeline: str | None = None
    ) -> list[int]:
        """Record ``epochs`` expired under ``rule``, in one write transaction; returns
        those actually expired now.

        Skips epochs that hold an active pin or a tag at that moment, and epochs already
        expired. Raises UnknownEpochError for an unissued epoch, ForeignEpochError for an
        epoch not of ``pipeline`` (when given). Nothing is deleted: maintenance uses the
        record to decide which files may go.
        """

    @abstractmethod
    def expiry_of(self, epoch: int) -> EpochExpiry | None:
        """The expiry of an epoch, if it expired."""

    @abstractmethod
    def expired_epochs(self, *, pipeline: str | None = None) -> list[EpochExpiry]:
        """Expired epochs (of ``pipeline`` when given), oldest first."""

    @abstractmethod
    def set_retention_policy(self, pipeline: str | None, policy_json: str | None) -> None:
        """Store a pipeline's retention policy (JSON text; None removes it). Pipeline None
        sets the catalog-wide default. The runtime defines the policy's format. Raises
        InvalidRetentionPolicyError (not JSON), UnknownPipelineError."""

    @abstractmethod
    def retention_policy(self, pipeline: str | None) -> str | None:
        """The pipeline's retention policy, else the catalog-wide default, else None."""

    # -- revisions (etl recompute) ---------------------------------------------------

    @abstractmethod
    def begin_revision(
        self,
        *,
        pipeline: str,
        tables: Sequence[str],
        from_epoch: int,
        reason: str,
        actor: str,
        owner: str,
    ) -> Revision:
        """Record a recompute of ``tables`` from ``from_epoch`` on, BUILDING. Nothing a
        reader resolves changes until :meth:`switch_revision`."""

    @abstractmethod
    def switch_revision(
        self,
        revision: int,
        *,
        generations: Mapping[str, int],
        seals: Sequence[SealRequest],
        schemas: Mapping[str, str] | None = None,
    ) -> Revision:
        """Switch a BUILDING revision, in one transaction: for every table of it, its epoch
        states from the revision's first epoch through the newest epoch ``seals`` name for
        it are replaced by ``seals`` (WRITTEN, with ``first_epoch``..epoch-1 COALESCED), the
        replaced states are kept with the revision (:meth:`superseded_states`), and the
        pipeline's COMMIT manifests of those epochs are recorded again.

        ``generations``: the lease generation the recompute holds for every job writing
        the tables (StaleLeaseError if one was taken over: a recompute that lost a lease
        never switches). ``schemas``: the tables' Delta schemas (JSON) after it, recorded in
        the same transaction. RevisionStateError unless BUILDING.
        """

    @abstractmethod
    def discard_revision(self, revision: int, *, note: str) -> Revision:
        """Mark a BUILDING revision DISCARDED (its Delta versions were rolled back)."""

    @abstractmethod
    def revisions(self, *, pipeline: str | None = None, table: str | None = None) -> list[Revision]:
        """Revisions (of ``pipeline``, or recomputing ``table``, when given), oldest first."""

    @abstractmethod
    def superseded_states(self, revision: int) -> list[TableEpoch]:
        """The epoch states a switched revision replaced: what readers saw before it."""

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
