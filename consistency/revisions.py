"""Time travel across recomputes: the epoch states as readers resolved them at a past time.

docs/design.md, "Recompute: revisions". A revision's switch replaces the states of its
tables' epochs from its first epoch through its last; the replaced states are kept with it
(``Catalog.superseded_states``). Before the switch readers resolved those: so a read as of
a time before a switch resolves against them, and never mixes the two revisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from consistency.records import Epoch, EpochState, Revision, RevisionState, TableEpoch
from consistency.resolve import EpochHistory
from consistency.timestamps import as_utc


class RevisionStore(EpochHistory, Protocol):
    """What :class:`HistoryAt` needs of the catalog besides an :class:`EpochHistory`."""

    def revisions(
        self, *, pipeline: str | None = None, table: str | None = None
    ) -> list[Revision]: ...

    def superseded_states(self, revision: int) -> list[TableEpoch]: ...

    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]: ...


class HistoryAt:
    """An :class:`EpochHistory` as it was at ``at``: the states revisions switched after it
    replaced are read back in place of the states they recorded."""

    def __init__(self, catalog: RevisionStore, at: datetime) -> None:
        self._catalog = catalog
        at = as_utc(at)
        later = [
            r
            for r in catalog.revisions()
            if r.state is RevisionState.SWITCHED
            and r.finished_at is not None
            and as_utc(r.finished_at) > at
        ]
        # The earliest revision after ``at`` that covers (table, epoch) replaced the state
        # readers saw at ``at``; later ones replaced that revision's own states.
        self._replaced: dict[str, list[tuple[int, int, dict[int, TableEpoch]]]] = {}
        for revision in sorted(later, key=lambda r: r.id):
            states: dict[str, dict[int, TableEpoch]] = {t: {} for t in revision.tables}
            for state in catalog.superseded_states(revision.id):
                states.setdefault(state.table, {})[state.epoch] = state
            through = revision.through_epoch or revision.from_epoch
            for table, by_epoch in states.items():
                self._replaced.setdefault(table, []).append(
                    (revision.from_epoch, through, by_epoch)
                )

    def _state(self, table: str, epoch: int, current: TableEpoch | None) -> TableEpoch | None:
        for first, last, by_epoch in self._replaced.get(table, ()):
            if first <= epoch <= last:
                return by_epoch.get(epoch)
        return current

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        tables = list(tables)
        current = self._catalog.states_at(tables, epoch)
        found = {t: self._state(t, epoch, current.get(t)) for t in tables}
        return {t: s for t, s in found.items() if s is not None}

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        tables = list(tables)
        plain = [t for t in tables if t not in self._replaced]
        result = self._catalog.latest_written(plain, at_or_before=at_or_before) if plain else {}
        for table in (t for t in tables if t in self._replaced):
            rows = {s.epoch: s for s in self._catalog.table_epochs(table, up_to=at_or_before)}
            for _first, _last, by_epoch in self._replaced[table]:
                for epoch, state in by_epoch.items():
                    if at_or_before is None or epoch <= at_or_before:
                        rows.setdefault(epoch, state)
            written = [
                seen
                for epoch in sorted(rows, reverse=True)
                if (seen := self._state(table, epoch, rows[epoch])) is not None
                and seen.state is EpochState.WRITTEN
            ]
            if written:
                result[table] = written[0]
        return result

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        return self._catalog.epoch_at_or_before(ts, pipeline=pipeline)

    def get_epoch(self, epoch: int) -> Epoch:
        return self._catalog.get_epoch(epoch)

    def __getattr__(self, name: str) -> object:
        # Expiry and the other reads resolution may make are the catalog's, unchanged.
        return getattr(self._catalog, name)


def switched_after(revisions: Sequence[Revision], at: datetime) -> bool:
    """Whether a revision was switched after ``at`` (a read as of ``at`` needs HistoryAt)."""
    return any(
        r.state is RevisionState.SWITCHED
        and r.finished_at is not None
        and as_utc(r.finished_at) > as_utc(at)
        for r in revisions
    )


__all__ = ["HistoryAt", "RevisionStore", "switched_after"]
