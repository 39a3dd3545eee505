"""Immutable values of the consistency rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal


class Level(StrEnum):
    """Consistency levels a reader may ask for (docs/design.md, "Reading")."""

    READ_UNCOMMITTED = "read-uncommitted"
    READ_COMMITTED = "read-committed"
    REPEATABLE_READ = "repeatable-read"


@dataclass(frozen=True)
class PipelineCut:
    """One pipeline's part of a repeatable-read snapshot over tables of several pipelines:
    its epoch, which every one of its requested tables has WRITTEN, and that epoch's barrier."""

    pipeline: str
    epoch: int
    barrier_ts: datetime
    tables: tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """A resolved read: a level, an epoch where the level has one, and a version per table.

    Every read through the snapshot uses exactly these Delta versions. A table with
    version None has no commit yet (it reads as empty).

    Over tables of several pipelines (repeatable-read), there is no single epoch: ``epoch``
    is None, ``pipelines`` holds each pipeline's cut, ``aligned_at`` the barrier time every
    cut is at or before, and ``barrier_ts`` the oldest of the cuts' barriers (how old the
    snapshot is) (docs/design.md, "Reading across pipelines").
    """

    level: Level
    versions: Mapping[str, int | None]
    epoch: int | None = None
    barrier_ts: datetime | None = None
    epochs: Mapping[str, int | None] = field(default_factory=dict)
    """Per table, the epoch its version seals (read-committed: may differ per table)."""
    pipelines: tuple[PipelineCut, ...] = ()
    """Per pipeline (by name) its cut, when the tables span several pipelines; else empty."""
    aligned_at: datetime | None = None
    """Across pipelines: the barrier time T the cuts are aligned at (see ``pipelines``)."""


@dataclass(frozen=True)
class EpochBatch:
    """Epochs first..last processed as one batch; first < last means backlog coalescing."""

    first: int
    last: int

    @property
    def coalesced(self) -> bool:
        return self.first < self.last


@dataclass(frozen=True)
class LogCommit:
    """One Delta log version as recovery sees it (from commit metadata)."""

    version: int
    operation: str
    epoch: int | None = None
    first_epoch: int | None = None
    job: str | None = None
    attempt: int | None = None
    final: bool = False
    part: int | None = None
    """The micro-batch of the batch this commit holds (:data:`META_BATCH`)."""
    audit: bool = False
    """The commit is a quality gate's rewrite of the epoch (:data:`META_AUDIT`)."""
    restored_to: int | None = None
    """For a RESTORE commit: the version it restored. A rollback that emptied a table with
    no version before the rolled-back epoch (Delta cannot RESTORE to before version 0)
    records :data:`BEFORE_FIRST_VERSION`."""


@dataclass(frozen=True)
class SealAction:
    """A complete commit of the epoch is in the log but the catalog never sealed it."""

    table: str
    epoch: int
    delta_version: int
    attempt: int
    first_epoch: int
    kind: Literal["seal"] = "seal"


@dataclass(frozen=True)
class RollbackAction:
    """Partial epoch: restore the table to ``to_version`` and mark the epochs ROLLED_BACK."""

    table: str
    to_version: int | None
    """None: the table had no version before the epoch; roll back to empty."""
    epochs: tuple[int, ...]
    """Epochs whose rows are undone. The executor marks ROLLED_BACK those the catalog holds
    as PROCESSED; an epoch whose commit was never recorded has no state to mark."""
    kind: Literal["rollback"] = "rollback"
    restore: bool = True
    """False: the log already holds the table at ``to_version``'s content (an earlier
    rollback restored it but crashed before marking the epochs); only mark them."""


@dataclass(frozen=True)
class ReplayAction:
    """Process the epoch again from its recorded slice / input versions."""

    table: str
    epoch: int
    attempt: int
    kind: Literal["replay"] = "replay"
    first_epoch: int | None = None
    """The batch replayed is first_epoch..epoch (backlog coalescing when smaller than
    ``epoch``); None when recovery cannot tell (the job re-plans from its last sealed epoch)."""


RecoveryAction = SealAction | RollbackAction | ReplayAction


@dataclass(frozen=True)
class RecoveryPlan:
    table: str
    actions: tuple[RecoveryAction, ...]


# Keys of the commit metadata Delta Barrier writes into every Delta commit
# (Delta protocol: commitInfo may carry arbitrary user metadata).
META_EPOCH = "delta_barrier.epoch"
META_FIRST_EPOCH = "delta_barrier.first_epoch"
META_JOB = "delta_barrier.job"
META_ATTEMPT = "delta_barrier.attempt"
META_FINAL = "delta_barrier.final"
META_BATCH = "delta_barrier.batch"
META_AUDIT = "delta_barrier.audit"
META_ROLLBACK_OF = "delta_barrier.rollback_of"
META_GENERATION = "delta_barrier.generation"
META_REVISION = "delta_barrier.revision"
"""On the commits (and RESTOREs) of a recompute: the revision (etl recompute) they build."""
# Written by the Delta layer besides the keys above. COMMIT_ID lets a writer tell whether
# its own commit landed after an ambiguous failure; RESTORED_TO marks a rollback to
# "before version 0" (an overwrite removing every file, since Delta cannot RESTORE to a
# version that never existed).
META_COMMIT_ID = "delta_barrier.commit_id"
META_RESTORED_TO = "delta_barrier.restored_to"

BEFORE_FIRST_VERSION = -1
"""``LogCommit.restored_to`` of a rollback that emptied a table: the state before version 0."""
