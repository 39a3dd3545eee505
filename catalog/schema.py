"""The catalog's tables: the schema of SCHEMA_VERSION, and nothing else.

A new catalog is created from :data:`metadata`; :mod:`catalog.migrations` brings an
older one here. JSON values are stored as text; timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from catalog.models import ResolutionAction
from consistency.records import PIPELINE_DEFAULT, EpochState, RevisionState
from consistency.timestamps import as_utc

_NAME_LENGTH = 128


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores them naive, in UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def _name_column(name: str, *args: Any, **kw: Any) -> sa.Column[str]:
    return sa.Column(name, sa.String(_NAME_LENGTH), *args, **kw)


def _epoch_column(name: str, *args: Any, **kw: Any) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger, *args, **kw)


def _pipeline_column() -> sa.Column[str]:
    # No foreign key: SQLite cannot add a referencing column with a non-NULL default, and
    # a v1 catalog gets this column by ALTER TABLE. The catalog creates a pipeline's row
    # (under the write lock) before anything refers to it.
    return _name_column("pipeline", nullable=False, server_default=PIPELINE_DEFAULT)


def _serial_column(name: str) -> sa.Column[int]:
    # INTEGER on SQLite makes the id the rowid (autoincrementing); BIGSERIAL on PostgreSQL.
    return sa.Column(name, sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True)


metadata = sa.MetaData()

meta_table = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
META_RETENTION_POLICY = "retention_policy"
"""The catalog-wide default retention policy (JSON text) lives in ``meta``."""
META_EPOCH_HIGH_WATER = "epoch_high_water"
"""The newest epoch id issued before a retired pipeline's epochs were deleted."""

