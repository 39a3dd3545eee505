"""What a snapshot read asks of the catalog, and how a read-only command opens it.

:class:`CatalogReads` is the part of :class:`catalog.base.Catalog` a snapshot reads: the
tables, the epoch history the consistency rules resolve a cut against, tags and
revisions for time travel, and the retention pin that protects the cut while it is read.
Every Catalog is one. :func:`open_for_reads` opens the embedded SQLite catalog without
SQLAlchemy (:mod:`catalog.sqlite_reads`) and any other catalog as a Catalog.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol

from catalog.models import EpochExpiry, Pin, TableInfo, Tag
from consistency.records import Epoch, Revision, TableEpoch


class CatalogReads(Protocol):
    """The catalog as a snapshot read uses it; each method as in :class:`catalog.base.Catalog`."""

    url: str

    def list_tables(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[TableInfo]: ...

    def get_table(self, name: str) -> TableInfo: ...

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]: ...

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]: ...

    def get_epoch(self, epoch: int) -> Epoch: ...

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None: ...

    def get_tag(self, name: str) -> Tag: ...

    def revisions(
        self, *, pipeline: str | None = None, table: str | None = None
    ) -> list[Revision]: ...

    def superseded_states(self, revision: int) -> list[TableEpoch]: ...

    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]: ...

    def expiry_of(self, epoch: int) -> EpochExpiry | None: ...

    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin: ...

    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin: ...

    def release_pin(self, pin: Pin) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> CatalogReads: ...

    def __exit__(self, *exc: object) -> None: ...


def open_for_reads(
    url: str | None = None, *, warehouse: str | os.PathLike[str] | None = None
) -> CatalogReads:
    """The existing catalog at ``url`` (or in ``warehouse``, as :func:`load_catalog` finds
    it) for snapshot reads; nothing is created.

    A SQLite file this process may write, at this schema version, is read without
    SQLAlchemy; everything else (PostgreSQL, a read-only file, a missing catalog, another
    schema version) is opened by :func:`catalog.load_catalog` with ``create=False``, which
    also raises its errors.
    """
    from catalog.sqlite_reads import SqliteReads, sqlite_file

    path = sqlite_file(url, warehouse=warehouse)
    if path is not None:
        reads = SqliteReads.open(path)
        if reads is not None:
            return reads
    from catalog.factory import load_catalog

    return load_catalog(url, warehouse=warehouse, create=False)


__all__ = ["CatalogReads", "open_for_reads"]
