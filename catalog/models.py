"""Immutable values stored in and returned by the catalog.

The values the consistency rules read (epochs, epoch states, revisions) are defined in
:mod:`consistency.records`, the bottom layer, and exported by :mod:`catalog` too.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from catalog.errors import CatalogError, InvalidNameError, StaleLeaseError
from consistency.records import PIPELINE_DEFAULT, Epoch, TableEpoch

FAILURE_MESSAGE_MAX_CHARS = 1000
"""A recorded job failure's message is one line of at most this many characters."""

WriteMode = Literal["append", "merge", "overwrite"]
TableKind = Literal["root", "derived", "rejects", "quarantine"]

# Names become directory names under the warehouse and SQL identifiers: keep them to a
# conservative identifier alphabet so that no name can escape the warehouse or inject SQL.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# A tag is only ever a value in the catalog (never a path or an identifier): it may also
# hold the hyphens and dots people write in names (git and dbt accept them).
_TAG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def validate_name(name: str, *, kind: str = "table") -> str:
    """Return ``name`` if it is a valid table/job/source name, else raise InvalidNameError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidNameError(
            kind=kind,
            name=str(name),
            reason="use 1-128 letters, digits and underscores, starting with a letter or underscore",
        )
    return name


def validate_tag_name(name: str) -> str:
    """Return ``name`` if it is a valid tag name (``before-migration``, ``v1.2``), else
    raise InvalidNameError."""
    if not isinstance(name, str) or not _TAG_NAME.fullmatch(name) or ".." in name:
        raise InvalidNameError(
            kind="tag",
            name=str(name),
            reason="use 1-128 letters, digits, underscores, hyphens and dots, starting with a "
            "letter, digit or underscore",
        )
    return name


@dataclass(frozen=True)
class TableSpec:
    """What a pipeline declares about a table."""

    name: str
    location: str
    """Absolute URI or path of the Delta table."""
    kind: TableKind = "derived"
    schema_json: str | None = None
    """Delta schema (JSON) once known."""
    partition_by: tuple[str, ...] = ()
    pipeline: str = PIPELINE_DEFAULT
    """The pipeline the table belongs to: its epochs are that pipeline's epochs."""


@dataclass(frozen=True)
class TableInfo(TableSpec):
    first_epoch: int = 1
    """The first epoch this table is responsible for."""
    writer_job: str | None = None
    created_at: datetime | None = None
    retired_at: datetime | None = None
    """Set once retired: history stays readable, COMMIT decisions ignore the table."""


@dataclass(frozen=True)
class JobSpec:
    """A job: one step of the pipeline. Reads tables or one source, writes one table."""

    name: str
    output: str
    mode: WriteMode = "append"
    inputs: tuple[str, ...] = ()
    source: str | None = None
    keys: tuple[str, ...] = ()
    side_outputs: tuple[str, ...] = ()
    """Rejects or quarantine tables the job also writes, sealed with its output."""
    pipeline: str = PIPELINE_DEFAULT
    """The pipeline the job belongs to; its inputs and outputs must belong to it too."""


@dataclass(frozen=True)
class JobInfo(JobSpec):
    created_at: datetime | None = None
    retired_at: datetime | None = None
    """Set once retired: its lease can no longer be taken; its history stays readable."""


@dataclass(frozen=True)
class PipelineInfo:
    """A named pipeline: a set of jobs and tables whose epochs commit together."""

    name: str
    created_at: datetime | None = None
    retention_policy: str | None = None
    """The pipeline's own retention policy (JSON text), if it has one."""


@dataclass(frozen=True)
class RetiredPipeline:
    """What retiring a pipeline removed from the catalog (its tables' files are kept)."""

    pipeline: str
    jobs: tuple[str, ...]
    sources: tuple[str, ...]
    tables: tuple[TableInfo, ...]
    """The tables whose registration was removed, with their locations."""
    epochs: int
    """How many of the pipeline's epochs were removed (their ids are never issued again)."""


