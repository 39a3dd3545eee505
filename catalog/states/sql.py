"""Epoch states of each table, seals and COMMIT manifests. In SQL."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from catalog.errors import (
    EpochStateError,
    StaleLeaseError,
    UnknownEpochError,
    UnknownTableError,
)
from catalog.models import (
    BatchStart,
    CommitManifest,
    JobProgress,
    ProgressRequest,
    SealRequest,
)
from catalog.schema import (
    commits_table,
    epoch_history_table,
    epochs_table,
    leases_table,
    source_slices_table,
    table_epochs_table,
    tables_table,
)
from catalog.states.base import StateStore
from catalog.store import SqlStore
from consistency.records import Epoch, EpochState, TableEpoch
from consistency.states import check_seal, check_transition


def _widest(known: tuple[int, int] | None, wanted: tuple[int, int]) -> tuple[int, int]:
    """The range (after, through] covering ``known`` and ``wanted``."""
    if known is None:
        return wanted
    return min(known[0], wanted[0]), max(known[1], wanted[1])


def _within(
    name: sa.ColumnElement[Any], epoch: sa.ColumnElement[Any], ranges: dict[str, tuple[int, int]]
) -> sa.ColumnElement[bool]:
    """Rows of each name in ``ranges`` at epochs in its range (after, through]: one term per
    distinct range (the jobs of a run are mostly at the same epochs), each a range scan of
    the (name, epoch) key."""
    names_by_range: dict[tuple[int, int], list[str]] = {}
    for key, bounds in ranges.items():
        names_by_range.setdefault(bounds, []).append(key)
    return sa.or_(
        *(
            sa.and_(name.in_(names), epoch > after, epoch <= through)
            for (after, through), names in names_by_range.items()
        )
    )


# The statements of every batch's path, built once: building a statement and its cache
# key costs more of the driver's CPU than SQLite takes to run it (a state change's context
# read: about a millisecond, per table and batch). Parameters are bound by name.
def _state_context() -> sa.Select[Any]:
    """What recording a state of ``:table`` at ``:epoch`` by ``:job`` checks (see
    :meth:`SqlStateStore._context`), in one statement."""
    t, te, e, le = tables_table, table_epochs_table, epochs_table, leases_table
    x = te.alias("x")
    epoch = sa.bindparam("epoch", type_=te.c.epoch.type)
    lease = (
        sa.select(le.c.generation)
        .where(le.c.job == sa.bindparam("job", type_=le.c.job.type))
        .scalar_subquery()
    )
    written = (
        sa.select(sa.func.max(x.c.epoch))
        .where(x.c.table_name == t.c.name, x.c.state == EpochState.WRITTEN.value)
        .scalar_subquery()
    )
    return (
        sa.select(
            lease.label("lease_generation"),
            t.c.writer_job,
            t.c.pipeline,
            written.label("latest_written"),
            e.c.id.label("epoch_id"),
            e.c.barrier_ts.label("epoch_barrier_ts"),
            e.c.created_at.label("epoch_created_at"),
            e.c.pipeline.label("epoch_pipeline"),
            *(c.label(f"state_{c.name}") for c in te.c),
        )
        .select_from(
            t.outerjoin(e, e.c.id == epoch).outerjoin(
                te, sa.and_(te.c.table_name == t.c.name, te.c.epoch == epoch)
            )
        )
        .where(t.c.name == sa.bindparam("table", type_=t.c.name.type))
    )


def _max_attempt() -> sa.Select[Any]:
    """The highest attempt any of ``:names`` recorded at ``:epoch``, now or in the history
    (one statement: one consistent read, one round trip); 0 if none."""
    te, h = table_epochs_table, epoch_history_table
    names = sa.bindparam("names", expanding=True, type_=te.c.table_name.type)
    epoch = sa.bindparam("epoch", type_=te.c.epoch.type)
    attempts = sa.union_all(
        sa.select(te.c.attempt).where(te.c.table_name.in_(names), te.c.epoch == epoch),
        sa.select(h.c.attempt).where(h.c.table_name.in_(names), h.c.epoch == epoch),
    ).subquery()
    return sa.select(sa.func.coalesce(sa.func.max(attempts.c.attempt), 0))


def _outputs_done() -> sa.Select[Any]:
    """Each of the tables ``:names`` (expanding): its pipeline, first epoch and newest
    WRITTEN epoch (one backward descent of ix_table_epochs_state each, as in
    latest_written)."""
    t, te = tables_table, table_epochs_table
    written = (
        sa.select(sa.func.max(te.c.epoch))
        .where(te.c.table_name == t.c.name, te.c.state == EpochState.WRITTEN.value)
        .scalar_subquery()
    )
    return sa.select(t.c.name, t.c.pipeline, t.c.first_epoch, written.label("written")).where(
        t.c.name.in_(sa.bindparam("names", expanding=True))
    )


_STATE_CONTEXT = _state_context()
_OUTPUTS_DONE = _outputs_done()
_MAX_ATTEMPT = _max_attempt()
_STATES_AT = sa.select(table_epochs_table).where(
    table_epochs_table.c.epoch == sa.bindparam("epoch"),
    table_epochs_table.c.table_name.in_(sa.bindparam("names", expanding=True)),
)
_INSERT_STATE = table_epochs_table.insert()
_UPDATE_STATE = table_epochs_table.update().where(
    table_epochs_table.c.table_name == sa.bindparam("key_table_name"),
    table_epochs_table.c.epoch == sa.bindparam("key_epoch"),
)
"""Sets the columns its parameters name; the row is ``:key_table_name``, ``:key_epoch``."""
_INSERT_HISTORY = epoch_history_table.insert()
_EPOCHS_BETWEEN = (
    sa.select(epochs_table.c.id)
    .where(
        epochs_table.c.pipeline == sa.bindparam("pipeline"),
        epochs_table.c.id >= sa.bindparam("first"),
        epochs_table.c.id < sa.bindparam("last"),
    )
    .order_by(epochs_table.c.id)
)
"""The pipeline's epochs from ``:first`` up to (not including) ``:last``."""
_STATES_BETWEEN = (
    sa.select(table_epochs_table.c.epoch, table_epochs_table.c.state)
    .where(
        table_epochs_table.c.table_name == sa.bindparam("table"),
        table_epochs_table.c.epoch >= sa.bindparam("first"),
        table_epochs_table.c.epoch < sa.bindparam("last"),
    )
    .order_by(table_epochs_table.c.epoch)
)
"""``:table``'s states from epoch ``:first`` up to (not including) ``:last``."""
_DELETE_STATES = table_epochs_table.delete().where(
    table_epochs_table.c.table_name == sa.bindparam("table"),
    table_epochs_table.c.epoch.in_(sa.bindparam("epochs", expanding=True)),
)


