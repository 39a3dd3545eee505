"""Resolving a cut: the tables of a read (named, or those a SQL text reads) at a
consistency level, as the catalog registers them, and the retention pin protecting it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from catalog import CatalogReadOnlyError, CatalogReads, TableInfo
from consistency import (
    EpochHistory,
    HistoryAt,
    Level,
    Snapshot,
    parse_level,
    resolve_snapshot,
    switched_after,
)
from etl.errors import SqlTablesError

if TYPE_CHECKING:
    from etl.retention.pins import PinHolder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedCut:
    """A resolved snapshot and its tables as the catalog registers them (one lookup)."""

    snapshot: Snapshot
    tables: Mapping[str, TableInfo]
    """The cut's tables by name (the catalog's spelling), in the order the read named them."""


def resolve_cut(
    catalog: CatalogReads,
    tables_or_sql: str | Iterable[str],
    level: Level | str = Level.REPEATABLE_READ,
    *,
    as_of_epoch: int | None = None,
    as_of_time: datetime | None = None,
    as_of_tag: str | None = None,
) -> ResolvedCut:
    """The cut of tables (or of the tables a SQL text names) at a level; see
    :func:`etl.reader.snapshot`. Table names match the catalog's without regard to case."""
    if as_of_tag is not None and (as_of_epoch is not None or as_of_time is not None):
        raise SqlTablesError(
            sql=str(tables_or_sql), problem="give one of as_of_epoch, as_of_time, as_of_tag"
        )
    # The catalog as readers saw it then: a cut named before a recompute's switch reads
    # the revision it named (docs/design.md, "Recompute: revisions").
    seen_at = as_of_time
    if as_of_tag is not None:
        tag = catalog.get_tag(as_of_tag)
        as_of_epoch, seen_at = tag.epoch, tag.created_at
    if isinstance(tables_or_sql, str):
        if looks_like_sql(tables_or_sql):
            from etl.reader.translation import tables_in_sql

            tables = tables_in_sql(tables_or_sql)
        else:
            tables = [tables_or_sql]
        where = tables_or_sql
    else:
        tables = list(tables_or_sql)
        where = ", ".join(tables)
    registered = {t.name: t for t in catalog.list_tables()}
    by_lower = {name.lower(): name for name in registered}
    unknown = [t for t in tables if t not in registered and t.lower() not in by_lower]
    if unknown:
        raise SqlTablesError(
            sql=where,
            problem=f"unknown table(s) {unknown}; the catalog has {sorted(registered)}",
        )
    tables = list(dict.fromkeys(t if t in registered else by_lower[t.lower()] for t in tables))
    parsed = parse_level(level)
    latest_versions = None
    if parsed is Level.READ_UNCOMMITTED:
        from etl.delta import table_version

        latest_versions = {t: table_version(registered[t].location) for t in tables}
    history: EpochHistory = catalog
    if seen_at is not None and switched_after(catalog.revisions(), seen_at):
        history = HistoryAt(catalog, seen_at)
    resolved = resolve_snapshot(
        history,
        tables,
        parsed,
        latest_versions=latest_versions,
        as_of_epoch=as_of_epoch,
        as_of_time=as_of_time,
        pipelines={t: registered[t].pipeline for t in tables},
    )
    return ResolvedCut(snapshot=resolved, tables={t: registered[t] for t in tables})


def pin_cut(catalog: CatalogReads, cut: ResolvedCut) -> PinHolder | None:
    """The retention pin of the cut; None when nothing is to be pinned, or when the
    catalog is read-only (a read-only warehouse is still readable: a file that maintenance
    elsewhere removed meanwhile fails the read, it never changes the answer)."""
    from etl.retention.pins import PinHolder

    resolved = cut.snapshot
    if not any(v is not None for v in resolved.versions.values()):
        return None
    pipelines = {info.pipeline for info in cut.tables.values()}
    try:
        return PinHolder(
            catalog,
            versions=resolved.versions,
            epoch=resolved.epoch,
            epochs=resolved.epochs,
            pipeline=pipelines.pop() if len(pipelines) == 1 else None,
        )
    except CatalogReadOnlyError:
        log.info("the catalog is read-only: this snapshot holds no retention pin")
        return None


def looks_like_sql(text: str) -> bool:
    """Whether a read names a SQL query (it has a space) rather than one table."""
    return any(ch.isspace() for ch in text.strip())


__all__ = ["ResolvedCut", "looks_like_sql", "pin_cut", "resolve_cut"]
