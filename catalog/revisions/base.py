"""Revisions (etl recompute): begun, switched at once, or discarded."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from catalog.models import SealRequest
from consistency.records import Revision, TableEpoch


class RevisionStore(ABC):
    """Revisions (etl recompute): begun, switched at once, or discarded."""

    @abstractmethod
    def begin_revision(
        self,
        *,
        pipeline: str,
        tables: Sequence[str],
        from_epoch: int,
        reason: str,
        actor: str,
        owner: str,
    ) -> Revision:
        """Record a recompute of ``tables`` from ``from_epoch`` on, BUILDING. Nothing a
        reader resolves changes until :meth:`switch_revision`."""

    @abstractmethod
    def switch_revision(
        self,
        revision: int,
        *,
        generations: Mapping[str, int],
        seals: Sequence[SealRequest],
        schemas: Mapping[str, str] | None = None,
    ) -> Revision:
        """Switch a BUILDING revision, in one transaction: for every table of it, its epoch
        states from the revision's first epoch through the newest epoch ``seals`` name for
        it are replaced by ``seals`` (WRITTEN, with ``first_epoch``..epoch-1 COALESCED), the
        replaced states are kept with the revision (:meth:`superseded_states`), and the
        pipeline's COMMIT manifests of those epochs are recorded again.

        ``generations``: the lease generation the recompute holds for every job writing
        the tables (StaleLeaseError if one was taken over: a recompute that lost a lease
        never switches). ``schemas``: the tables' Delta schemas (JSON) after it, recorded in
        the same transaction. RevisionStateError unless BUILDING.
        """

    @abstractmethod
    def discard_revision(self, revision: int, *, note: str) -> Revision:
        """Mark a BUILDING revision DISCARDED (its Delta versions were rolled back)."""

    @abstractmethod
    def revisions(self, *, pipeline: str | None = None, table: str | None = None) -> list[Revision]:
        """Revisions (of ``pipeline``, or recomputing ``table``, when given), oldest first."""

    @abstractmethod
    def superseded_states(self, revision: int) -> list[TableEpoch]:
        """The epoch states a switched revision replaced: what readers saw before it."""
