"""Schema migrations of the catalog, and the schema version a database holds.

A new catalog is created from :data:`catalog.schema.metadata` at SCHEMA_VERSION; a
schema change bumps SCHEMA_VERSION and registers its migration in :data:`MIGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import sqlalchemy as sa

from catalog.base import META_SCHEMA_VERSION, SCHEMA_VERSION
from catalog.errors import CatalogError, SchemaVersionError
from catalog.schema import (
    commits_table,
    epoch_expiries_table,
    epochs_table,
    job_failures_table,
    jobs_table,
    meta_table,
    pins_table,
    pipelines_table,
    resolutions_table,
    revision_states_table,
    revisions_table,
    tables_table,
    tags_table,
)
from consistency.records import PIPELINE_DEFAULT

Migration = Callable[[sa.Connection], None]


def _add_columns(conn: sa.Connection, table: sa.Table, *names: str) -> None:
    """ALTER TABLE ... ADD COLUMN, rendered from the column's current definition."""
    quoted = conn.dialect.identifier_preparer.format_table(table)
    for name in names:
        column = sa.schema.CreateColumn(table.c[name]).compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD COLUMN {column}")


def _migrate_1_to_2(conn: sa.Connection) -> None:
    """Schema v2: pipelines, retirement, failures, resolutions, pins, tags, expiries.

    Everything that exists is kept and belongs to pipeline "default" (the server default
    of the new ``pipeline`` columns); new tables are created empty.
    """
    for table in (
        pipelines_table,
        job_failures_table,
        resolutions_table,
        pins_table,
        tags_table,
        epoch_expiries_table,
    ):
        table.create(conn)
    _add_columns(conn, tables_table, "pipeline", "retired_at")
    _add_columns(conn, jobs_table, "pipeline", "retired_at")
    _add_columns(conn, epochs_table, "pipeline")
    _add_columns(conn, commits_table, "pipeline")
    new_indexes = {"ix_tables_pipeline", "ix_jobs_pipeline", "ix_epochs_pipeline"}
    new_indexes |= {"ix_epochs_pipeline_barrier_ts", "ix_commits_pipeline"}
    for table in (tables_table, jobs_table, epochs_table, commits_table):
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            if index.name in new_indexes:
                index.create(conn)
    conn.execute(
        pipelines_table.insert().values(name=PIPELINE_DEFAULT, created_at=datetime.now(UTC))
    )


def _migrate_2_to_3(conn: sa.Connection) -> None:
    """Schema v3: revisions (etl recompute) and the epoch states they replaced; nothing
    existing changes."""
    revisions_table.create(conn)
    revision_states_table.create(conn)


MIGRATIONS: dict[int, Migration] = {2: _migrate_1_to_2, 3: _migrate_2_to_3}
"""Schema migrations by the version they produce: ``MIGRATIONS[v]`` turns v-1 into v.

A new catalog is created from ``metadata`` at SCHEMA_VERSION; a schema change bumps
SCHEMA_VERSION and registers its migration here. Each runs inside the upgrade's one
write transaction (PostgreSQL and SQLite both have transactional DDL).
"""


def stored_version(conn: sa.Connection) -> int:
    """The schema version the catalog's database holds."""
    value = conn.execute(
        sa.select(meta_table.c.value).where(meta_table.c.key == META_SCHEMA_VERSION)
    ).scalar_one()
    return int(value)


def migrate(conn: sa.Connection) -> int:
    """Migrate the catalog to SCHEMA_VERSION inside the write transaction ``conn``; the
    version it had."""
    found = stored_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(found=found, expected=SCHEMA_VERSION)
    for version in range(found + 1, SCHEMA_VERSION + 1):
        step = MIGRATIONS.get(version)
        if step is None:
            raise CatalogError(
                f"no migration from catalog schema version {version - 1} to {version}; "
                "this catalog cannot be upgraded in place: recreate it"
            )
        step(conn)
    conn.execute(
        meta_table.update()
        .where(meta_table.c.key == META_SCHEMA_VERSION)
        .values(value=str(SCHEMA_VERSION))
    )
    return found