pipelines_table = sa.Table(
    "pipelines",
    metadata,
    _name_column("name", primary_key=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("retention_policy", sa.Text),
)

tables_table = sa.Table(
    "tables",
    metadata,
    _name_column("name", primary_key=True),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("schema_json", sa.Text),
    sa.Column("partition_by", sa.Text, nullable=False),
    _epoch_column("first_epoch", nullable=False),
    # One column, so one writer per table is structural; checked under the write lock.
    _name_column("writer_job"),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Column("retired_at", UtcDateTime),
    sa.Index("ix_tables_pipeline", "pipeline"),
)

jobs_table = sa.Table(
    "jobs",
    metadata,
    _name_column("name", primary_key=True),
    _name_column("output", sa.ForeignKey("tables.name"), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    _name_column("source"),
    sa.Column("keys", sa.Text, nullable=False),
    sa.Column("side_outputs", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Column("retired_at", UtcDateTime),
    sa.Index("ix_jobs_pipeline", "pipeline"),
)

job_inputs_table = sa.Table(
    "job_inputs",
    metadata,
    _name_column("job", sa.ForeignKey("jobs.name", ondelete="CASCADE"), primary_key=True),
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
)

epochs_table = sa.Table(
    "epochs",
    metadata,
    # INTEGER on SQLite makes the id the rowid: no separate primary-key index.
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column("barrier_ts", UtcDateTime, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Index("ix_epochs_barrier_ts", "barrier_ts", "id"),
    sa.Index("ix_epochs_pipeline", "pipeline", "id"),
    sa.Index("ix_epochs_pipeline_barrier_ts", "pipeline", "barrier_ts", "id"),
)

source_slices_table = sa.Table(
    "source_slices",
    metadata,
    _name_column("source", primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("bounds", sa.Text, nullable=False),
    sa.Column("catch_up", sa.Boolean, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
)

_STATES = tuple(state.value for state in EpochState)


def _epoch_state_columns() -> list[sa.Column[Any]]:
    """One table's state at one epoch: the columns of the current states, their history
    and the states a recompute's switch replaced."""
    return [
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("delta_version", sa.BigInteger),
        _name_column("job"),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("generation", sa.BigInteger),
        _epoch_column("coalesced_into"),
        sa.Column("rows", sa.BigInteger),
        sa.Column("reason", sa.Text),
    ]


table_epochs_table = sa.Table(
    "table_epochs",
    metadata,
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    *_epoch_state_columns(),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.CheckConstraint(f"state IN {_STATES!r}", name="ck_table_epochs_state"),
    # max(epoch) for one (table, state) is one descent of this index: latest_written and
    # latest_processed stay O(log history) per table.
    sa.Index("ix_table_epochs_state", "table_name", "state", "epoch"),
    sqlite_with_rowid=False,
)

epoch_history_table = sa.Table(
    "epoch_history",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    _name_column("table_name", nullable=False),
    _epoch_column("epoch", nullable=False),
    *_epoch_state_columns(),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.Index("ix_epoch_history_table_epoch", "table_name", "epoch"),
)

commits_table = sa.Table(
    "commits",
    metadata,
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("barrier_ts", UtcDateTime, nullable=False),
    sa.Column("committed_at", UtcDateTime, nullable=False),
    _pipeline_column(),
    sa.Index("ix_commits_pipeline", "pipeline", "epoch"),
)

leases_table = sa.Table(
    "leases",
    metadata,
    _name_column("job", sa.ForeignKey("jobs.name"), primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.Column("acquired_at", UtcDateTime, nullable=False),
)

validations_table = sa.Table(
    "validations",
    metadata,
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("success", sa.Boolean, nullable=False),
    sa.Column("policy", sa.String(32), nullable=False),
    sa.Column("results", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
)

job_failures_table = sa.Table(
    "job_failures",
    metadata,
    _serial_column("id"),
    _name_column("job", sa.ForeignKey("jobs.name"), nullable=False),
    _name_column("pipeline", nullable=False),
    _epoch_column("epoch", sa.ForeignKey("epochs.id")),
    sa.Column("attempt", sa.Integer),
    sa.Column("error_class", sa.String(256), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("generation", sa.BigInteger),
    sa.Column("failed_at", UtcDateTime, nullable=False),
    # max(id) per job is one index descent: the newest failure per job
    # (the status report's) stays O(jobs * log failures).
    sa.Index("ix_job_failures_job", "job", "id"),
    sa.Index("ix_job_failures_epoch", "epoch", "id"),
)

_ACTIONS = tuple(action.value for action in ResolutionAction)

resolutions_table = sa.Table(
    "resolutions",
    metadata,
    _serial_column("id"),
    _name_column("table_name", sa.ForeignKey("tables.name"), nullable=False),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.CheckConstraint(f"action IN {_ACTIONS!r}", name="ck_resolutions_action"),
    sa.Index("ix_resolutions_table_epoch", "table_name", "epoch", "id"),
)

pins_table = sa.Table(
    "pins",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    _name_column("pipeline"),
    _epoch_column("epoch", sa.ForeignKey("epochs.id")),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False),
    sa.Index("ix_pins_epoch", "epoch", "expires_at"),
    sa.Index("ix_pins_expires_at", "expires_at"),
)

tags_table = sa.Table(
    "tags",
    metadata,
    _name_column("name", primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), nullable=False),
    _name_column("pipeline"),
    sa.Column("versions", sa.Text, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Index("ix_tags_epoch", "epoch"),
)

epoch_expiries_table = sa.Table(
    "epoch_expiries",
    metadata,
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("rule", sa.Text, nullable=False),
    sa.Column("expired_at", UtcDateTime, nullable=False),
)

_REVISION_STATES = tuple(state.value for state in RevisionState)

revisions_table = sa.Table(
    "revisions",
    metadata,
    _serial_column("id"),
    _pipeline_column(),
    sa.Column("tables", sa.Text, nullable=False),
    _epoch_column("from_epoch", nullable=False),
    _epoch_column("through_epoch"),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime),
    sa.Column("note", sa.Text),
    sa.CheckConstraint(f"state IN {_REVISION_STATES!r}", name="ck_revisions_state"),
    sa.Index("ix_revisions_pipeline", "pipeline", "id"),
)

# The epoch states a switched revision replaced: what readers resolved before the switch.
revision_states_table = sa.Table(
    "revision_states",
    metadata,
    sa.Column(
        "revision",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        sa.ForeignKey("revisions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    _name_column("table_name", primary_key=True),
    _epoch_column("epoch", primary_key=True),
    *_epoch_state_columns(),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)
