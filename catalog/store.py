"""What the catalog's SQL stores share: the database, and the rows several of them read.

Each store (``catalog/<domain>/sql.py``) is a class over :class:`SqlStore`;
:class:`catalog.sql.SqlCatalog` is all of them over one :class:`~catalog.connection.Database`.
A row lookup or conversion lives here when more than one store needs it; everything
else lives in its store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from catalog import rows
from catalog.connection import Database
from catalog.dialect import Dialect
from catalog.errors import (
    ForeignEpochError,
    StaleLeaseError,
    UnknownEpochError,
    UnknownJobError,
    UnknownPipelineError,
    UnknownTableError,
)
from catalog.models import CommitManifest, Lease
from catalog.rows import json_text
from catalog.schema import (
    META_EPOCH_HIGH_WATER,
    commits_table,
    epochs_table,
    jobs_table,
    leases_table,
    meta_table,
    pipelines_table,
    table_epochs_table,
    tables_table,
    validations_table,
)
from consistency.records import PIPELINE_DEFAULT, Epoch, EpochState
from consistency.states import global_state_of

LatestQuery = Literal["written", "written_at_or_before", "processed", "validation"]


# The latest-state queries are one statement each, built once. For every requested
# name, max(epoch) is one backward descent of an index (ix_table_epochs_state per
# state, the primary key for validations), then the row is fetched by primary key:
# O(tables * log history), never a scan or a GROUP BY over the history.
def latest_statements(dialect: Dialect) -> dict[LatestQuery, sa.Select[Any]]:
    """The latest-state queries, each taking the parameter ``names`` (and
    ``at_or_before``)."""
    requested, name = dialect.names()

    def newest(state: EpochState, *, bounded: bool = False) -> sa.Select[Any]:
        x = table_epochs_table.alias("x")
        conditions = [x.c.table_name == name, x.c.state == state.value]
        if bounded:
            conditions.append(x.c.epoch <= sa.bindparam("at_or_before", type_=sa.BigInteger))
        return (
            sa.select(sa.func.max(x.c.epoch).label("epoch")).where(*conditions).correlate(requested)
        )

    # "Any state but ROLLED_BACK": the largest of one descent per such state.
    processed = sa.select(
        dialect.greatest(
            *(
                sa.func.coalesce(newest(state).scalar_subquery(), 0)
                for state in EpochState
                if state is not EpochState.ROLLED_BACK
            )
        ).label("epoch")
    )
    v = validations_table.alias("v")
    validated = (
        sa.select(sa.func.max(v.c.epoch).label("epoch"))
        .where(v.c.table_name == name)
        .correlate(requested)
    )

    def fetch(target: sa.Table, epoch: sa.Select[Any]) -> sa.Select[Any]:
        return dialect.fetch_newest(target, epoch, requested, name)

    return {
        "written": fetch(table_epochs_table, newest(EpochState.WRITTEN)),
        "written_at_or_before": fetch(table_epochs_table, newest(EpochState.WRITTEN, bounded=True)),
        "processed": fetch(table_epochs_table, processed),
        "validation": fetch(validations_table, validated),
    }


def _responsible_tables(*columns: Any) -> sa.Select[Any]:
    """``columns`` of every active table of ``:pipeline`` responsible for ``:epoch``,
    joined with its state at that epoch (none: no row)."""
    t, te = tables_table, table_epochs_table
    epoch = sa.bindparam("epoch", type_=te.c.epoch.type)
    return (
        sa.select(*columns)
        .select_from(t.outerjoin(te, sa.and_(te.c.table_name == t.c.name, te.c.epoch == epoch)))
        .where(
            t.c.pipeline == sa.bindparam("pipeline", type_=t.c.pipeline.type),
            t.c.retired_at.is_(None),
            t.c.first_epoch <= epoch,
        )
    )


def _commit_states() -> sa.Select[Any]:
    """The distinct states at ``:epoch`` of the tables responsible for it, each with
    whether its COMMIT is recorded already: one statement, a few rows whatever the number
    of tables (every seal asks; only the last one of an epoch finds it COMMIT)."""
    c, te = commits_table, table_epochs_table
    committed = sa.exists().where(c.c.epoch == sa.bindparam("epoch", type_=te.c.epoch.type))
    return _responsible_tables(te.c.state, committed.label("committed")).distinct()


def _commit_versions() -> sa.Select[Any]:
    """The Delta version at which each table responsible for ``:epoch`` sealed it."""
    return _responsible_tables(tables_table.c.name, table_epochs_table.c.delta_version)


# Lookups of every batch, built once (building a statement costs more of the driver's CPU
# than running it); parameters bound by name.
_TABLE_ROW = sa.select(tables_table).where(tables_table.c.name == sa.bindparam("name"))
_JOB_ROW = sa.select(jobs_table).where(jobs_table.c.name == sa.bindparam("name"))
_EPOCH_ROW = sa.select(epochs_table).where(epochs_table.c.id == sa.bindparam("epoch"))
_LEASE_GENERATION = sa.select(leases_table.c.generation).where(
    leases_table.c.job == sa.bindparam("job")
)
_COMMIT_STATES = _commit_states()
_COMMIT_VERSIONS = _commit_versions()
_INSERT_COMMIT = commits_table.insert()


class SqlStore:
    """The base of the catalog's SQL stores: transactions on the catalog's database, and
    the rows more than one store reads."""

    _db: Database
    _latest_statements: Mapping[LatestQuery, sa.Select[Any]]

    def _write(self) -> AbstractContextManager[sa.Connection]:
        """A write transaction, serialized with every other writer of the catalog."""
        return self._db.write()

    def _read(self, *, snapshot: bool = False) -> AbstractContextManager[sa.Connection]:
        """A read; with ``snapshot`` its statements all see the same committed state."""
        return self._db.read(snapshot=snapshot)

    def _now(self, conn: sa.Connection) -> datetime:
        return self._db.now(conn)

    @staticmethod
    def _set_schema(conn: sa.Connection, table: str, schema_json: str) -> None:
        conn.execute(
            tables_table.update()
            .where(tables_table.c.name == table)
            .values(schema_json=schema_json)
        )

    def _pipeline_row(self, conn: sa.Connection, name: str, *, create: bool = False) -> Any:
        """The pipeline's row; with ``create`` (and always for the default) made if missing.

        Call ``create=True`` only inside a write transaction.
        """
        p = pipelines_table
        row = conn.execute(sa.select(p).where(p.c.name == name)).first()
        if row is not None:
            return row
        if not create and name != PIPELINE_DEFAULT:
            raise UnknownPipelineError(name)
        conn.execute(p.insert().values(name=name, created_at=self._now(conn)))
        return conn.execute(sa.select(p).where(p.c.name == name)).first()

    def _table_row(
        self, conn: sa.Connection, name: str, *, job: str | None = None, missing_ok: bool = False
    ) -> Any:
        row = conn.execute(_TABLE_ROW, {"name": name}).first()
        if row is None and not missing_ok:
            raise UnknownTableError(name, job=job)
        return row

    _table_info = staticmethod(rows.table_info)

    @staticmethod
    def _job_row(conn: sa.Connection, name: str, *, missing_ok: bool = False) -> Any:
        row = conn.execute(_JOB_ROW, {"name": name}).first()
        if row is None and not missing_ok:
            raise UnknownJobError(name)
        return row

    @staticmethod
    def _next_epoch_id(conn: sa.Connection) -> int:
        newest = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(epochs_table.c.id), 0))
        ).scalar_one()
        high_water = conn.execute(
            sa.select(meta_table.c.value).where(meta_table.c.key == META_EPOCH_HIGH_WATER)
        ).scalar_one_or_none()
        return max(newest, int(high_water or 0)) + 1

    _epoch = staticmethod(rows.epoch)

    @staticmethod
    def _epoch_row(conn: sa.Connection, epoch: int) -> Any:
        row = conn.execute(_EPOCH_ROW, {"epoch": epoch}).first()
        if row is None:
            raise UnknownEpochError(epoch)
        return row

    @staticmethod
    def _check_epoch_pipeline(
        epoch_row: Any, pipeline: str, *, table: str | None = None, job: str | None = None
    ) -> None:
        """A table's (or job's) epochs are those of its pipeline."""
        if epoch_row.pipeline != pipeline:
            raise ForeignEpochError(
                epoch=epoch_row.id,
                epoch_pipeline=epoch_row.pipeline,
                pipeline=pipeline,
                table=table,
                job=job,
            )

    def _record_commit(
        self, conn: sa.Connection, now: datetime, epoch_row: Epoch
    ) -> CommitManifest | None:
        """Record epoch ``epoch_row`` COMMIT if every active table of its pipeline
        responsible for it has it WRITTEN (and it is not recorded yet)."""
        epoch = epoch_row.id
        parameters = {"epoch": epoch, "pipeline": epoch_row.pipeline}
        rows = conn.execute(_COMMIT_STATES, parameters).all()
        if rows and rows[0].committed:
            return None
        states = {None if row.state is None else EpochState(row.state) for row in rows}
        if global_state_of(states) != "COMMIT":
            return None
        manifest = CommitManifest(
            epoch=epoch,
            versions=dict(conn.execute(_COMMIT_VERSIONS, parameters).tuples().all()),
            barrier_ts=epoch_row.barrier_ts,
            committed_at=now,
            pipeline=epoch_row.pipeline,
        )
        conn.execute(
            _INSERT_COMMIT,
            {
                "epoch": epoch,
                "versions": json_text(manifest.versions),
                "barrier_ts": manifest.barrier_ts,
                "committed_at": now,
                "pipeline": manifest.pipeline,
            },
        )
        return manifest

    def _check_lease(self, conn: sa.Connection, job: str, generation: int) -> None:
        current = conn.execute(_LEASE_GENERATION, {"job": job}).scalar_one_or_none()
        if current != generation:
            raise StaleLeaseError(job=job, generation=generation, current_generation=current)

    @staticmethod
    def _history_values(values: Mapping[str, Any]) -> dict[str, Any]:
        history = {k: v for k, v in values.items() if k != "updated_at"}
        history["recorded_at"] = values["updated_at"]
        return history

    _table_epoch = staticmethod(rows.table_epoch)

    def _latest_rows(
        self,
        conn: sa.Connection,
        query: LatestQuery,
        tables: Iterable[str],
        *,
        at_or_before: int | None = None,
    ) -> Sequence[sa.Row[Any]]:
        names = list(dict.fromkeys(tables))
        if not names:
            return []
        params: dict[str, Any] = {"names": self._db.dialect.bind_names(names)}
        if at_or_before is not None:
            params["at_or_before"] = at_or_before
        return conn.execute(self._latest_statements[query], params).all()

    @staticmethod
    def _commit(row: Any) -> CommitManifest:
        return CommitManifest(
            epoch=row.epoch,
            versions=json.loads(row.versions),
            barrier_ts=row.barrier_ts,
            committed_at=row.committed_at,
            pipeline=row.pipeline,
        )

    @staticmethod
    def _lease(row: Any) -> Lease:
        return Lease(
            job=row.job,
            owner=row.owner,
            generation=row.generation,
            expires_at=row.expires_at,
            acquired_at=row.acquired_at,
        )
