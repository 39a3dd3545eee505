"""Barrier alignment and backlog batching: which epochs a job may process next, in which batches.

docs/design.md, "An epoch's life in one table": a job starts epoch T only when every input
has T WRITTEN (barrier alignment), and a job far behind may process epochs a..b as one
batch and one Delta commit (backlog mode, FLIP-327), after which only b is WRITTEN and
a..b-1 are COALESCED.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from consistency.errors import BatchPlanError
from consistency.models import EpochBatch


@dataclass(frozen=True)
class PendingEpochs:
    """The epochs a job has not sealed yet and may process now."""

    done_through: int
    """The output's last sealed (WRITTEN or COALESCED) epoch, or its first epoch - 1."""
    horizon: int
    """No epoch after this one can run yet: the newest issued epoch for a source job, the
    smallest of the inputs' newest WRITTEN epochs for a derived job."""
    runnable: Sequence[int]
    """Ascending epochs in (done_through, horizon] that every input has WRITTEN. A batch
    may only end at one of them."""

    @property
    def count(self) -> int:
        """How many epochs are pending up to the horizon (runnable or not)."""
        return self.horizon - self.done_through

    @property
    def last_runnable(self) -> int | None:
        return self.runnable[-1] if self.runnable else None


def pending_epochs(
    *,
    done_through: int,
    issued_through: int,
    inputs_written: Mapping[str, Collection[int]] | None,
) -> PendingEpochs:
    """The pending epochs of a job and which of them are runnable.

    ``inputs_written`` maps each input table to its WRITTEN epochs (any superset of those
    after ``done_through`` will do); None or empty means a source job, for which every
    issued epoch is runnable.
    """
    if done_through > issued_through:
        raise BatchPlanError(
            f"the output is sealed through epoch {done_through}, after the newest issued "
            f"epoch {issued_through}; read both from the same catalog"
        )
    if not inputs_written:
        return PendingEpochs(
            done_through=done_through,
            horizon=issued_through,
            runnable=range(done_through + 1, issued_through + 1),
        )
    written = [set(epochs) for epochs in inputs_written.values()]
    if not all(written):
        return PendingEpochs(done_through=done_through, horizon=done_through, runnable=())
    horizon = max(done_through, min(issued_through, *(max(epochs) for epochs in written)))
    smallest = min(written, key=len)
    runnable = sorted(
        epoch
        for epoch in smallest
        if done_through < epoch <= horizon and all(epoch in epochs for epochs in written)
    )
    return PendingEpochs(done_through=done_through, horizon=horizon, runnable=tuple(runnable))


def plan_batches(
    *,
    done_through: int,
    issued_through: int,
    inputs_written: Mapping[str, Collection[int]] | None,
    backlog_threshold: int | None = None,
    max_batch: int | None = None,
    recorded_slices: Collection[int] = (),
) -> list[EpochBatch]:
    """The batches a job should process next, in order.

    Normally every runnable epoch is its own batch. An epoch that is not runnable but
    lies before a runnable one (an input coalesced it, so it will never be WRITTEN there)
    is folded into the batch of the next runnable epoch: forced coalescing. Epochs after
    the last runnable one wait.

    Backlog mode: when at least ``backlog_threshold`` epochs are pending up to the
    horizon, everything up to the last runnable epoch is coalesced into one batch, or
    into consecutive batches of at most ``max_batch`` epochs. Batches still end only on
    runnable epochs, so one may exceed ``max_batch`` when no runnable epoch lies within
    reach (a long coalesced stretch in an input).

    ``recorded_slices`` are the pending epochs whose source slice the catalog already
    holds (an earlier attempt cut it, then failed). A batch never spans one of them: it
    ends there, so that the replay reads exactly that recorded slice and nothing is cut
    past it (docs/design.md, "Failure and recovery").

    The batches are contiguous from ``done_through + 1``; see :func:`pending_epochs` for
    the other arguments.
    """
    for name, value in (("backlog_threshold", backlog_threshold), ("max_batch", max_batch)):
        if value is not None and value < 1:
            raise BatchPlanError(f"{name} must be at least 1, got {value}")
    pending = pending_epochs(
        done_through=done_through, issued_through=issued_through, inputs_written=inputs_written
    )
    runnable = pending.runnable
    if not runnable:
        return []
    backlog = backlog_threshold is not None and pending.count >= backlog_threshold
    batches: list[EpochBatch] = []
    start = done_through + 1
    if not backlog:
        for epoch in runnable:
            batches.append(EpochBatch(start, epoch))
            start = epoch + 1
        return batches
    last = runnable[-1]
    stops = sorted(recorded_slices)
    while start <= last:
        if max_batch is None:
            end = last
        else:
            within = bisect_right(runnable, start + max_batch - 1) - 1
            if within >= 0 and runnable[within] >= start:
                end = runnable[within]
            else:
                end = runnable[bisect_left(runnable, start)]
        recorded = [e for e in stops if start <= e < end]
        if recorded:
            end = recorded[0]
        batches.append(EpochBatch(start, end))
        start = end + 1
    return batches
