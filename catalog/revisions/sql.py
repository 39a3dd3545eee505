"""Revisions (etl recompute): begun, switched at once, or discarded.

In SQL, on SQLite and PostgreSQL alike (see catalog.dialect).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from catalog import rows
from catalog.errors import RevisionStateError, UnknownRevisionError
from catalog.models import SealRequest
from catalog.revisions.base import RevisionStore
from catalog.rows import json_text
from catalog.schema import (
    commits_table,
    epoch_history_table,
    epochs_table,
    revision_states_table,
    revisions_table,
    table_epochs_table,
)
from catalog.store import SqlStore
from consistency.records import EpochState, Revision, RevisionState, TableEpoch


class SqlRevisionStore(SqlStore, RevisionStore):
    """Revisions (etl recompute): begun, switched at once, or discarded."""

    _revision = staticmethod(rows.revision)

    def _revision_row(self, conn: sa.Connection, revision: int) -> Any:
        row = conn.execute(
            sa.select(revisions_table).where(revisions_table.c.id == revision)
        ).first()
        if row is None:
            raise UnknownRevisionError(revision)
        return row

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
        r = revisions_table
        with self._write() as conn:
            self._pipeline_row(conn, pipeline)
            for table in tables:
                self._table_row(conn, table)
            values = dict(
                pipeline=pipeline,
                tables=json_text(list(tables)),
                from_epoch=from_epoch,
                reason=reason,
                actor=actor,
                owner=owner,
                state=RevisionState.BUILDING.value,
                started_at=self._now(conn),
            )
            new_id = conn.execute(r.insert().values(**values).returning(r.c.id)).scalar_one()
            return self._revision(self._revision_row(conn, new_id))

    def _finish_revision(
        self, conn: sa.Connection, row: Any, state: RevisionState, **values: Any
    ) -> Revision:
        if row.state != RevisionState.BUILDING.value:
            raise RevisionStateError(revision=row.id, state=row.state, requested=state.value)
        conn.execute(
            revisions_table.update()
            .where(revisions_table.c.id == row.id)
            .values(state=state.value, finished_at=self._now(conn), **values)
        )
        return self._revision(self._revision_row(conn, row.id))

    def switch_revision(
        self,
        revision: int,
        *,
        generations: Mapping[str, int],
        seals: Sequence[SealRequest],
        schemas: Mapping[str, str] | None = None,
    ) -> Revision:
        te, e = table_epochs_table, epochs_table
        with self._write() as conn:
            row = self._revision_row(conn, revision)
            if row.state != RevisionState.BUILDING.value:
                raise RevisionStateError(
                    revision=revision, state=row.state, requested=RevisionState.SWITCHED.value
                )
            for job, generation in generations.items():
                self._check_lease(conn, job, generation)
            now = self._now(conn)
            epochs = list(
                conn.execute(
                    sa.select(e.c.id)
                    .where(e.c.pipeline == row.pipeline, e.c.id >= row.from_epoch)
                    .order_by(e.c.id)
                ).scalars()
            )
            through = row.from_epoch
            for table in json.loads(row.tables):
                requests = sorted((s for s in seals if s.table == table), key=lambda s: s.epoch)
                if not requests:
                    continue
                table_row = self._table_row(conn, table)
                job = table_row.writer_job
                last = requests[-1].epoch
                through = max(through, last)
                replaced = (
                    te.c.table_name == table,
                    te.c.epoch >= row.from_epoch,
                    te.c.epoch <= last,
                )
                old = conn.execute(sa.select(te).where(*replaced)).all()
                if old:
                    conn.execute(
                        revision_states_table.insert(),
                        [{"revision": revision, **old_row._asdict()} for old_row in old],
                    )
                    conn.execute(te.delete().where(*replaced))
                values = []
                for request in requests:
                    first = request.first_epoch or request.epoch
                    common = {
                        "table_name": table,
                        "job": job,
                        "attempt": request.attempt,
                        "generation": generations.get(job) if job else None,
                        "reason": f"revision {revision}",
                        "updated_at": now,
                    }
                    values += [
                        {
                            **common,
                            "epoch": epoch,
                            "state": EpochState.COALESCED.value,
                            "delta_version": None,
                            "coalesced_into": request.epoch,
                            "rows": None,
                        }
                        for epoch in epochs
                        if first <= epoch < request.epoch
                    ]
                    values.append(
                        {
                            **common,
                            "epoch": request.epoch,
                            "state": EpochState.WRITTEN.value,
                            "delta_version": request.delta_version,
                            "coalesced_into": None,
                            "rows": request.rows,
                        }
                    )
                conn.execute(te.insert(), values)
                conn.execute(
                    epoch_history_table.insert(), [self._history_values(v) for v in values]
                )
            for table, schema_json in (schemas or {}).items():
                self._set_schema(conn, table, schema_json)
            # The manifests of the recomputed epochs name the replaced versions: record
            # them again from the new states (a now COALESCED epoch has none).
            conn.execute(
                commits_table.delete().where(
                    commits_table.c.pipeline == row.pipeline,
                    commits_table.c.epoch >= row.from_epoch,
                    commits_table.c.epoch <= through,
                )
            )
            for epoch in epochs:
                if epoch <= through:
                    self._record_commit(conn, now, self._epoch(self._epoch_row(conn, epoch)))
            return self._finish_revision(conn, row, RevisionState.SWITCHED, through_epoch=through)

    def discard_revision(self, revision: int, *, note: str) -> Revision:
        with self._write() as conn:
            row = self._revision_row(conn, revision)
            return self._finish_revision(conn, row, RevisionState.DISCARDED, note=note)

    def revisions(self, *, pipeline: str | None = None, table: str | None = None) -> list[Revision]:
        r = revisions_table
        query = sa.select(r).order_by(r.c.id)
        if pipeline is not None:
            query = query.where(r.c.pipeline == pipeline)
        with self._read() as conn:
            found = [self._revision(row) for row in conn.execute(query)]
        return [rev for rev in found if table is None or table in rev.tables]

    def superseded_states(self, revision: int) -> list[TableEpoch]:
        rs = revision_states_table
        columns = [c for c in rs.c if c.name != "revision"]
        with self._read() as conn:
            self._revision_row(conn, revision)
            rows = conn.execute(
                sa.select(*columns)
                .where(rs.c.revision == revision)
                .order_by(rs.c.table_name, rs.c.epoch)
            )
            return [self._table_epoch(row) for row in rows]
