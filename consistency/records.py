"""The catalog's records the consistency rules read: epochs, their states in each table,
revisions. Frozen values; the catalog stores them, the rules in this package decide over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

PIPELINE_DEFAULT = "default"
"""The pipeline of tables, jobs and epochs that name none (and of everything in a v1 catalog)."""


class EpochState(StrEnum):
    """State of one epoch in one table (docs/design.md, "An epoch's life in one table")."""

    PROCESSED = "PROCESSED"
    """Rows of the epoch are committed in Delta but the epoch is not sealed."""
    WRITTEN = "WRITTEN"
    """Sealed at a recorded Delta version."""
    ROLLED_BACK = "ROLLED_BACK"
    """A PROCESSED epoch undone by recovery; kept for audit until it is replayed."""
    COALESCED = "COALESCED"
    """Folded into a later epoch by backlog catch-up; the table cannot be read at it."""


@dataclass(frozen=True)
class Epoch:
    id: int
    barrier_ts: datetime
    created_at: datetime
    pipeline: str = PIPELINE_DEFAULT
    """The pipeline that opened the epoch; ids are one sequence across pipelines."""


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


class RevisionState(StrEnum):
    """Where a recompute of tables (a revision of their epochs) stands."""

    BUILDING = "BUILDING"
    """Its Delta versions are being written; no catalog reader sees them."""
    SWITCHED = "SWITCHED"
    """One catalog transaction recorded its versions for every table of it together."""
    DISCARDED = "DISCARDED"
    """Abandoned (killed, or failed) before the switch; its versions were rolled back."""


@dataclass(frozen=True)
class Revision:
    """A recompute of tables from an epoch on: recorded when it starts, switched at once."""

    id: int
    pipeline: str
    tables: tuple[str, ...]
    from_epoch: int
    reason: str
    actor: str
    """Who asked for it (user@host)."""
    owner: str
    """The recompute process building it (its lease owner): while that process lives, a
    run of the pipeline leaves the revision's jobs to it."""
    state: RevisionState
    started_at: datetime | None = None
    finished_at: datetime | None = None
    """When it was switched or discarded."""
    through_epoch: int | None = None
    """The newest epoch it recomputed (set at the switch)."""
    note: str | None = None
    """Why it was discarded."""
