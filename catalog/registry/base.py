"""Pipelines, tables, jobs and lineage: what is registered, and retiring it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from catalog.models import (
    JobInfo,
    JobSpec,
    LineageEdge,
    PipelineInfo,
    RetiredPipeline,
    TableInfo,
    TableSpec,
)


class RegistryStore(ABC):
    """Pipelines, tables, jobs and lineage: what is registered, and retiring it."""

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