@dataclass(frozen=True)
class LineageEdge:
    """``src`` feeds ``dst``: table -> job (input) or job -> table (output), or source -> job."""

    src: str
    dst: str
    kind: Literal["input", "output", "source"]


@dataclass(frozen=True)
class SourceSlice:
    source: str
    epoch: int
    bounds: Mapping[str, object]
    """JSON-able description of the slice (e.g. Kafka offset ranges per partition)."""
    catch_up: bool = False
    recorded_at: datetime | None = None


@dataclass(frozen=True)
class SealRequest:
    """Seal ``epoch`` of ``table`` at ``delta_version``.

    With ``first_epoch`` < ``epoch`` the epochs first_epoch..epoch-1 are recorded
    COALESCED into ``epoch`` (backlog mode).
    """

    table: str
    epoch: int
    delta_version: int
    attempt: int = 1
    rows: int | None = None
    first_epoch: int | None = None


@dataclass(frozen=True)
class ProgressRequest:
    """One job in :meth:`catalog.states.base.StateStore.jobs_progress`: the table it
    writes, the tables it reads and its source."""

    output: str
    inputs: tuple[str, ...] = ()
    source: str | None = None


@dataclass(frozen=True)
class JobProgress:
    """How far a job's output is, and what its next batches may run over: what planning
    them reads (:meth:`catalog.states.base.StateStore.jobs_progress`)."""

    done_through: int
    """The newest epoch the output has WRITTEN; before its first seal, the epoch before
    the output's first epoch."""
    issued: tuple[int, ...]
    """The epochs of the output's pipeline issued after ``done_through``, oldest first."""
    states: Mapping[str, tuple[TableEpoch, ...]]
    """Per table asked for (the output and the inputs), its states at epochs after
    ``done_through`` up to the newest of ``issued``, oldest first (a table without one
    maps to ``()``)."""
    recorded_slices: tuple[int, ...] = ()
    """The epochs after ``done_through`` up to the newest of ``issued`` that the job's
    source has a slice recorded for."""


@dataclass(frozen=True)
class BatchStart:
    """What a batch at an epoch reads of the catalog before it runs, in one read
    (:meth:`catalog.states.base.StateStore.batch_start`): how to number its attempt, and
    which versions of its inputs it reads."""

    max_attempt: int
    """The highest attempt recorded at the epoch in the job's tables, history included (0
    if none)."""
    latest_written: Mapping[str, TableEpoch] = field(default_factory=dict)
    """Per table of the job, its newest WRITTEN state (a table without one is absent): the
    Delta log after its version may hold attempts the catalog never heard of."""
    input_states: Mapping[str, TableEpoch] = field(default_factory=dict)
    """Per input, its state at the epoch (an input without one is absent)."""


@dataclass(frozen=True)
class CommitManifest:
    """Epoch T is COMMIT: every table of the pipeline has T WRITTEN at these versions."""

    epoch: int
    versions: Mapping[str, int]
    barrier_ts: datetime | None = None
    committed_at: datetime | None = None
    pipeline: str = PIPELINE_DEFAULT
    """The pipeline whose (active) tables the manifest covers."""


@dataclass(frozen=True)
class Lease:
    job: str
    owner: str
    generation: int
    expires_at: datetime
    acquired_at: datetime | None = None
    """When this generation of the lease was taken."""


@dataclass(frozen=True)
class RenewedLeases:
    """What renewing several leases in one transaction did, by job."""

    renewed: Mapping[str, Lease] = field(default_factory=dict)
    lost: Mapping[str, StaleLeaseError] = field(default_factory=dict)
    """Leases taken over (or gone) meanwhile: not renewed, each with why."""


@dataclass(frozen=True)
class ValidationRecord:
    """Data-quality results of one epoch in one table."""

    table: str
    epoch: int
    success: bool
    """Every expectation passed (under `warn` or `quarantine` a failed epoch may still seal)."""
    policy: str
    results: Mapping[str, object] = field(default_factory=dict)
    recorded_at: datetime | None = None