@dataclass(frozen=True)
class _StateContext:
    """What recording a state of one table at one epoch checks, as one statement read it."""

    pipeline: str
    """The table's pipeline."""
    epoch: Epoch
    latest_written: int | None
    """The table's newest WRITTEN epoch."""
    current: TableEpoch | None
    """The table's state at the epoch."""


class SqlStateStore(SqlStore, StateStore):
    """Epoch states of each table, seals and COMMIT manifests."""

    def record_processed(
        self,
        table: str,
        epoch: int,
        *,
        delta_version: int,
        job: str,
        attempt: int,
        generation: int,
        rows: int | None = None,
    ) -> TableEpoch:
        requested = EpochState.PROCESSED
        with self._write() as conn:
            context = self._context(conn, table, epoch, job, generation, requested)
            current = context.current
            check_transition(
                table,
                epoch,
                None if current is None else current.state,
                requested,
                attempt=attempt,
                current_attempt=None if current is None else current.attempt,
            )
            return self._set_state(
                conn,
                TableEpoch(
                    table=table,
                    epoch=epoch,
                    state=requested,
                    delta_version=delta_version,
                    job=job,
                    attempt=attempt,
                    generation=generation,
                    rows=rows,
                    updated_at=self._now(conn),
                ),
                exists=current is not None,
            )

    def seal(
        self, job: str, generation: int, requests: Sequence[SealRequest]
    ) -> CommitManifest | None:
        with self._write() as conn:
            if not requests:
                self._check_lease(conn, job, generation)
            now = self._now(conn)
            epochs: dict[int, Epoch] = {}
            for request in requests:
                epochs[request.epoch] = self._seal_one(conn, now, job, generation, request)
            manifest = None
            for epoch in sorted(epochs):
                manifest = self._record_commit(conn, now, epochs[epoch]) or manifest
            return manifest

    def _seal_one(
        self, conn: sa.Connection, now: datetime, job: str, generation: int, request: SealRequest
    ) -> Epoch:
        """Seal one table's epoch; the epoch."""
        table, epoch = request.table, request.epoch
        written = EpochState.WRITTEN
        context = self._context(conn, table, epoch, job, generation, written)
        current = context.current
        current_state = None if current is None else current.state
        check_transition(
            table,
            epoch,
            current_state,
            written,
            attempt=request.attempt,
            current_attempt=None if current is None else current.attempt,
        )
        first = epoch if request.first_epoch is None else request.first_epoch
        check_seal(
            table,
            epoch,
            current_state,
            first_epoch=first,
            latest_written=context.latest_written,
        )
        if first < epoch:
            self._coalesce(conn, now, job, generation, request, first, context.pipeline)
        self._set_state(
            conn,
            TableEpoch(
                table=table,
                epoch=epoch,
                state=written,
                delta_version=request.delta_version,
                job=job,
                attempt=request.attempt,
                generation=generation,
                rows=request.rows,
                updated_at=now,
            ),
            exists=current is not None,
        )
        return context.epoch

    def _coalesce(
        self,
        conn: sa.Connection,
        now: datetime,
        job: str,
        generation: int,
        request: SealRequest,
        first: int,
        pipeline: str,
    ) -> None:
        """Record the pipeline's epochs first..request.epoch-1 COALESCED into request.epoch."""
        span = {"pipeline": pipeline, "table": request.table, "first": first, "last": request.epoch}
        coalesced = list(conn.execute(_EPOCHS_BETWEEN, span).scalars())
        existing = {row.epoch: EpochState(row.state) for row in conn.execute(_STATES_BETWEEN, span)}
        for epoch, state in existing.items():
            check_transition(request.table, epoch, state, EpochState.COALESCED)
        values = [
            {
                "table_name": request.table,
                "epoch": epoch,
                "state": EpochState.COALESCED.value,
                "delta_version": None,
                "job": job,
                "attempt": request.attempt,
                "generation": generation,
                "coalesced_into": request.epoch,
                "rows": None,
                "reason": None,
                "updated_at": now,
            }
            for epoch in coalesced
        ]
        if not values:
            return
        if existing:
            conn.execute(_DELETE_STATES, {"table": request.table, "epochs": list(existing)})
        conn.execute(_INSERT_STATE, values)
        conn.execute(_INSERT_HISTORY, [self._history_values(v) for v in values])

    def mark_rolled_back(
        self, table: str, epoch: int, *, job: str, generation: int, reason: str
    ) -> TableEpoch:
        requested = EpochState.ROLLED_BACK
        with self._write() as conn:
            current = self._context(conn, table, epoch, job, generation, requested).current
            # Only a PROCESSED epoch can be rolled back.
            check_transition(table, epoch, None if current is None else current.state, requested)
            assert current is not None
            return self._set_state(
                conn,
                replace(
                    current,
                    state=requested,
                    generation=generation,
                    job=job,
                    reason=reason,
                    coalesced_into=None,
                    updated_at=self._now(conn),
                ),
                exists=True,
            )

    def _context(
        self,
        conn: sa.Connection,
        table: str,
        epoch: int,
        job: str,
        generation: int,
        requested: EpochState,
    ) -> _StateContext:
        """What recording ``requested`` for ``table`` at ``epoch`` checks, read in one
        statement, and checked in this order: the job's lease generation (StaleLeaseError:
        zombie fencing), the table (UnknownTableError) and its writer (EpochStateError), the
        epoch (UnknownEpochError) and its pipeline (ForeignEpochError)."""
        row = conn.execute(_STATE_CONTEXT, {"table": table, "epoch": epoch, "job": job}).first()
        if row is None:
            self._check_lease(conn, job, generation)
            raise UnknownTableError(table, job=job)
        if row.lease_generation != generation:
            raise StaleLeaseError(
                job=job, generation=generation, current_generation=row.lease_generation
            )
        if row.writer_job != job:
            raise EpochStateError(
                table=table,
                epoch=epoch,
                current=None,
                requested=requested,
                why=f"the table is written by job {row.writer_job!r}, not {job!r}",
            )
        if row.epoch_id is None:
            raise UnknownEpochError(epoch)
        known = Epoch(
            id=row.epoch_id,
            barrier_ts=row.epoch_barrier_ts,
            created_at=row.epoch_created_at,
            pipeline=row.epoch_pipeline,
        )
        self._check_epoch_pipeline(known, row.pipeline, table=table)
        state = tuple(row[-len(table_epochs_table.c) :])
        return _StateContext(
            pipeline=row.pipeline,
            epoch=known,
            latest_written=row.latest_written,
            current=None if state[0] is None else self._table_epoch(state),
        )

    @staticmethod
    def _state_row(conn: sa.Connection, table: str, epoch: int) -> Any:
        te = table_epochs_table
        return conn.execute(
            sa.select(te).where(te.c.table_name == table, te.c.epoch == epoch)
        ).first()

    def _set_state(self, conn: sa.Connection, state: TableEpoch, *, exists: bool) -> TableEpoch:
        values = {
            "state": state.state.value,
            "delta_version": state.delta_version,
            "job": state.job,
            "attempt": state.attempt,
            "generation": state.generation,
            "coalesced_into": state.coalesced_into,
            "rows": state.rows,
            "reason": state.reason,
            "updated_at": state.updated_at,
        }
        key = {"table_name": state.table, "epoch": state.epoch}
        if exists:
            conn.execute(
                _UPDATE_STATE, {"key_table_name": state.table, "key_epoch": state.epoch, **values}
            )
        else:
            conn.execute(_INSERT_STATE, {**key, **values})
        conn.execute(_INSERT_HISTORY, self._history_values({**key, **values}))
        return state

    def table_epoch(self, table: str, epoch: int) -> TableEpoch | None:
        with self._read() as conn:
            row = self._state_row(conn, table, epoch)
        return None if row is None else self._table_epoch(row)

    def table_epochs(
        self, table: str, *, after: int = 0, up_to: int | None = None, limit: int | None = None
    ) -> list[TableEpoch]:
        te = table_epochs_table
        query = sa.select(te).where(te.c.table_name == table, te.c.epoch > after)
        if up_to is not None:
            query = query.where(te.c.epoch <= up_to)
        query = query.order_by(te.c.epoch).limit(limit)
        with self._read() as conn:
            return [self._table_epoch(row) for row in conn.execute(query)]

    def state_history(self, table: str, *, epoch: int | None = None) -> list[TableEpoch]:
        h = epoch_history_table
        query = sa.select(h).where(h.c.table_name == table)
        if epoch is not None:
            query = query.where(h.c.epoch == epoch)
        with self._read() as conn:
            return [
                TableEpoch(
                    table=row.table_name,
                    epoch=row.epoch,
                    state=EpochState(row.state),
                    delta_version=row.delta_version,
                    job=row.job,
                    attempt=row.attempt,
                    generation=row.generation,
                    coalesced_into=row.coalesced_into,
                    rows=row.rows,
                    reason=row.reason,
                    updated_at=row.recorded_at,
                )
                for row in conn.execute(query.order_by(h.c.id))
            ]

    def states_at(self, tables: Iterable[str], epoch: int) -> dict[str, TableEpoch]:
        names = list(dict.fromkeys(tables))
        if not names:
            return {}
        with self._read() as conn:
            return self._states_at(conn, names, epoch)

    def _states_at(
        self, conn: sa.Connection, names: list[str], epoch: int
    ) -> dict[str, TableEpoch]:
        rows = conn.execute(_STATES_AT, {"epoch": epoch, "names": names})
        return {row.table_name: self._table_epoch(row) for row in rows}

    def latest_written(
        self, tables: Iterable[str], *, at_or_before: int | None = None
    ) -> dict[str, TableEpoch]:
        with self._read() as conn:
            if at_or_before is None:
                rows = self._latest_rows(conn, "written", tables)
            else:
                rows = self._latest_rows(
                    conn, "written_at_or_before", tables, at_or_before=at_or_before
                )
        return {row.table_name: self._table_epoch(row) for row in rows}

    def latest_processed(self, tables: Iterable[str]) -> dict[str, TableEpoch]:
        with self._read() as conn:
            rows = self._latest_rows(conn, "processed", tables)
        return {row.table_name: self._table_epoch(row) for row in rows}

    def jobs_progress(self, jobs: Sequence[ProgressRequest]) -> list[JobProgress]:
        te, e, ss = table_epochs_table, epochs_table, source_slices_table
        outputs = list(dict.fromkeys(job.output for job in jobs))
        if not outputs:
            return []
        with self._read() as conn:
            found = {row.name: row for row in conn.execute(_OUTPUTS_DONE, {"names": outputs})}
            unknown = [name for name in outputs if name not in found]
            if unknown:
                raise UnknownTableError(unknown[0])
            done = {
                name: row.first_epoch - 1 if row.written is None else row.written
                for name, row in found.items()
            }
            after_by_pipeline: dict[str, int] = {}
            for name, row in found.items():
                after = after_by_pipeline.get(row.pipeline)
                after_by_pipeline[row.pipeline] = (
                    done[name] if after is None else min(after, done[name])
                )
            issued_by_pipeline: dict[str, list[int]] = {p: [] for p in after_by_pipeline}
            for epoch, pipeline in conn.execute(
                sa.select(e.c.id, e.c.pipeline)
                .where(
                    sa.or_(
                        *(
                            sa.and_(e.c.pipeline == pipeline, e.c.id > after)
                            for pipeline, after in after_by_pipeline.items()
                        )
                    )
                )
                .order_by(e.c.id)
            ):
                issued_by_pipeline[pipeline].append(epoch)
            issued = {
                name: tuple(i for i in issued_by_pipeline[row.pipeline] if i > done[name])
                for name, row in found.items()
            }
            # Per table and per source, the epochs some job asks for (each job's own range
            # is cut out of them below).
            table_ranges: dict[str, tuple[int, int]] = {}
            source_ranges: dict[str, tuple[int, int]] = {}
            for job in jobs:
                if not issued[job.output]:
                    continue
                wanted = (done[job.output], issued[job.output][-1])
                for name in (job.output, *job.inputs):
                    table_ranges[name] = _widest(table_ranges.get(name), wanted)
                if job.source is not None:
                    source_ranges[job.source] = _widest(source_ranges.get(job.source), wanted)
            states: dict[str, list[TableEpoch]] = {name: [] for name in table_ranges}
            if table_ranges:
                for row in conn.execute(
                    sa.select(te)
                    .where(_within(te.c.table_name, te.c.epoch, table_ranges))
                    .order_by(te.c.epoch)
                ):
                    states[row.table_name].append(self._table_epoch(row))
            slices: dict[str, list[int]] = {source: [] for source in source_ranges}
            if source_ranges:
                for source, epoch in conn.execute(
                    sa.select(ss.c.source, ss.c.epoch)
                    .where(_within(ss.c.source, ss.c.epoch, source_ranges))
                    .order_by(ss.c.epoch)
                ):
                    slices[source].append(epoch)
        progress = []
        for job in jobs:
            first, epochs = done[job.output], issued[job.output]
            last = epochs[-1] if epochs else first
            progress.append(
                JobProgress(
                    done_through=first,
                    issued=epochs,
                    states={
                        name: tuple(s for s in states.get(name, ()) if first < s.epoch <= last)
                        for name in dict.fromkeys([job.output, *job.inputs])
                    },
                    recorded_slices=()
                    if job.source is None
                    else tuple(e for e in slices.get(job.source, ()) if first < e <= last),
                )
            )
        return progress

    def get_commit(self, epoch: int) -> CommitManifest | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(commits_table).where(commits_table.c.epoch == epoch)
            ).first()
        return None if row is None else self._commit(row)

    def latest_commit(self, *, pipeline: str | None = None) -> CommitManifest | None:
        c = commits_table
        query = sa.select(c).order_by(c.c.epoch.desc()).limit(1)
        if pipeline is not None:
            query = query.where(c.c.pipeline == pipeline)
        with self._read() as conn:
            row = conn.execute(query).first()
        return None if row is None else self._commit(row)

    def max_attempt(self, tables: Iterable[str], epoch: int) -> int:
        names = list(dict.fromkeys(tables))
        if not names:
            return 0
        with self._read() as conn:
            return self._max_attempt(conn, names, epoch)

    def batch_start(
        self, tables: Iterable[str], epoch: int, *, inputs: Iterable[str] = ()
    ) -> BatchStart:
        names = list(dict.fromkeys(tables))
        wanted = list(dict.fromkeys(inputs))
        if not names and not wanted:
            return BatchStart(max_attempt=0)
        with self._read() as conn:
            attempt = self._max_attempt(conn, names, epoch) if names else 0
            written = self._latest_rows(conn, "written", names) if names else []
            return BatchStart(
                max_attempt=attempt,
                latest_written={row.table_name: self._table_epoch(row) for row in written},
                input_states=self._states_at(conn, wanted, epoch) if wanted else {},
            )

    @staticmethod
    def _max_attempt(conn: sa.Connection, names: list[str], epoch: int) -> int:
        return conn.execute(_MAX_ATTEMPT, {"names": names, "epoch": epoch}).scalar_one()
