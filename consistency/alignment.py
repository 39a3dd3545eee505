"""Barrier alignment and backlog batching: which epochs a job may process next, in which batches.

docs/design.md, "An epoch's life in one table": a job starts epoch T only when every input
has T WRITTEN (barrier alignment), and a job far behind may process epochs a..b as one
batch and one Delta commit (backlog mode, FLIP-327), after which only b is WRITTEN and
a..b-1 are COALESCED.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from consistency.errors import BatchPlanError
from consistency.models import EpochBatch


@dataclass(frozen=True)
class PendingEpochs:
    """The epochs a job has not sealed yet and may process now.

    Epoch ids are one sequence per catalog, shared by every pipeline: a job sees only its
    pipeline's epochs (``issued``), which need not be contiguous ids.
    """

    done_through: int
    """The output's last sealed (WRITTEN or COALESCED) epoch, or its first epoch - 1."""
    horizon: int
    """No epoch after this one can run yet: the newest issued epoch for a source job, the
    smallest of the inputs' newest WRITTEN epochs for a derived job."""
    runnable: Sequence[int]
    """Ascending epochs in (done_through, horizon] that every input has WRITTEN. A batch
    may only end at one of them."""
    pending: Sequence[int] = ()
    """Ascending: the pipeline's issued epochs in (done_through, horizon]."""

    @property
    def count(self) -> int:
        """How many epochs are pending up to the horizon (runnable or not)."""
        return len(self.pending)


def pending_epochs(
    *,
    done_through: int,
    issued: Collection[int],
    inputs_written: Mapping[str, Collection[int]] | None,
) -> PendingEpochs:
    """The pending epochs of a job and which of them are runnable.

    ``issued`` holds the epoch ids the job's pipeline has issued (any superset of those
    after ``done_through`` will do; ids of other pipelines must not be in it).
    ``inputs_written`` maps each input table to its WRITTEN epochs (any superset of those
    after ``done_through`` will do); None or empty means a source job, for which every
    issued epoch is runnable.
    """
    if issued and done_through > max(issued):
        raise BatchPlanError(
            f"the output is sealed through epoch {done_through}, after the newest issued "
            f"epoch {max(issued)}; read both from the same catalog"
        )
    own = sorted(e for e in set(issued) if e > done_through)
    if not own:
        return PendingEpochs(done_through=done_through, horizon=done_through, runnable=())
    newest = own[-1]
    if not inputs_written:
        return PendingEpochs(
            done_through=done_through, horizon=newest, runnable=tuple(own), pending=tuple(own)
        )
    written = [set(epochs) for epochs in inputs_written.values()]
    if not all(written):
        return PendingEpochs(done_through=done_through, horizon=done_through, runnable=())
    horizon = max(done_through, min(newest, *(max(epochs) for epochs in written)))
    pending = tuple(e for e in own if e <= horizon)
    runnable = tuple(e for e in pending if all(e in epochs for epochs in written))
    return PendingEpochs(
        done_through=done_through, horizon=horizon, runnable=runnable, pending=pending
    )


def plan_batches(
    *,
    done_through: int,
    issued: Collection[int],
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

    Everything counts in the pipeline's own epochs (``issued``): a batch starts at the
    pipeline's first epoch after the previous batch (ids of other pipelines in between
    are nobody's business here), the batches are contiguous in the pipeline's epochs
    from the first one after ``done_through``, and ``max_batch`` and
    ``backlog_threshold`` count the pipeline's epochs. See :func:`pending_epochs` for the
    other arguments.
    """
    for name, value in (("backlog_threshold", backlog_threshold), ("max_batch", max_batch)):
        if value is not None and value < 1:
            raise BatchPlanError(f"{name} must be at least 1, got {value}")
    pending = pending_epochs(
        done_through=done_through, issued=issued, inputs_written=inputs_written
    )
    runnable = pending.runnable
    if not runnable:
        return []
    own = list(pending.pending)
    position = {epoch: index for index, epoch in enumerate(own)}
    runnable_at = [position[e] for e in runnable]
    backlog = backlog_threshold is not None and pending.count >= backlog_threshold
    batches: list[EpochBatch] = []
    start = 0
    if not backlog:
        for epoch in runnable:
            batches.append(EpochBatch(own[start], epoch))
            start = position[epoch] + 1
        return batches
    last = runnable_at[-1]
    stops = sorted(position[e] for e in set(recorded_slices) if e in position)
    while start <= last:
        if max_batch is None:
            end = last
        else:
            within = bisect_right(runnable_at, start + max_batch - 1) - 1
            if within >= 0 and runnable_at[within] >= start:
                end = runnable_at[within]
            else:
                end = runnable_at[bisect_left(runnable_at, start)]
        recorded = [e for e in stops if start <= e < end]
        if recorded:
            end = recorded[0]
        batches.append(EpochBatch(own[start], own[end]))
        start = end + 1
    return batches


def admission_order(ready: Mapping[str, EpochBatch], lineage: Sequence[str]) -> list[str]:
    """The order in which jobs with a runnable batch get a free slot: the oldest epoch
    first and, among batches starting at the same epoch, the job furthest downstream
    (latest in ``lineage``, an upstream-first order of the pipeline's jobs).

    With batches bounded to the cores, this lets an epoch leave a chain of jobs before
    the next epoch enters it: the lag of each epoch is the chain's run time, not the
    chain's run time stretched by every other job running at once. Starvation cannot
    occur: a job's epochs only become runnable when a job upstream of it sealed them.
    """
    depth = {job: index for index, job in enumerate(lineage)}
    unknown = [job for job in ready if job not in depth]
    if unknown:
        raise BatchPlanError(f"jobs {sorted(unknown)} are not in the lineage {list(lineage)}")
    return sorted(ready, key=lambda job: (ready[job].first, -depth[job]))


def inputs_sealed_through(
    inputs: Iterable[str], sealed_through: Mapping[str, int], epoch: int
) -> bool:
    """Whether a job reading ``inputs`` may have a new batch once a batch sealed
    ``epoch``: every input whose progress the caller follows (``sealed_through``: per
    table, the last epoch it saw sealed) is sealed through ``epoch``. An input it does not
    follow counts as sealed, so the job is planned and the catalog decides.

    A job reads each epoch of all its inputs at once (barrier alignment), so an input
    sealed through ``epoch`` while another is not yet makes no epoch runnable: a fan-in of
    five inputs needs planning once an epoch, not once per input."""
    return all(sealed_through.get(table, epoch) >= epoch for table in inputs)