@dataclass(frozen=True)
class JobFailureRecord:
    """One failed batch (or run) of a job, on record for operators."""

    job: str
    error_class: str
    message: str
    """One line; the catalog collapses line breaks and truncates it to
    FAILURE_MESSAGE_MAX_CHARS."""
    owner: str
    """The runner instance that failed (e.g. host:pid:id)."""
    epoch: int | None = None
    attempt: int | None = None
    generation: int | None = None
    pipeline: str | None = None
    """The job's pipeline: set by the catalog (a different value is refused)."""
    failed_at: datetime | None = None
    """Set by the catalog."""
    id: int | None = None
    """Set by the catalog: increasing in recording order."""


class ResolutionAction(StrEnum):
    """How an operator resolved a blocked epoch."""

    ACCEPT = "ACCEPT"
    """Seal the epoch as written, failing rows included."""
    QUARANTINE = "QUARANTINE"
    """Move the failing rows to the quarantine table and seal the rest."""
    SKIP = "SKIP"
    """Restore the table, roll the epoch back and replay it as an empty epoch."""


@dataclass(frozen=True)
class Resolution:
    """An operator's resolution of a blocked epoch of a table, kept for audit."""

    table: str
    epoch: int
    action: ResolutionAction
    actor: str
    """Free text naming who resolved it (e.g. user@host)."""
    reason: str
    at: datetime | None = None
    """Set by the catalog."""


@dataclass(frozen=True)
class Pin:
    """A cut protected from retention while the pin lives (renewed by its holder)."""

    id: str
    pipeline: str | None
    epoch: int | None
    """None for a read-committed or read-uncommitted cut: only its versions are protected."""
    versions: Mapping[str, int]
    holder: str
    created_at: datetime
    expires_at: datetime

    @classmethod
    def new(
        cls,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
        now: datetime,
    ) -> Pin:
        """A new pin living ``ttl_seconds`` from ``now``."""
        return cls(
            id=uuid.uuid4().hex,
            pipeline=pipeline,
            epoch=epoch,
            versions=encode_versions(versions),
            holder=holder,
            created_at=now,
            expires_at=now + pin_ttl(ttl_seconds),
        )


def pin_ttl(ttl_seconds: float) -> timedelta:
    """How long a pin lives from its creation or renewal; ``ttl_seconds`` > 0."""
    if not ttl_seconds > 0:
        raise CatalogError(f"a pin's ttl_seconds must be positive, not {ttl_seconds}")
    return timedelta(seconds=ttl_seconds)


def encode_versions(versions: Mapping[str, int]) -> dict[str, int]:
    """Delta versions by table as the catalog stores them (a pin's, a tag's)."""
    return {str(table): int(version) for table, version in versions.items()}


@dataclass(frozen=True)
class Tag:
    """A named cut that lives until deleted."""

    name: str
    epoch: int
    versions: Mapping[str, int]
    pipeline: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class EpochExpiry:
    """An epoch expired under a retention rule: it can no longer be pinned, tagged or read."""

    epoch: int
    pipeline: str
    rule: str
    expired_at: datetime


@dataclass(frozen=True)
class TableStatus:
    """What an operator sees per table: its writer and how far its epochs have got."""

    table: str
    kind: TableKind
    writer_job: str | None
    latest_processed: TableEpoch | None
    latest_written: TableEpoch | None
    latest_validation: ValidationRecord | None = None
    pipeline: str = PIPELINE_DEFAULT
    retired: bool = False
    writer_lease: Lease | None = None
    """The writer job's lease (live or not): owner, generation, acquired_at, expires_at."""
    writer_last_failure: JobFailureRecord | None = None
    pipeline_latest_epoch: Epoch | None = None
    """The newest epoch the table's pipeline has opened."""
    latest_written_barrier_ts: datetime | None = None
    """The barrier timestamp of ``latest_written``: freshness in seconds."""
    pipeline_latest_commit: CommitManifest | None = None
