"""Epochs (barriers) and the source slices recorded for them. In SQL."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from catalog.epochs.base import EpochStore
from catalog.errors import SliceConflictError
from catalog.models import SourceSlice, validate_name
from catalog.rows import json_text
from catalog.schema import epochs_table, source_slices_table
from catalog.store import SqlStore
from consistency.records import PIPELINE_DEFAULT, Epoch
from consistency.timestamps import as_utc


class SqlEpochStore(SqlStore, EpochStore):
    """Epochs (barriers) and the source slices recorded for them."""

    def open_epoch(
        self, barrier_ts: datetime | None = None, *, pipeline: str = PIPELINE_DEFAULT
    ) -> Epoch:
        validate_name(pipeline, kind="pipeline")
        e = epochs_table
        with self._write() as conn:
            self._pipeline_row(conn, pipeline, create=pipeline == PIPELINE_DEFAULT)
            now = self._now(conn)
            # Barrier timestamps never decrease within a pipeline; another pipeline's
            # clock (say, event time) does not move this one's.
            last_ts = conn.execute(
                sa.select(e.c.barrier_ts)
                .where(e.c.pipeline == pipeline)
                .order_by(e.c.id.desc())
                .limit(1)
            ).scalar_one_or_none()
            ts = now if barrier_ts is None else as_utc(barrier_ts)
            if last_ts is not None and ts < last_ts:
                ts = last_ts
            epoch = Epoch(
                id=self._next_epoch_id(conn), barrier_ts=ts, created_at=now, pipeline=pipeline
            )
            conn.execute(
                e.insert().values(
                    id=epoch.id,
                    barrier_ts=epoch.barrier_ts,
                    created_at=epoch.created_at,
                    pipeline=pipeline,
                )
            )
            return epoch

    def get_epoch(self, epoch: int) -> Epoch:
        with self._read() as conn:
            return self._epoch(self._epoch_row(conn, epoch))

    def latest_epoch(self, *, pipeline: str | None = None) -> Epoch | None:
        e = epochs_table
        query = sa.select(e).order_by(e.c.id.desc()).limit(1)
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._epoch(row)

    def epochs(
        self, *, after: int = 0, up_to: int | None = None, pipeline: str | None = None
    ) -> list[Epoch]:
        e = epochs_table
        query = sa.select(e).where(e.c.id > after)
        if up_to is not None:
            query = query.where(e.c.id <= up_to)
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            return [self._epoch(row) for row in conn.execute(query.order_by(e.c.id))]

    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        e = epochs_table
        query = (
            sa.select(e)
            .where(e.c.barrier_ts <= as_utc(ts))
            .order_by(e.c.barrier_ts.desc(), e.c.id.desc())
            .limit(1)
        )
        if pipeline is not None:
            query = query.where(e.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._epoch(row)

    def record_slice(
        self,
        source: str,
        epoch: int,
        bounds: Mapping[str, object],
        *,
        job: str,
        generation: int,
        catch_up: bool = False,
    ) -> SourceSlice:
        validate_name(source, kind="source")
        encoded = json_text(bounds)
        with self._write() as conn:
            job_row = self._job_row(conn, job)
            self._check_lease(conn, job, generation)
            self._check_epoch_pipeline(self._epoch_row(conn, epoch), job_row.pipeline, job=job)
            row = self._slice_row(conn, source, epoch)
            if row is not None:
                recorded = json.loads(row.bounds)
                if recorded != json.loads(encoded):
                    raise SliceConflictError(
                        source=source, epoch=epoch, recorded=recorded, attempted=bounds
                    )
                return self._slice(row)
            conn.execute(
                source_slices_table.insert().values(
                    source=source,
                    epoch=epoch,
                    bounds=encoded,
                    catch_up=catch_up,
                    recorded_at=self._now(conn),
                )
            )
            return self._slice(self._slice_row(conn, source, epoch))

    @staticmethod
    def _slice_row(conn: sa.Connection, source: str, epoch: int) -> Any:
        return conn.execute(
            sa.select(source_slices_table).where(
                source_slices_table.c.source == source, source_slices_table.c.epoch == epoch
            )
        ).first()

    @staticmethod
    def _slice(row: Any) -> SourceSlice:
        return SourceSlice(
            source=row.source,
            epoch=row.epoch,
            bounds=json.loads(row.bounds),
            catch_up=row.catch_up,
            recorded_at=row.recorded_at,
        )

    def get_slice(self, source: str, epoch: int) -> SourceSlice | None:
        with self._read() as conn:
            row = self._slice_row(conn, source, epoch)
        return None if row is None else self._slice(row)

    def latest_slice(self, source: str) -> SourceSlice | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(source_slices_table)
                .where(source_slices_table.c.source == source)
                .order_by(source_slices_table.c.epoch.desc())
                .limit(1)
            ).first()
        return None if row is None else self._slice(row)

    def slices(self, source: str, *, after: int = 0, up_to: int | None = None) -> list[SourceSlice]:
        ss = source_slices_table
        query = sa.select(ss).where(ss.c.source == source, ss.c.epoch > after)
        if up_to is not None:
            query = query.where(ss.c.epoch <= up_to)
        with self._read() as conn:
            rows = conn.execute(query.order_by(ss.c.epoch)).all()
        return [self._slice(row) for row in rows]
