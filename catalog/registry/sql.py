"""Pipelines, tables, jobs and lineage: what is registered, and retiring it.

In SQL, on SQLite and PostgreSQL alike (see catalog.dialect).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, get_args

import sqlalchemy as sa

from catalog.errors import (
    DuplicateWriterError,
    LineageCycleError,
    NameOwnedError,
    PipelineMismatchError,
    RegistrationError,
    RetiredError,
    RetirementBlockedError,
    TableConflictError,
)
from catalog.models import (
    JobInfo,
    JobSpec,
    LineageEdge,
    PipelineInfo,
    RetiredPipeline,
    TableInfo,
    TableKind,
    TableSpec,
    WriteMode,
    validate_name,
)
from catalog.registry.base import RegistryStore
from catalog.rows import json_text
from catalog.schema import (
    META_EPOCH_HIGH_WATER,
    commits_table,
    epoch_expiries_table,
    epoch_history_table,
    epochs_table,
    job_failures_table,
    job_inputs_table,
    jobs_table,
    leases_table,
    meta_table,
    pins_table,
    pipelines_table,
    resolutions_table,
    revision_states_table,
    revisions_table,
    source_slices_table,
    table_epochs_table,
    tables_table,
    tags_table,
    validations_table,
)
from catalog.store import SqlStore
from consistency.records import PIPELINE_DEFAULT


class SqlRegistryStore(SqlStore, RegistryStore):
    """Pipelines, tables, jobs and lineage: what is registered, and retiring it."""

    def register_pipeline(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> PipelineInfo:
        table_specs, job_specs = self._pipeline_specs(name, tables, jobs)
        with self._write() as conn:
            self._refuse_foreign_names(conn, name, table_specs, job_specs)
            self._refuse_foreign_inputs(conn, job_specs)
            self._pipeline_row(conn, name, create=True)
            for table_spec in table_specs:
                self._register_table(conn, table_spec)
            for job_spec in job_specs:
                self._register_job(conn, job_spec)
            return self._pipeline_info(self._pipeline_row(conn, name))

    def check_registration(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> None:
        table_specs, job_specs = self._pipeline_specs(name, tables, jobs)
        with self._read(snapshot=True) as conn:
            self._refuse_foreign_names(conn, name, table_specs, job_specs)
            self._refuse_foreign_inputs(conn, job_specs)

    def _pipeline_specs(
        self, name: str, tables: Sequence[TableSpec], jobs: Sequence[JobSpec]
    ) -> tuple[list[TableSpec], list[JobSpec]]:
        validate_name(name, kind="pipeline")
        return (
            [self._checked_table(dataclasses.replace(spec, pipeline=name)) for spec in tables],
            [self._normalized_job(dataclasses.replace(spec, pipeline=name)) for spec in jobs],
        )

    @staticmethod
    def _refuse_foreign_inputs(conn: sa.Connection, jobs: Sequence[JobSpec]) -> None:
        """PipelineMismatchError for the first input table of a job that another pipeline
        registered (it can only be read as a source)."""
        t = tables_table
        for spec in jobs:
            for table, owner, location in conn.execute(
                sa.select(t.c.name, t.c.pipeline, t.c.location).where(
                    t.c.name.in_(spec.inputs), t.c.pipeline != spec.pipeline
                )
            ):
                raise PipelineMismatchError(
                    job=spec.name,
                    table=table,
                    job_pipeline=spec.pipeline,
                    table_pipeline=owner,
                    role="input",
                    location=location,
                )

    def _refuse_foreign_names(
        self,
        conn: sa.Connection,
        pipeline: str,
        tables: Sequence[TableSpec],
        jobs: Sequence[JobSpec],
    ) -> None:
        """NameOwnedError for every job, source or table name another pipeline owns: a job
        (retired too) or table registered in it, or a source one of its jobs reads or whose
        slices it recorded. Checked under the write lock, so two registrations cannot race."""
        j, t, ss, e = jobs_table, tables_table, source_slices_table, epochs_table
        conflicts: list[tuple[str, str, str]] = []
        job_names = [spec.name for spec in jobs]
        for name, owner in conn.execute(
            sa.select(j.c.name, j.c.pipeline)
            .where(j.c.name.in_(job_names), j.c.pipeline != pipeline)
            .order_by(j.c.name)
        ):
            conflicts.append(("job", name, owner))
        sources = sorted({spec.source for spec in jobs if spec.source is not None})
        owned_sources = sa.union(
            sa.select(j.c.source.label("source"), j.c.pipeline.label("owner")).where(
                j.c.source.in_(sources), j.c.pipeline != pipeline
            ),
            sa.select(ss.c.source.label("source"), e.c.pipeline.label("owner"))
            .join(e, e.c.id == ss.c.epoch)
            .where(ss.c.source.in_(sources), e.c.pipeline != pipeline),
        ).subquery()
        seen_sources: set[str] = set()
        for source, owner in conn.execute(
            sa.select(owned_sources.c.source, owned_sources.c.owner).order_by(
                owned_sources.c.source, owned_sources.c.owner
            )
        ):
            if source not in seen_sources:
                seen_sources.add(source)
                conflicts.append(("source", source, owner))
        for name, owner in conn.execute(
            sa.select(t.c.name, t.c.pipeline)
            .where(t.c.name.in_([spec.name for spec in tables]), t.c.pipeline != pipeline)
            .order_by(t.c.name)
        ):
            conflicts.append(("table", name, owner))
        if conflicts:
            raise NameOwnedError(pipeline=pipeline, conflicts=conflicts)

    @staticmethod
    def _checked_table(spec: TableSpec) -> TableSpec:
        validate_name(spec.name, kind="table")
        validate_name(spec.pipeline, kind="pipeline")
        if spec.kind not in get_args(TableKind):
            raise RegistrationError(
                f"table {spec.name!r} has kind {spec.kind!r}; use one of {get_args(TableKind)}"
            )
        if not spec.location:
            raise RegistrationError(f"table {spec.name!r} needs a location")
        return spec

    def register_table(self, spec: TableSpec) -> TableInfo:
        spec = self._checked_table(spec)
        with self._write() as conn:
            self._refuse_foreign_names(conn, spec.pipeline, [spec], [])
            return self._register_table(conn, spec)

    def _register_table(self, conn: sa.Connection, spec: TableSpec) -> TableInfo:
        partition_by = list(spec.partition_by)
        row = self._table_row(conn, spec.name, missing_ok=True)
        if row is not None:
            existing = self._table_info(row)
            for field, old, new in (
                ("location", existing.location, spec.location),
                ("kind", existing.kind, spec.kind),
                ("partition_by", existing.partition_by, tuple(partition_by)),
                ("pipeline", existing.pipeline, spec.pipeline),
            ):
                if old != new:
                    raise TableConflictError(table=spec.name, field=field, existing=old, new=new)
            changes: dict[str, Any] = {}
            if spec.schema_json is not None and existing.schema_json is None:
                changes["schema_json"] = spec.schema_json
            if existing.retired_at is not None:
                changes["retired_at"] = None  # registering a retired table revives it
            if not changes:
                return existing
            conn.execute(
                tables_table.update().where(tables_table.c.name == spec.name).values(**changes)
            )
            return self._table_info(self._table_row(conn, spec.name))
        self._pipeline_row(conn, spec.pipeline, create=True)
        conn.execute(
            tables_table.insert().values(
                name=spec.name,
                location=spec.location,
                kind=spec.kind,
                schema_json=spec.schema_json,
                partition_by=json_text(partition_by),
                first_epoch=self._next_epoch_id(conn),
                writer_job=None,
                created_at=self._now(conn),
                pipeline=spec.pipeline,
                retired_at=None,
            )
        )
        return self._table_info(self._table_row(conn, spec.name))

    def update_table_schema(self, table: str, schema_json: str) -> None:
        with self._write() as conn:
            self._table_row(conn, table)
            self._set_schema(conn, table, schema_json)

    def register_job(self, spec: JobSpec) -> JobInfo:
        spec = self._normalized_job(spec)
        with self._write() as conn:
            self._refuse_foreign_names(conn, spec.pipeline, [], [spec])
            return self._register_job(conn, spec)

    def _register_job(self, conn: sa.Connection, spec: JobSpec) -> JobInfo:
        existing = self._job_row(conn, spec.name, missing_ok=True)
        if existing is not None:
            current = self._job_info(existing, self._job_inputs(conn, spec.name))
            if self._same_job(current, spec) and current.retired_at is None:
                return current
        table_rows = {}
        for table in (spec.output, *spec.side_outputs, *spec.inputs):
            table_rows[table] = self._table_row(conn, table, job=spec.name)
        outputs = (spec.output, *spec.side_outputs)
        for table, row in table_rows.items():
            role = "output" if table in outputs else "input"
            if row.pipeline != spec.pipeline:
                raise PipelineMismatchError(
                    job=spec.name,
                    table=table,
                    job_pipeline=spec.pipeline,
                    table_pipeline=row.pipeline,
                    role=role,
                    location=row.location,
                )
            if row.retired_at is not None:
                raise RetiredError(
                    kind="table", name=table, retired_at=row.retired_at, job=spec.name
                )
        for table in outputs:
            writer = table_rows[table].writer_job
            if writer is not None and writer != spec.name:
                raise DuplicateWriterError(table=table, existing_job=writer, new_job=spec.name)
        cycle = self._find_cycle(conn, spec)
        if cycle:
            raise LineageCycleError(job=spec.name, cycle=cycle)

        now = self._now(conn)
        self._pipeline_row(conn, spec.pipeline, create=True)
        values = dict(
            output=spec.output,
            mode=spec.mode,
            source=spec.source,
            keys=json_text(list(spec.keys)),
            side_outputs=json_text(list(spec.side_outputs)),
            pipeline=spec.pipeline,
            retired_at=None,  # registering a retired job revives it
        )
        if existing is None:
            conn.execute(jobs_table.insert().values(name=spec.name, created_at=now, **values))
        else:
            conn.execute(jobs_table.update().where(jobs_table.c.name == spec.name).values(**values))
            conn.execute(job_inputs_table.delete().where(job_inputs_table.c.job == spec.name))
            conn.execute(
                tables_table.update()
                .where(
                    tables_table.c.writer_job == spec.name,
                    tables_table.c.name.not_in(outputs),
                )
                .values(writer_job=None)
            )
        if spec.inputs:
            conn.execute(
                job_inputs_table.insert(),
                [
                    {"job": spec.name, "table_name": table, "position": position}
                    for position, table in enumerate(spec.inputs)
                ],
            )
        conn.execute(
            tables_table.update()
            .where(tables_table.c.name.in_(outputs))
            .values(writer_job=spec.name)
        )
        sealed = self._latest_rows(conn, "written", [spec.output])
        first: int | None = None
        if sealed:
            # A table an existing job gains (a new side output) is responsible from the
            # first epoch the job has not sealed: it has no state at the job's earlier
            # epochs, and must not hold their COMMIT back.
            first = sealed[0].epoch + 1
        elif spec.inputs:
            # A new job catches up over its inputs' history: its outputs are responsible
            # from the newest first epoch among the inputs, unless they already hold states.
            first = max(table_rows[table].first_epoch for table in spec.inputs)
        if first is not None:
            for table in outputs:
                if not self._has_states(conn, table):
                    conn.execute(
                        tables_table.update()
                        .where(tables_table.c.name == table)
                        .values(first_epoch=first)
                    )
        return self._job_info(self._job_row(conn, spec.name), spec.inputs)

    @staticmethod
    def _normalized_job(spec: JobSpec) -> JobSpec:
        validate_name(spec.name, kind="job")
        for table in (spec.output, *spec.inputs, *spec.side_outputs):
            validate_name(table, kind="table")
        if spec.source is not None:
            validate_name(spec.source, kind="source")
        validate_name(spec.pipeline, kind="pipeline")
        if spec.mode not in get_args(WriteMode):
            raise RegistrationError(
                f"job {spec.name!r} has write mode {spec.mode!r}; use one of {get_args(WriteMode)}"
            )
        side_outputs = tuple(t for t in dict.fromkeys(spec.side_outputs) if t != spec.output)
        return JobSpec(
            name=spec.name,
            output=spec.output,
            mode=spec.mode,
            inputs=tuple(dict.fromkeys(spec.inputs)),
            source=spec.source,
            keys=tuple(spec.keys),
            side_outputs=side_outputs,
            pipeline=spec.pipeline,
        )

    @staticmethod
    def _same_job(info: JobInfo, spec: JobSpec) -> bool:
        return JobSpec(
            name=info.name,
            output=info.output,
            mode=info.mode,
            inputs=info.inputs,
            source=info.source,
            keys=info.keys,
            side_outputs=info.side_outputs,
            pipeline=info.pipeline,
        ) == JobSpec(
            name=spec.name,
            output=spec.output,
            mode=spec.mode,
            inputs=spec.inputs,
            source=spec.source,
            keys=spec.keys,
            side_outputs=spec.side_outputs,
            pipeline=spec.pipeline,
        )

    def _find_cycle(self, conn: sa.Connection, spec: JobSpec) -> list[str] | None:
        """The path job -> output -> ... -> input -> job if the new edges close a cycle."""
        readers: dict[str, list[str]] = {}
        for job, table in conn.execute(
            sa.select(job_inputs_table.c.job, job_inputs_table.c.table_name)
            .where(job_inputs_table.c.job != spec.name)
            .order_by(job_inputs_table.c.job, job_inputs_table.c.position)
        ):
            readers.setdefault(table, []).append(job)
        writes: dict[str, list[str]] = {}
        for job, output, side_outputs in conn.execute(
            sa.select(jobs_table.c.name, jobs_table.c.output, jobs_table.c.side_outputs).where(
                jobs_table.c.name != spec.name
            )
        ):
            writes[job] = [output, *json.loads(side_outputs)]

        inputs = set(spec.inputs)
        parent: dict[str, str | None] = {}
        frontier = []
        for table in (spec.output, *spec.side_outputs):
            if table not in parent:
                parent[table] = None
                frontier.append(table)
        # Breadth-first over table -> reading job -> written table: the shortest cycle.
        while frontier:
            next_frontier = []
            for table in frontier:
                if table in inputs:
                    path = [table]
                    node = parent[table]
                    while node is not None:
                        path.append(node)
                        node = parent[node]
                    return [spec.name, *reversed(path), spec.name]
                for job in readers.get(table, ()):
                    if job in parent:
                        continue
                    parent[job] = table
                    for written in writes.get(job, ()):
                        if written not in parent:
                            parent[written] = job
                            next_frontier.append(written)
            frontier = next_frontier
        return None

    def get_table(self, name: str) -> TableInfo:
        with self._read() as conn:
            return self._table_info(self._table_row(conn, name))

    def list_tables(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[TableInfo]:
        t = tables_table
        query = sa.select(t).order_by(t.c.name)
        if not include_retired:
            query = query.where(t.c.retired_at.is_(None))
        if pipeline is not None:
            query = query.where(t.c.pipeline == pipeline)
        with self._read() as conn:
            return [self._table_info(row) for row in conn.execute(query)]

    def get_job(self, name: str) -> JobInfo:
        with self._read(snapshot=True) as conn:
            return self._job_info(self._job_row(conn, name), self._job_inputs(conn, name))

    def list_jobs(
        self, *, include_retired: bool = False, pipeline: str | None = None
    ) -> list[JobInfo]:
        j = jobs_table
        query = sa.select(j).order_by(j.c.name)
        if not include_retired:
            query = query.where(j.c.retired_at.is_(None))
        if pipeline is not None:
            query = query.where(j.c.pipeline == pipeline)
        with self._read(snapshot=True) as conn:
            inputs = self._all_job_inputs(conn)
            return [self._job_info(row, inputs.get(row.name, ())) for row in conn.execute(query)]

    @staticmethod
    def _pipeline_info(row: Any) -> PipelineInfo:
        return PipelineInfo(
            name=row.name, created_at=row.created_at, retention_policy=row.retention_policy
        )

    def list_pipelines(self) -> list[PipelineInfo]:
        p = pipelines_table
        with self._read() as conn:
            return [
                self._pipeline_info(row) for row in conn.execute(sa.select(p).order_by(p.c.name))
            ]

    def retire_pipeline(self, name: str) -> RetiredPipeline:
        j, t, e, le = jobs_table, tables_table, epochs_table, leases_table
        with self._write() as conn:
            self._pipeline_row(conn, name)
            now = self._now(conn)
            live = conn.execute(
                sa.select(le)
                .join(j, j.c.name == le.c.job)
                .where(j.c.pipeline == name, le.c.expires_at > now)
                .order_by(le.c.job)
            ).all()
            if live:
                held = "; ".join(
                    f"job {row.job!r} by {row.owner} until {row.expires_at}" for row in live
                )
                raise RetirementBlockedError(
                    kind="pipeline",
                    name=name,
                    blockers=[row.job for row in live],
                    reason=f"a run of it holds live leases ({held}); stop that run (or wait "
                    "for its leases to expire) and retire it again",
                )
            job_rows = conn.execute(sa.select(j).where(j.c.pipeline == name)).all()
            jobs = [row.name for row in job_rows]
            tables = [
                self._table_info(row)
                for row in conn.execute(sa.select(t).where(t.c.pipeline == name).order_by(t.c.name))
            ]
            table_names = [info.name for info in tables]
            epochs = sa.select(e.c.id).where(e.c.pipeline == name)
            ss = source_slices_table
            sources = sorted(
                {row.source for row in job_rows if row.source is not None}
                | set(conn.execute(sa.select(ss.c.source).where(ss.c.epoch.in_(epochs))).scalars())
            )
            epoch_count = conn.execute(
                sa.select(sa.func.count()).select_from(e).where(e.c.pipeline == name)
            ).scalar_one()
            self._keep_epoch_high_water(conn)
            for statement in (
                ss.delete().where(ss.c.epoch.in_(epochs)),
                le.delete().where(le.c.job.in_(jobs)),
                job_failures_table.delete().where(
                    sa.or_(
                        job_failures_table.c.job.in_(jobs),
                        job_failures_table.c.epoch.in_(epochs),
                    )
                ),
                job_inputs_table.delete().where(job_inputs_table.c.job.in_(jobs)),
                validations_table.delete().where(validations_table.c.table_name.in_(table_names)),
                resolutions_table.delete().where(resolutions_table.c.table_name.in_(table_names)),
                table_epochs_table.delete().where(table_epochs_table.c.table_name.in_(table_names)),
                revision_states_table.delete().where(
                    revision_states_table.c.table_name.in_(table_names)
                ),
                revisions_table.delete().where(revisions_table.c.pipeline == name),
                epoch_history_table.delete().where(
                    epoch_history_table.c.table_name.in_(table_names)
                ),
                pins_table.delete().where(
                    sa.or_(pins_table.c.pipeline == name, pins_table.c.epoch.in_(epochs))
                ),
                tags_table.delete().where(
                    sa.or_(tags_table.c.pipeline == name, tags_table.c.epoch.in_(epochs))
                ),
                epoch_expiries_table.delete().where(epoch_expiries_table.c.epoch.in_(epochs)),
                commits_table.delete().where(commits_table.c.epoch.in_(epochs)),
                j.delete().where(j.c.pipeline == name),
                t.delete().where(t.c.pipeline == name),
                e.delete().where(e.c.pipeline == name),
                pipelines_table.delete().where(
                    pipelines_table.c.name == name, pipelines_table.c.name != PIPELINE_DEFAULT
                ),
            ):
                conn.execute(statement)
            return RetiredPipeline(
                pipeline=name,
                jobs=tuple(sorted(jobs)),
                sources=tuple(sources),
                tables=tuple(tables),
                epochs=epoch_count,
            )

    def _keep_epoch_high_water(self, conn: sa.Connection) -> None:
        """Record the newest epoch id issued, so that ids stay unique after the epochs of a
        retired pipeline are deleted (Delta logs kept on disk still name them)."""
        m = meta_table
        newest = self._next_epoch_id(conn) - 1
        conn.execute(m.delete().where(m.c.key == META_EPOCH_HIGH_WATER))
        conn.execute(m.insert().values(key=META_EPOCH_HIGH_WATER, value=str(newest)))

    def _active_readers(self, conn: sa.Connection, tables: Sequence[str], *, but: str) -> list[str]:
        ji, j = job_inputs_table, jobs_table
        return list(
            conn.execute(
                sa.select(ji.c.job)
                .join(j, j.c.name == ji.c.job)
                .where(ji.c.table_name.in_(list(tables)), j.c.retired_at.is_(None), j.c.name != but)
                .distinct()
                .order_by(ji.c.job)
            ).scalars()
        )

    def retire_job(self, name: str) -> JobInfo:
        with self._write() as conn:
            row = self._job_row(conn, name)
            if row.retired_at is None:
                outputs = [row.output, *json.loads(row.side_outputs)]
                readers = self._active_readers(conn, outputs, but=name)
                if readers:
                    raise RetirementBlockedError(
                        kind="job",
                        name=name,
                        blockers=readers,
                        reason=f"active job(s) {', '.join(map(repr, readers))} read its "
                        f"output(s) {', '.join(map(repr, outputs))}; retire them first",
                    )
                conn.execute(
                    jobs_table.update()
                    .where(jobs_table.c.name == name)
                    .values(retired_at=self._now(conn))
                )
            return self._job_info(self._job_row(conn, name), self._job_inputs(conn, name))

    def retire_table(self, name: str) -> TableInfo:
        with self._write() as conn:
            row = self._table_row(conn, name)
            if row.retired_at is None:
                if row.writer_job is not None:
                    writer = self._job_row(conn, row.writer_job)
                    if writer.retired_at is None:
                        raise RetirementBlockedError(
                            kind="table",
                            name=name,
                            blockers=[writer.name],
                            reason=f"its writer job {writer.name!r} is active; retire the job "
                            "first",
                        )
                readers = self._active_readers(conn, [name], but="")
                if readers:
                    raise RetirementBlockedError(
                        kind="table",
                        name=name,
                        blockers=readers,
                        reason=f"active job(s) {', '.join(map(repr, readers))} read it; "
                        "retire them first",
                    )
                conn.execute(
                    tables_table.update()
                    .where(tables_table.c.name == name)
                    .values(retired_at=self._now(conn))
                )
            return self._table_info(self._table_row(conn, name))

    def lineage(self) -> list[LineageEdge]:
        edges = []
        for job in self.list_jobs():
            if job.source is not None:
                edges.append(LineageEdge(src=job.source, dst=job.name, kind="source"))
            edges.extend(LineageEdge(src=t, dst=job.name, kind="input") for t in job.inputs)
            edges.extend(
                LineageEdge(src=job.name, dst=t, kind="output")
                for t in (job.output, *job.side_outputs)
            )
        return edges

    @staticmethod
    def _job_inputs(conn: sa.Connection, job: str) -> tuple[str, ...]:
        return tuple(
            conn.execute(
                sa.select(job_inputs_table.c.table_name)
                .where(job_inputs_table.c.job == job)
                .order_by(job_inputs_table.c.position)
            ).scalars()
        )

    @staticmethod
    def _all_job_inputs(conn: sa.Connection) -> dict[str, tuple[str, ...]]:
        inputs: dict[str, list[str]] = {}
        for job, table in conn.execute(
            sa.select(job_inputs_table.c.job, job_inputs_table.c.table_name).order_by(
                job_inputs_table.c.job, job_inputs_table.c.position
            )
        ):
            inputs.setdefault(job, []).append(table)
        return {job: tuple(tables) for job, tables in inputs.items()}

    @staticmethod
    def _job_info(row: Any, inputs: Sequence[str]) -> JobInfo:
        return JobInfo(
            name=row.name,
            output=row.output,
            mode=row.mode,
            inputs=tuple(inputs),
            source=row.source,
            keys=tuple(json.loads(row.keys)),
            side_outputs=tuple(json.loads(row.side_outputs)),
            created_at=row.created_at,
            pipeline=row.pipeline,
            retired_at=row.retired_at,
        )

    @staticmethod
    def _has_states(conn: sa.Connection, table: str) -> bool:
        return (
            conn.execute(
                sa.select(table_epochs_table.c.epoch)
                .where(table_epochs_table.c.table_name == table)
                .limit(1)
            ).first()
            is not None
        )
