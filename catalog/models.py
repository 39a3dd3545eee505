"""Immutable values stored in and returned by the catalog."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from catalog.errors import InvalidNameError

WriteMode = Literal["append", "merge", "overwrite"]
TableKind = Literal["root", "derived", "rejects", "quarantine"]

# Names become directory names under the warehouse and SQL identifiers: keep them to a
# conservative identifier alphabet so that no name can escape the warehouse or inject SQL.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def validate_name(name: str, *, kind: str = "table") -> str:
    """Return ``name`` if it is a valid table/job/source name, else raise InvalidNameError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidNameError(
            kind=kind,
            name=str(name),
            reason="use 1-128 letters, digits and underscores, starting with a letter or underscore",
        )
    return name


class EpochState(StrEnum):
    """State of one epoch in one table (PRODUCT.md, "An epoch's life in one table")."""

    PROCESSED = "PROCESSED"
    """Rows of the epoch are committed in Delta but the epoch is not sealed."""
    WRITTEN = "WRITTEN"
    """Sealed at a recorded Delta version."""
    ROLLED_BACK = "ROLLED_BACK"
    """A PROCESSED epoch undone by recovery; kept for audit until it is replayed."""
    COALESCED = "COALESCED"
    """Folded into a later epoch by backlog catch-up; the table cannot be read at it."""


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


@dataclass(frozen=True)
class TableInfo(TableSpec):
    first_epoch: int = 1
    """The first epoch this table is responsible for."""
    writer_job: str | None = None
    created_at: datetime | None = None


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


@dataclass(frozen=True)
class JobInfo(JobSpec):
    created_at: datetime | None = None


@dataclass(frozen=True)
class LineageEdge:
    """``src`` feeds ``dst``: table -> job (input) or job -> table (output), or source -> job."""

    src: str
    dst: str
    kind: Literal["input", "output", "source"]


@dataclass(frozen=True)
class Epoch:
    id: int
    barrier_ts: datetime
    created_at: datetime


@dataclass(frozen=True)
class SourceSlice:
    source: str
    epoch: int
    bounds: Mapping[str, object]
    """JSON-able description of the slice (e.g. Kafka offset ranges per partition)."""
    catch_up: bool = False
    recorded_at: datetime | None = None


@dataclass(frozen=True)
class TableEpoch:
    """The state of one epoch in one table."""

    table: str
    epoch: int
    state: EpochState
    delta_version: int | None
    job: str | None = None
    attempt: int = 1
    generation: int | None = None
    coalesced_into: int | None = None
    rows: int | None = None
    reason: str | None = None
    updated_at: datetime | None = None


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
class CommitManifest:
    """Epoch T is COMMIT: every table of the pipeline has T WRITTEN at these versions."""

    epoch: int
    versions: Mapping[str, int]
    barrier_ts: datetime | None = None
    committed_at: datetime | None = None


@dataclass(frozen=True)
class Lease:
    job: str
    owner: str
    generation: int
    expires_at: datetime


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
class TableStatus:
    """What an operator sees per table: its writer and how far its epochs have got."""

    table: str
    kind: TableKind
    writer_job: str | None
    latest_processed: TableEpoch | None
    latest_written: TableEpoch | None
    latest_validation: ValidationRecord | None = None
