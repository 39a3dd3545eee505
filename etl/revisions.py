"""Revisions in flight: which a live ``etl recompute`` builds, and which a killed one left
BUILDING (docs/design.md, "Recompute: revisions"). No Spark: a run and ``etl recover``
ask before they start it."""

from __future__ import annotations

from datetime import UTC, datetime

from catalog import Catalog, Revision, RevisionState
from etl.errors import RecomputeError
from etl.leases import owner_state
from etl.pipeline import Job, Pipeline


def writer_of(pipeline: Pipeline, table: str) -> Job:
    """The job that writes ``table`` (its output or a side output)."""
    for job in pipeline.ordered_jobs():
        if table in pipeline.tables_of(job):
            return job
    raise RecomputeError(
        f"table {table!r} is not written by a job of pipeline {pipeline.name!r}; "
        f"its tables: {sorted(t for j in pipeline.ordered_jobs() for t in pipeline.tables_of(j))}",
        tables=(table,),
    )


def _is_alive(catalog: Catalog, revision: Revision) -> bool:
    """Whether the recompute building ``revision`` may still be at work: its process runs
    on this host, or (on another host) it holds a live lease of one of its jobs."""
    state = owner_state(revision.owner)
    if state != "unknown":
        return state == "alive"
    now = datetime.now(UTC)
    return any(
        (lease := catalog.get_lease(job)) is not None
        and lease.owner == revision.owner
        and lease.expires_at > now
        for job in {t.writer_job for t in map(catalog.get_table, revision.tables) if t.writer_job}
    )


def building_revisions(catalog: Catalog, pipeline: str) -> list[Revision]:
    """The pipeline's revisions BUILDING (a recompute at work, or one killed)."""
    return [r for r in catalog.revisions(pipeline=pipeline) if r.state is RevisionState.BUILDING]


def abandoned_revisions(catalog: Catalog, pipeline: str) -> list[Revision]:
    """The pipeline's revisions BUILDING whose recompute is gone."""
    return [r for r in building_revisions(catalog, pipeline) if not _is_alive(catalog, r)]


def requested_jobs(catalog: Catalog, pipeline: Pipeline, name: str, *, owner: str) -> set[str]:
    """The jobs of pipeline ``name`` that a live recompute other than ``owner`` builds a
    revision of: a run leaves them to it until the revision is no longer BUILDING."""
    return {
        writer_of(pipeline, table).name
        for revision in building_revisions(catalog, name)
        if revision.owner != owner and _is_alive(catalog, revision)
        for table in revision.tables
    }


__all__ = [
    "abandoned_revisions",
    "building_revisions",
    "requested_jobs",
    "writer_of",
]
