"""A frozen copy of the catalog's schema version 1, to build real v1 catalogs in tests.

Copied from catalog/sql.py as it was at SCHEMA_VERSION = 1. Never edit it to follow the
current schema: the migration tests upgrade what this creates.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from catalog.schema import UtcDateTime

_NAME_LENGTH = 128


def _name_column(name: str, *args: Any, **kw: Any) -> sa.Column[str]:
    return sa.Column(name, sa.String(_NAME_LENGTH), *args, **kw)


def _epoch_column(name: str, *args: Any, **kw: Any) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger, *args, **kw)


metadata = sa.MetaData()

meta_table = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
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
    sa.Index("ix_epochs_barrier_ts", "barrier_ts", "id"),
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

_STATES = ("PROCESSED", "WRITTEN", "ROLLED_BACK", "COALESCED")

table_epochs_table = sa.Table(
    "table_epochs",
    metadata,
    _name_column("table_name", sa.ForeignKey("tables.name"), primary_key=True),
    _epoch_column("epoch", sa.ForeignKey("epochs.id"), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("delta_version", sa.BigInteger),
    _name_column("job"),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger),
    _epoch_column("coalesced_into"),
    sa.Column("rows", sa.BigInteger),
    sa.Column("reason", sa.Text),
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
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("delta_version", sa.BigInteger),
    _name_column("job"),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("generation", sa.BigInteger),
    _epoch_column("coalesced_into"),
    sa.Column("rows", sa.BigInteger),
    sa.Column("reason", sa.Text),
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
