"""Choosing the Delta version of each table for a read at a consistency level.

docs/design.md, "Reading: three consistency levels". :func:`resolve_snapshot` turns a set
of tables and a level into a :class:`~consistency.models.Snapshot`; it reads epoch
states through an :class:`EpochHistory` (the catalog implements it) and never touches
Delta itself: for read-uncommitted the caller supplies each table's latest version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from consistency.errors import (
    EpochExpiredError,
    EpochNotReadableError,
    NoAlignedCutError,
    NoCommonEpochError,
    NoEpochAtTimeError,
    SnapshotRequestError,
    UnknownEpochError,
)
from consistency.levels import parse_level
from consistency.models import Level, PipelineCut, Snapshot
from consistency.records import Epoch, EpochState, TableEpoch


class EpochHistory(Protocol):
    """The part of the catalog a snapshot is resolved against (see catalog.base.Catalog)."""

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        """Per table, the newest WRITTEN epoch (at or before an epoch when given); tables
        without one are absent."""
        ...

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        """The state of one epoch in each table; tables without one are absent."""
        ...

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        """The newest epoch (of ``pipeline`` when given) whose barrier timestamp is at or
        before ``ts``."""
        ...

    def get_epoch(self, epoch: int) -> Epoch:
        """An issued epoch; raises UnknownEpochError otherwise."""
        ...


def resolve_snapshot(
    history: EpochHistory,
    tables: Iterable[str],
    level: Level | str = Level.REPEATABLE_READ,
    *,
    latest_versions: Mapping[str, int | None] | None = None,
    as_of_epoch: int | None = None,
    as_of_time: datetime | None = None,
    pipelines: Mapping[str, str] | None = None,
) -> Snapshot:
    """Resolve the Delta version of every table in ``tables`` for a read at ``level``.

    - read-uncommitted: ``latest_versions`` (required; the caller reads them from each
      Delta log, None for a table without a commit). No epoch.
    - read-committed: each table at the version of its own latest WRITTEN epoch
      (version None for a table never written); ``Snapshot.epochs`` says which epoch.
    - repeatable-read: one epoch E, the newest that every table has WRITTEN, and each
      table at v(table, E). Raises NoCommonEpochError when there is none.
    - ``as_of_epoch=E``: repeatable-read at exactly E; raises EpochNotReadableError for
      the first table without E WRITTEN (COALESCED, PROCESSED, ...).
    - ``as_of_time=t``: repeatable-read at the newest common WRITTEN epoch whose barrier
      timestamp is at or before t; raises NoEpochAtTimeError when no epoch is that old.

    Time travel is repeatable-read only: ``level`` must then be repeatable-read (the
    default). Raises SnapshotRequestError for an empty or duplicated table list, both
    ``as_of_*`` options, time travel at another level, or read-uncommitted without a
    version for every table.

    ``pipelines`` maps each table to its pipeline. At repeatable-read over tables of
    several pipelines, see :func:`_across_pipelines`; ``as_of_epoch`` is then refused
    (an epoch belongs to one pipeline). Other levels are per table anyway.
    """
    names = _table_list(tables)
    level = parse_level(level)
    if as_of_epoch is not None and as_of_time is not None:
        raise SnapshotRequestError("give as_of_epoch or as_of_time, not both", tables=names)
    if (as_of_epoch is not None or as_of_time is not None) and level is not Level.REPEATABLE_READ:
        raise SnapshotRequestError(
            f"time travel (as_of_epoch / as_of_time) reads a consistent cut, which is "
            f"{Level.REPEATABLE_READ}; it cannot be combined with {level}",
            tables=names,
        )

    if level is Level.READ_UNCOMMITTED:
        return _read_uncommitted(names, latest_versions)
    if level is Level.READ_COMMITTED:
        return _read_committed(history, names)
    groups = _by_pipeline(names, pipelines or {})
    if len(groups) > 1:
        if as_of_epoch is not None:
            spans = "; ".join(f"{p}: {', '.join(t)}" for p, t in groups.items())
            raise SnapshotRequestError(
                f"epoch {as_of_epoch} belongs to one pipeline, and these tables span several "
                f"({spans}); read them as of a time instead (as_of_time, --as-of-time): each "
                "pipeline is then read at its newest cut at or before it",
                tables=names,
            )
        return _across_pipelines(history, names, groups, as_of_time=as_of_time)
    if as_of_epoch is not None:
        (pipeline,) = groups
        owner = _pipeline_of(history, as_of_epoch) if pipeline else None
        if owner is not None and owner != pipeline:
            raise SnapshotRequestError(
                f"epoch {as_of_epoch} belongs to pipeline {owner!r}, and {', '.join(names)} "
                f"to pipeline {pipeline!r}: an epoch is a cut of its own pipeline only; give "
                f"one of {pipeline!r}'s epochs (etl epochs --pipeline {pipeline}), or read as "
                "of a time (--as-of-time)",
                tables=names,
            )
        _check_not_expired(history, as_of_epoch)
        return _at_epoch(history, names, as_of_epoch)
    bound = None
    if as_of_time is not None:
        # Only the tables' own pipeline's epochs: another pipeline's barrier clock (event
        # time, say) does not order this one's epoch ids.
        (pipeline,) = groups
        at_time = history.epoch_at_or_before(as_of_time, pipeline=pipeline or None)
        if at_time is None:
            raise NoEpochAtTimeError(as_of_time)
        bound = at_time.id
    resolved = _repeatable_read(history, names, at_or_before=bound)
    if resolved.epoch is not None:
        _check_not_expired(history, resolved.epoch)
    return resolved


def _pipeline_of(history: EpochHistory, epoch: int) -> str | None:
    """The pipeline that opened ``epoch``; None for an epoch never issued (the read then
    fails as for any unknown epoch)."""
    try:
        return history.get_epoch(epoch).pipeline
    except UnknownEpochError:
        return None


def _by_pipeline(
    names: tuple[str, ...], pipelines: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    """The tables grouped by pipeline, pipelines by name (tables without one: one group)."""
    groups: dict[str, list[str]] = {}
    for table in names:
        groups.setdefault(pipelines.get(table, ""), []).append(table)
    return {p: tuple(groups[p]) for p in sorted(groups)}


def _across_pipelines(
    history: EpochHistory,
    names: tuple[str, ...],
    groups: Mapping[str, tuple[str, ...]],
    *,
    as_of_time: datetime | None,
) -> Snapshot:
    """Repeatable-read over tables of several pipelines, aligned by barrier time.

    Epochs of different pipelines never coincide, so no one epoch can hold them all. Each
    pipeline is read at its newest epoch that all of its requested tables have WRITTEN
    and whose barrier timestamp is at or before T, where T is ``as_of_time`` or else the
    oldest of the pipelines' latest such cuts' barriers (so one pipeline is at its latest
    cut and none is newer than it). Raises NoAlignedCutError naming the pipeline that has
    no cut at or before T, and EpochExpiredError for an expired cut, as for one pipeline.
    """
    latest: dict[str, Snapshot] = {}
    reference: str | None = None
    if as_of_time is None:
        latest = {p: _repeatable_read(history, t, at_or_before=None) for p, t in groups.items()}
        reference = min(latest, key=lambda p: (_barrier(latest[p]), p))
        aligned_at = _barrier(latest[reference])
    else:
        aligned_at = as_of_time
    cuts: list[PipelineCut] = []
    versions: dict[str, int | None] = {}
    for pipeline, tables in groups.items():
        resolved = latest.get(pipeline)
        if resolved is None or _barrier(resolved) > aligned_at:
            resolved = _cut_at_or_before(history, pipeline, tables, aligned_at)
        if resolved is None:
            raise NoAlignedCutError(
                pipeline=pipeline,
                tables=tables,
                aligned_at=aligned_at,
                reference=reference,
                reference_epoch=latest[reference].epoch if reference is not None else None,
            )
        assert resolved.epoch is not None
        _check_not_expired(history, resolved.epoch)
        cuts.append(PipelineCut(pipeline, resolved.epoch, _barrier(resolved), tables))
        versions.update(resolved.versions)
    epochs = {t: cut.epoch for cut in cuts for t in cut.tables}
    return Snapshot(
        level=Level.REPEATABLE_READ,
        versions={t: versions[t] for t in names},
        barrier_ts=min(cut.barrier_ts for cut in cuts),
        epochs={t: epochs[t] for t in names},
        pipelines=tuple(cuts),
        aligned_at=aligned_at,
    )


def _cut_at_or_before(
    history: EpochHistory, pipeline: str, tables: tuple[str, ...], ts: datetime
) -> Snapshot | None:
    """The pipeline's newest common WRITTEN epoch of ``tables`` with a barrier at or before
    ``ts``, or None."""
    bound = history.epoch_at_or_before(ts, pipeline=pipeline)
    if bound is None:
        return None
    try:
        return _repeatable_read(history, tables, at_or_before=bound.id)
    except NoCommonEpochError:
        return None


def _barrier(resolved: Snapshot) -> datetime:
    assert resolved.barrier_ts is not None
    return resolved.barrier_ts


def _check_not_expired(history: EpochHistory, epoch: int) -> None:
    """An expired epoch is an error naming it and its rule (docs/design.md, "Time travel"),
    never a wrong answer or a storage error. Histories without expiries (test fakes) pass."""
    expiry_of = getattr(history, "expiry_of", None)
    expiry = expiry_of(epoch) if expiry_of is not None else None
    if expiry is not None:
        raise EpochExpiredError(epoch=epoch, rule=expiry.rule, expired_at=expiry.expired_at)


def _table_list(tables: Iterable[str]) -> tuple[str, ...]:
    if isinstance(tables, str):
        # A bare string would otherwise be read as a list of one-letter tables.
        tables = (tables,)
    names = tuple(tables)
    if not names:
        raise SnapshotRequestError("no tables given; name at least one table to read")
    duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
    if duplicates:
        raise SnapshotRequestError(
            f"tables named more than once: {', '.join(duplicates)}", tables=duplicates
        )
    return names


def _read_uncommitted(
    names: tuple[str, ...], latest_versions: Mapping[str, int | None] | None
) -> Snapshot:
    latest_versions = latest_versions or {}
    missing = [t for t in names if t not in latest_versions]
    if missing:
        raise SnapshotRequestError(
            f"{Level.READ_UNCOMMITTED} needs the latest Delta version of every table; "
            f"missing for {', '.join(missing)} (read them from the Delta logs)",
            tables=missing,
        )
    return Snapshot(
        level=Level.READ_UNCOMMITTED,
        versions={t: latest_versions[t] for t in names},
        epochs=dict.fromkeys(names),
    )


def _read_committed(history: EpochHistory, names: tuple[str, ...]) -> Snapshot:
    latest = history.latest_written(names)
    return Snapshot(
        level=Level.READ_COMMITTED,
        versions={t: latest[t].delta_version if t in latest else None for t in names},
        epochs={t: latest[t].epoch if t in latest else None for t in names},
    )


def _repeatable_read(
    history: EpochHistory, names: tuple[str, ...], *, at_or_before: int | None
) -> Snapshot:
    # Every common WRITTEN epoch C satisfies C <= E at each step: initially E is the
    # smallest "latest WRITTEN", and a table's newest WRITTEN epoch at or before E is
    # >= C. E strictly decreases until every table answers E itself, which is then the
    # newest common epoch. Each step is one latest_written call (O(tables * log n)) for
    # the tables not at E yet: a table at E stays there.
    start = history.latest_written(names, at_or_before=at_or_before)
    rows = dict(start)
    while True:
        if len(rows) < len(names):
            raise NoCommonEpochError(
                names,
                {t: start[t].epoch if t in start else None for t in names},
                at_or_before=at_or_before,
            )
        epoch = min(row.epoch for row in rows.values())
        ahead = [t for t in names if rows[t].epoch != epoch]
        if not ahead:
            break
        found = history.latest_written(ahead, at_or_before=epoch)
        rows = {t: row for t, row in rows.items() if t not in ahead} | found
    return Snapshot(
        level=Level.REPEATABLE_READ,
        versions={t: rows[t].delta_version for t in names},
        epoch=epoch,
        barrier_ts=history.get_epoch(epoch).barrier_ts,
        epochs=dict.fromkeys(names, epoch),
    )


def _readable(history: EpochHistory, names: tuple[str, ...], epoch: int) -> bool:
    """Whether every table has ``epoch`` WRITTEN and it has not expired."""
    states = history.states_at(names, epoch)
    if any(t not in states or states[t].state != EpochState.WRITTEN for t in names):
        return False
    try:
        _check_not_expired(history, epoch)
    except EpochExpiredError:
        return False
    return True


def _readable_before(
    history: EpochHistory, names: tuple[str, ...], epoch: int, *, tries: int = 20
) -> int | None:
    """The newest epoch before ``epoch`` that every table has WRITTEN and that has not
    expired (looking past at most ``tries`` expired ones), or None."""
    below = epoch - 1
    for _ in range(tries):
        if below < 1:
            return None
        try:
            found = _repeatable_read(history, names, at_or_before=below).epoch
        except NoCommonEpochError:
            return None
        assert found is not None
        try:
            _check_not_expired(history, found)
        except EpochExpiredError:
            below = found - 1
            continue
        return found
    return None


def _at_epoch(history: EpochHistory, names: tuple[str, ...], epoch: int) -> Snapshot:
    barrier_ts = history.get_epoch(epoch).barrier_ts
    states = history.states_at(names, epoch)
    for table in names:
        row = states.get(table)
        if row is None or row.state != EpochState.WRITTEN:
            into = row.coalesced_into if row is not None else None
            raise EpochNotReadableError(
                table,
                epoch,
                str(row.state) if row is not None else None,
                coalesced_into=into,
                readable_before=_readable_before(history, names, epoch),
                readable_after=(
                    into if into is not None and _readable(history, names, into) else None
                ),
            )
    return Snapshot(
        level=Level.REPEATABLE_READ,
        versions={t: states[t].delta_version for t in names},
        epoch=epoch,
        barrier_ts=barrier_ts,
        epochs=dict.fromkeys(names, epoch),
    )
