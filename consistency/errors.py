"""The root of Delta Barrier's errors and the errors of the consistency rules.

Every error the project raises derives from :class:`DeltaBarrierError`; it lives here, at
the bottom of the layers (etl -> catalog -> consistency). Besides the rules' own errors
(levels, snapshots, batch planning, recovery) this module holds the catalog errors the
rules raise (state transitions, unknown and expired epochs) with their bases; the rest of
the catalog's errors are in :mod:`catalog.errors`. Each error carries the tables, epochs
or versions it concerns as attributes and says in its message what is wrong and what to
do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime


class DeltaBarrierError(Exception):
    """Root of every error raised by Delta Barrier."""


class CatalogError(DeltaBarrierError):
    """A problem with the catalog (the metadata store)."""


class ConsistencyError(DeltaBarrierError):
    """A consistency rule cannot be satisfied, or was asked for something contradictory."""


class UnknownLevelError(ConsistencyError):
    """The text names no consistency level."""

    def __init__(self, text: object, valid: Sequence[str]):
        self.text = text
        self.valid = tuple(valid)
        super().__init__(f"unknown consistency level {text!r}; use one of: {', '.join(self.valid)}")


class SnapshotRequestError(ConsistencyError):
    """A snapshot request contradicts itself (no tables, duplicates, conflicting options)."""

    def __init__(self, reason: str, *, tables: Sequence[str] = ()):
        self.reason = reason
        self.tables = tuple(tables)
        super().__init__(f"invalid snapshot request: {reason}")


class NoCommonEpochError(ConsistencyError):
    """The requested tables have no WRITTEN epoch in common (repeatable-read is impossible)."""

    def __init__(
        self,
        tables: Sequence[str],
        positions: Mapping[str, int | None],
        *,
        at_or_before: int | None = None,
    ):
        self.tables = tuple(tables)
        self.positions = dict(positions)
        self.at_or_before = at_or_before
        where = ", ".join(
            f"{t} at {self.positions[t]}"
            if self.positions.get(t) is not None
            else f"{t} never written"
            for t in self.tables
        )
        bound = f" at or before epoch {at_or_before}" if at_or_before is not None else ""
        super().__init__(
            f"tables share no WRITTEN epoch{bound}: {where} (latest WRITTEN epoch per table); "
            "wait for the lagging jobs to seal an epoch, or read at read-committed"
        )


class EpochNotReadableError(ConsistencyError):
    """A table cannot be read at the requested epoch (time travel with ``as_of_epoch``)."""

    def __init__(
        self,
        table: str,
        epoch: int,
        state: str | None,
        *,
        coalesced_into: int | None = None,
        readable_before: int | None = None,
        readable_after: int | None = None,
    ):
        self.table = table
        self.epoch = epoch
        self.state = state
        self.coalesced_into = coalesced_into
        self.readable_before = readable_before
        """The newest readable epoch before ``epoch`` of the requested tables, if any."""
        self.readable_after = readable_after
        """A readable epoch after it (the one it was coalesced into), if any."""
        if state == "COALESCED":
            into = f" into epoch {coalesced_into}" if coalesced_into is not None else ""
            why = (
                f"it is COALESCED{into} (backlog catch-up wrote several epochs as one), "
                "so no version of the table holds exactly that epoch"
            )
        elif state == "PROCESSED":
            why = "it is only PROCESSED, not sealed yet"
        elif state == "ROLLED_BACK":
            why = "it was ROLLED_BACK by recovery and not replayed yet"
        elif state is None:
            why = (
                "the table has no state for it (not written yet, or before the table's first epoch)"
            )
        else:
            why = f"it is {state}, not WRITTEN"
        nearest = [
            f"{which} epoch {found}"
            for which, found in (("the earlier", readable_before), ("the later", readable_after))
            if found is not None
        ]
        advice = (
            f"the nearest readable: {' and '.join(nearest)}"
            if nearest
            else "choose an epoch that every requested table has WRITTEN"
        )
        super().__init__(f"table {table!r} cannot be read as of epoch {epoch}: {why}; {advice}")


class NoEpochAtTimeError(ConsistencyError):
    """No epoch has a barrier timestamp at or before the requested time."""

    def __init__(self, ts: datetime):
        self.ts = ts
        super().__init__(
            f"no epoch has a barrier timestamp at or before {ts.isoformat()}; ask for a later time"
        )


class NoAlignedCutError(ConsistencyError):
    """Across pipelines: one pipeline has nothing its requested tables all have WRITTEN at
    or before the barrier time the read is aligned at."""

    def __init__(
        self,
        *,
        pipeline: str,
        tables: Sequence[str],
        aligned_at: datetime,
        reference: str | None = None,
        reference_epoch: int | None = None,
    ):
        self.pipeline = pipeline
        self.tables = tuple(tables)
        self.aligned_at = aligned_at
        self.reference = reference
        self.reference_epoch = reference_epoch
        if reference is None:
            why = f"the time asked for ({aligned_at.isoformat()})"
            todo = "ask for a later --as-of-time, or read at read-committed"
        else:
            why = (
                f"{aligned_at.isoformat()}, the barrier of the latest cut of pipeline "
                f"{reference!r} (epoch {reference_epoch}): a read across pipelines aligns them by barrier time"
            )
            todo = (
                f"run pipeline {reference!r} until it seals a newer epoch, read at "
                "read-committed, or read each pipeline's tables on their own"
            )
        super().__init__(
            f"pipeline {pipeline!r} has no epoch that {', '.join(self.tables)} all have WRITTEN "
            f"with a barrier at or before {why}; {todo}"
        )


class BatchPlanError(ConsistencyError):
    """Batch planning was given impossible bounds or options."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"cannot plan epoch batches: {reason}")


