"""Catalog rows as values, for the rows both the SQL stores and the SQLite snapshot reads
(:mod:`catalog.sqlite_reads`) read: tables, epochs, epoch states, pins, tags, revisions.
A row is anything with the table's column names as attributes; its datetimes are aware
UTC. (Rows only one store reads are converted in that store.)"""

from __future__ import annotations

import json
from typing import Any

from catalog.models import Pin, TableInfo, Tag
from consistency.records import Epoch, EpochState, Revision, RevisionState, TableEpoch


def table_info(row: Any) -> TableInfo:
    return TableInfo(
        name=row.name,
        location=row.location,
        kind=row.kind,
        schema_json=row.schema_json,
        partition_by=tuple(json.loads(row.partition_by)),
        first_epoch=row.first_epoch,
        writer_job=row.writer_job,
        created_at=row.created_at,
        pipeline=row.pipeline,
        retired_at=row.retired_at,
    )


def epoch(row: Any) -> Epoch:
    return Epoch(
        id=row.id, barrier_ts=row.barrier_ts, created_at=row.created_at, pipeline=row.pipeline
    )


TABLE_EPOCH_COLUMNS = (
    "table_name",
    "epoch",
    "state",
    "delta_version",
    "job",
    "attempt",
    "generation",
    "coalesced_into",
    "rows",
    "reason",
    "updated_at",
)
"""The columns of ``table_epochs`` in :class:`TableEpoch`'s field order."""


def table_epoch(row: Any) -> TableEpoch:
    """A row of :data:`TABLE_EPOCH_COLUMNS`, in their order."""
    # On every snapshot's path: positional unpacking is several times faster than named
    # row access.
    table, epoch, state, *rest = row
    return TableEpoch(table, epoch, EpochState(state), *rest)


def pin(row: Any) -> Pin:
    return Pin(
        id=row.id,
        pipeline=row.pipeline,
        epoch=row.epoch,
        versions=json.loads(row.versions),
        holder=row.holder,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def tag(row: Any) -> Tag:
    return Tag(
        name=row.name,
        epoch=row.epoch,
        versions=json.loads(row.versions),
        pipeline=row.pipeline,
        created_at=row.created_at,
    )


def revision(row: Any) -> Revision:
    return Revision(
        id=row.id,
        pipeline=row.pipeline,
        tables=tuple(json.loads(row.tables)),
        from_epoch=row.from_epoch,
        reason=row.reason,
        actor=row.actor,
        owner=row.owner,
        state=RevisionState(row.state),
        started_at=row.started_at,
        finished_at=row.finished_at,
        through_epoch=row.through_epoch,
        note=row.note,
    )


def json_text(value: object) -> str:
    """``value`` as the catalog stores JSON: compact, keys sorted."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