class RecoveryError(ConsistencyError):
    """The Delta log and the catalog disagree in a way recovery cannot repair by itself."""

    def __init__(self, *, table: str, reason: str):
        self.table = table
        self.reason = reason
        super().__init__(f"cannot recover table {table!r}: {reason}")


class ForeignCommitError(RecoveryError):
    """The Delta log holds a commit that Delta Barrier (this job) did not write."""

    def __init__(self, table: str, version: int, operation: str, *, job: str | None = None):
        self.version = version
        self.operation = operation
        self.job = job
        who = f"by job {job!r}" if job else "without Delta Barrier commit metadata"
        undo = (
            f"e.g. RESTORE the table to version {version - 1} if nothing after it must be kept"
            if version > 0
            else "e.g. recreate the table"
        )
        super().__init__(
            table=table,
            reason=(
                f"Delta version {version} ({operation}) was written {who}; recovery cannot "
                f"tell which epoch it belongs to. Remove or roll it back manually ({undo}), "
                "then run recovery again"
            ),
        )


class RestoreBeforeSealError(RecoveryError):
    """A RESTORE in the log went back before the table's latest sealed version."""

    def __init__(self, *, table: str, version: int, restored_to: int, sealed_version: int):
        self.version = version
        self.restored_to = restored_to
        self.sealed_version = sealed_version
        super().__init__(
            table=table,
            reason=(
                f"Delta version {version} restored the table to version {restored_to}, "
                f"before version {sealed_version} of its latest WRITTEN epoch, so sealed "
                f"rows are missing from the current table; RESTORE it to version "
                f"{sealed_version} (or later) manually, then run recovery again"
            ),
        )


class UnknownEpochError(CatalogError):
    def __init__(self, epoch: int):
        self.epoch = epoch
        super().__init__(f"epoch {epoch} has not been issued by this catalog")


class EpochStateError(CatalogError):
    """An epoch state transition that the state machine does not allow."""

    def __init__(
        self, *, table: str, epoch: int, current: str | None, requested: str, why: str = ""
    ):
        self.table = table
        self.epoch = epoch
        self.current = current
        self.requested = requested
        detail = f": {why}" if why else ""
        super().__init__(
            f"table {table!r} epoch {epoch}: cannot go from {current or 'no state'} "
            f"to {requested}{detail}"
        )


class RetentionError(CatalogError):
    """A problem with pins, tags or expired epochs."""


class EpochExpiredError(RetentionError):
    """The epoch expired under the retention policy: it cannot be pinned, tagged or read."""

    def __init__(self, *, epoch: int, rule: str, expired_at: object):
        self.epoch = epoch
        self.rule = rule
        self.expired_at = expired_at
        super().__init__(
            f"epoch {epoch} has expired (at {expired_at}) under the retention rule {rule!r}; "
            "its cut is no longer kept"
        )
