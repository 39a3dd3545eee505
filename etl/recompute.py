"""Recompute tables along the lineage as one revision that readers see all at once
(``etl recompute``; docs/design.md, "Recompute: revisions").

A recompute of the tables S from epoch E:

1. takes the leases of the jobs writing S (their fence: a new generation), recovers them
   (seal or roll back what a crashed run left), and discards any revision an earlier
   recompute left BUILDING (its Delta versions are rolled back, saying so);
2. records revision N BUILDING in the catalog;
3. per job, upstream first: RESTOREs each of its tables to its version at epoch E-1 (or
   empties it) and writes the epochs E..L again as new Delta versions, reading its inputs
   inside S at the versions this revision wrote and the others at their sealed versions
   (a source job replays its recorded slices); coalesced into as few batches as the
   tables' latest epochs allow, or one batch per originally sealed epoch (``per_epoch``).
   No catalog state changes: read-committed and repeatable-read readers go on reading the
   recorded versions, i.e. the old revision;
4. switches: one catalog transaction records the new versions of every table of S
   together (the replaced states are kept with the revision), then gives the leases back.

Every commit and RESTORE of a revision carries :data:`consistency.META_REVISION` in its
commitInfo. Killed before the switch, the revision stays BUILDING: the next recompute, or
``etl recover`` / ``etl run`` (:func:`discard_abandoned`), RESTOREs its tables to their
sealed versions and marks it DISCARDED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from catalog import (
    Catalog,
    CommitManifest,
    EpochState,
    Lease,
    LeaseHeldError,
    Revision,
    SealRequest,
    ValidationRecord,
    WriteMode,
)
from consistency import META_JOB, META_REVISION, EpochBatch
from etl.delta import (
    EPOCH_COLUMN,
    Fence,
    claim_table,
    open_table,
    restore_table,
    table_version,
)
from etl.engine import (
    BatchResult,
    BatchWrite,
    EpochEngine,
    EpochWriter,
    previous_output,
    recover,
)
from etl.errors import RecomputeError, SourceError
from etl.faults import maybe_crash
from etl.leases import LeaseKeeper, busy_error, make_owner, operator
from etl.pipeline import Job, Pipeline
from etl.registration import catalog_pipeline_name
from etl.revisions import abandoned_revisions, writer_of
from etl.scheduling import DEFAULT_LEASE_TTL_SECONDS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecomputeRequest:
    """What ``etl recompute`` was asked."""

    tables: tuple[str, ...]
    downstream: bool = False
    """Recompute every table derived from ``tables`` too (else: refuse if there is one)."""
    from_epoch: int | None = None
    """The first epoch recomputed (default: each table's first epoch)."""
    per_epoch: bool = False
    """One batch per originally sealed epoch (time travel stays epoch-granular); else
    coalesced into as few batches as the tables' latest epochs allow."""
    reason: str = ""
    actor: str = field(default_factory=operator)


@dataclass(frozen=True)
class TableRecompute:
    """What a revision wrote into one table."""

    table: str
    job: str
    batches: tuple[tuple[int, int], ...]
    """The batches (first, last epoch) written, oldest first."""
    version: int
    """The Delta version of its newest recomputed epoch."""
    rows: int


@dataclass(frozen=True)
class RecomputeResult:
    revision: Revision
    tables: tuple[TableRecompute, ...]
    discarded: tuple[Revision, ...] = ()
    """Revisions an earlier recompute left BUILDING that this one rolled back first."""


# -- which jobs --------------------------------------------------------------------------


def recompute_jobs(pipeline: Pipeline, tables: Sequence[str], *, downstream: bool) -> list[Job]:
    """The jobs a recompute of ``tables`` runs, upstream first: their writers and, with
    ``downstream``, every job reading what they write, transitively. Without it a job
    reading a recomputed table is refused, naming its tables: it would be left derived
    from data no reader sees any more."""
    chosen = {writer_of(pipeline, table).name for table in tables}
    ordered = pipeline.ordered_jobs()
    left_out: dict[str, list[str]] = {}
    for job in ordered:
        if job.name in chosen:
            continue
        written = {t for j in ordered if j.name in chosen for t in pipeline.tables_of(j)}
        read = [item.table for item in job.inputs if item.table in written]
        if not read:
            continue
        if downstream:
            chosen.add(job.name)
        else:
            left_out[job.output] = read
    if left_out:
        derived = ", ".join(f"{t} (reads {', '.join(r)})" for t, r in left_out.items())
        raise RecomputeError(
            f"recomputing {', '.join(tables)} would leave derived tables inconsistent with "
            f"it: {derived}. Add --downstream to recompute them too, or name them",
            tables=tuple(left_out),
        )
    return [job for job in ordered if job.name in chosen]


# -- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _JobPlan:
    job: Job
    batches: tuple[EpochBatch, ...]
    bases: Mapping[str, int | None]
    """Per table of the job, the Delta version its content is restored to first (None:
    empty): its version at the epoch before the first recomputed one."""


def _plan(
    catalog: Catalog, pipeline: Pipeline, jobs: Sequence[Job], request: RecomputeRequest
) -> list[_JobPlan]:
    inside = {t for job in jobs for t in pipeline.tables_of(job)}
    first = request.from_epoch or min(catalog.get_table(j.output).first_epoch for j in jobs)
    latest = catalog.latest_written([j.output for j in jobs])
    if request.per_epoch:
        candidates = {
            s.epoch
            for j in jobs
            for s in catalog.table_epochs(j.output, after=first - 1)
            if s.state is EpochState.WRITTEN
        }
    else:
        candidates = {row.epoch for row in latest.values()}
    plans: list[_JobPlan] = []
    ends_of: dict[str, list[int]] = {}
    for job in jobs:
        info = catalog.get_table(job.output)
        start = max(first, info.first_epoch)
        sealed = latest.get(job.output)
        if sealed is None or sealed.epoch < start:
            continue
        outside = [i.table for i in job.inputs if i.table not in inside]
        upstream = [ends_of[i.table] for i in job.inputs if i.table in ends_of]
        ends = []
        for epoch in sorted(e for e in candidates if start <= e <= sealed.epoch):
            if epoch != sealed.epoch and (
                any(epoch not in found for found in upstream)
                or not _written_at(catalog, outside, epoch)
            ):
                continue
            ends.append(epoch)
        if sealed.epoch not in ends:
            ends.append(sealed.epoch)
        missing = [
            i.table
            for i in job.inputs
            if i.table in ends_of and sealed.epoch not in ends_of[i.table]
        ]
        if missing:
            raise RecomputeError(
                f"table {job.output!r} is sealed through epoch {sealed.epoch}, which its "
                f"recomputed inputs {missing} do not reach: run the pipeline until they are "
                "level (etl run FILE --once), then recompute",
                tables=missing,
            )
        batches, previous = [], start - 1
        for end in ends:
            batches.append(EpochBatch(first=previous + 1, last=end))
            previous = end
        for table in pipeline.tables_of(job):
            ends_of[table] = ends
        plans.append(
            _JobPlan(
                job=job,
                batches=tuple(batches),
                bases={t: _base_version(catalog, t, start) for t in pipeline.tables_of(job)},
            )
        )
    if not plans:
        raise RecomputeError(
            f"nothing to recompute: {', '.join(request.tables)} have no epoch sealed from "
            f"epoch {first} on",
            tables=request.tables,
        )
    return plans


def _check_replayable(catalog: Catalog, plans: Sequence[_JobPlan]) -> None:
    """RecomputeError naming every recorded slice a source job of the plan cannot read
    again (files deleted, offsets expired), before anything is written."""
    problems, tables = [], []
    for plan in plans:
        source = plan.job.source
        if source is None:
            continue
        first, last = plan.batches[0].first, plan.batches[-1].last
        for recorded in catalog.slices(source.name, after=first - 1, up_to=last):
            try:
                source.check_replayable(recorded.bounds, epoch=recorded.epoch)
            except SourceError as exc:
                problems.append(str(exc))
                tables.append(plan.job.output)
    if problems:
        raise RecomputeError(
            f"cannot recompute {', '.join(dict.fromkeys(tables))}: its source cannot replay "
            f"what it recorded, so the recompute would not read the same input: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
            + ". Nothing was changed",
            tables=tuple(dict.fromkeys(tables)),
        )


def _written_at(catalog: Catalog, tables: Sequence[str], epoch: int) -> bool:
    states = catalog.states_at(tables, epoch)
    return all(t in states and states[t].state is EpochState.WRITTEN for t in tables)


def _base_version(catalog: Catalog, table: str, start: int) -> int | None:
    """The version holding ``table``'s epochs before ``start``; None: none (empty)."""
    if start <= catalog.get_table(table).first_epoch:
        return None
    state = catalog.table_epoch(table, start - 1)
    if state is not None and state.state is EpochState.WRITTEN:
        return state.delta_version
    before = catalog.latest_written([table], at_or_before=start - 1).get(table)
    batch_start = before.epoch + 1 if before is not None else catalog.get_table(table).first_epoch
    raise RecomputeError(
        f"table {table!r} cannot be recomputed from epoch {start}: epoch {start - 1} is "
        f"{state.state if state else 'not sealed'}"
        + (
            f" (coalesced into epoch {state.coalesced_into})"
            if state and state.coalesced_into
            else ""
        )
        + f", so no version holds the table as it was before epoch {start}; recompute from "
        f"epoch {batch_start}, where its batch starts (--from-epoch {batch_start})",
        tables=(table,),
    )


# -- building the revision ---------------------------------------------------------------


@dataclass(frozen=True)
class RevisionWriter(EpochWriter):
    """Writes a revision's batch through the engine's batch path (write, audit, seal), its
    commits tagged with the revision. The catalog state stays the old revision's until the
    switch: no PROCESSED, schema, validation or seal is recorded; ``build`` keeps them."""

    revision: int = 0
    build: _Build | None = field(default=None, compare=False)
    before: Mapping[str, int | None] = field(default_factory=dict)
    """Per table of the job, its version when the batch started (None: empty)."""
    rewrite: frozenset[str] = frozenset()
    """Tables recomputed from their first epoch whose first commit is still to come: it
    overwrites them with the transform's schema, whatever changed."""

    @property
    def metadata(self) -> dict[str, str | int | bool]:
        return {**super().metadata, META_REVISION: self.revision}

    def write(
        self,
        written: BatchWrite,
        *,
        table: str,
        frame: DataFrame,
        part: int,
        final: bool,
        mode: WriteMode,
        base: int | None = None,
        audit: bool = False,
        planned: bool = False,
    ) -> BatchWrite:
        if table not in self.rewrite or table in written.versions:
            return super().write(
                written,
                table=table,
                frame=frame,
                part=part,
                final=final,
                mode=mode,
                base=base,
                audit=audit,
                planned=planned,
            )
        prepared = self.prepare(
            table=table,
            frame=frame,
            mode=mode,
            base=None,  # a merge into nothing writes its rows as they are
            name=f"{self.batch.last}-{self.attempt}-{part}",
            planned=planned,
        )
        return self.commit_prepared(
            written,
            table=table,
            prepared=prepared,
            part=part,
            final=final,
            overwrite=True,
            replace_schema=True,
        )

    def record(self, written: BatchWrite, *, table: str, version: int, rows: int) -> BatchWrite:
        assert self.build is not None
        self.build.rewritten.discard(table)
        return written.committed(table, version=version, rows=rows)

    def record_schema(self, table: str) -> frozenset[str] | None:
        """The switch records the revision's schemas."""
        return None

    def version_before(self, table: str) -> int | None:
        return self.before[table]

    def record_validation(self, record: ValidationRecord) -> None:
        assert self.build is not None
        self.build.validations.append((self.job.name, record))

    def seal(self, requests: Sequence[SealRequest]) -> CommitManifest | None:
        assert self.build is not None
        self.build.recorded(requests)
        return None


class _Build:
    """One revision being written: the versions it has written so far, per table and epoch,
    and what the switch records."""

    def __init__(
        self,
        engine: EpochEngine,
        revision: Revision,
        leases: Mapping[str, Lease],
        check: Callable[[str], None],
    ) -> None:
        self.engine = engine
        self.catalog = engine.catalog
        self.pipeline = engine.pipeline
        self.revision = revision
        self.leases = leases
        self.check = check
        self.versions: dict[str, dict[int, int]] = {}
        self.seals: list[SealRequest] = []
        self.validations: list[tuple[str, ValidationRecord]] = []
        """The quality gates' verdicts on the revision's batches (job, record): recorded
        with the switch, since until then readers see the old revision's."""
        self.rewritten: set[str] = set()
        """Tables recomputed from their first epoch whose first commit is still to come."""

    def location(self, table: str) -> str:
        return self.catalog.get_table(table).location

    def recorded(self, requests: Sequence[SealRequest]) -> None:
        """What the switch records for a batch: each table of its job at the version the
        batch left it at."""
        for request in requests:
            self.versions.setdefault(request.table, {})[request.epoch] = request.delta_version
        self.seals.extend(requests)

    def run(self, plan: _JobPlan) -> TableRecompute:
        job = plan.job
        lease = self.leases[job.name]
        fence = Fence(job.name, lease.generation)
        tables = self.pipeline.tables_of(job)
        self.rewritten |= {t for t in tables if plan.bases[t] is None}
        for table in tables:
            location = self.location(table)
            current = table_version(location)
            if current is not None and plan.bases[table] != current:
                restore_table(
                    location,
                    to_version=plan.bases[table],
                    planned_at=current,
                    fence=fence,
                    metadata={META_REVISION: self.revision.id, META_JOB: job.name},
                )
        rows = 0
        for batch in plan.batches:
            rows += self._batch(job, batch, lease)
        output = self.versions[job.output]
        return TableRecompute(
            table=job.output,
            job=job.name,
            batches=tuple((b.first, b.last) for b in plan.batches),
            version=output[plan.batches[-1].last],
            rows=rows,
        )

    def _batch(self, job: Job, batch: EpochBatch, lease: Lease) -> int:
        """Run one batch of the revision: read its inputs as the revision has them, then
        the engine's batch steps (transform, write, audit, seal into the build)."""
        engine, catalog = self.engine, self.catalog
        tables = self.pipeline.tables_of(job)
        locations = {t: self.location(t) for t in tables}
        before = {t: table_version(locations[t]) for t in tables}
        writer = RevisionWriter(
            catalog=catalog,
            spark=engine.spark,
            job=job,
            batch=batch,
            attempt=catalog.max_attempt(tables, batch.last) + 1,
            lease=lease,
            check_lease=lambda: self.check(job.name),
            locations=locations,
            revision=self.revision.id,
            build=self,
            before=before,
            rewrite=frozenset(self.rewritten & set(tables)),
        )
        session = engine.spark.newSession()
        barrier_ts = catalog.get_epoch(batch.last).barrier_ts
        output_location = locations[job.output]
        previous = before[job.output]

        def read_previous() -> DataFrame | None:
            if previous is None:
                return None
            return previous_output(session, output_location, previous)

        written = BatchWrite()
        rejects: DataFrame | None = None
        if job.source is not None:
            frames, rejected = [], []
            for recorded in catalog.slices(
                job.source.name, after=batch.first - 1, up_to=batch.last
            ):
                for part in job.source.micro_batches(recorded.bounds):
                    data = job.source.read(session, part, epoch=recorded.epoch)
                    frames.append(data.rows)
                    if data.rejects is not None:
                        rejected.append(data.rejects)
            if not frames:  # no slice recorded in the batch: it wrote nothing, nor does this
                return self._publish(writer, written).rows
            inputs = {job.source.name: _union(frames)}
            if job.rejects_table and rejected:
                rejects = _union(rejected)
        else:
            versions = {}
            for item in job.inputs:
                mine = self.versions.get(item.table)
                if mine is not None:
                    versions[item.table] = (self.location(item.table), mine[batch.last])
                    continue
                state = catalog.table_epoch(item.table, batch.last)
                assert state is not None and state.delta_version is not None  # planned so
                versions[item.table] = (self.location(item.table), state.delta_version)
            inputs = engine.read_inputs(job, batch, session, versions)
        rows, _ = engine.transform(
            job, session, batch, barrier_ts, inputs, read_previous=read_previous
        )
        written = writer.write(
            written, table=job.output, frame=rows, part=0, final=True, mode=job.mode
        )
        if rejects is not None and job.rejects_table:
            from pyspark.sql import functions as F

            if EPOCH_COLUMN not in rejects.columns:
                rejects = rejects.withColumn(EPOCH_COLUMN, F.lit(batch.last).cast("long"))
            written = writer.write(
                written, table=job.rejects_table, frame=rejects, part=0, final=True, mode="append"
            )
        return self._publish(writer, written).rows

    def _publish(self, writer: RevisionWriter, written: BatchWrite) -> BatchResult:
        """The engine's audit and seal of the batch; a gate's failure that its policy does
        not let through (rows failing a ``quarantine`` gate are quarantined) fails the
        revision: nothing is switched."""
        job, batch = writer.job, writer.batch
        result = self.engine.publish(writer, written)
        if not result.sealed:
            raise RecomputeError(
                f"revision {self.revision.id} of {job.output!r} fails its quality gate at "
                f"epochs {batch.first}..{batch.last}: {result.blocked_reason}. Nothing was "
                "switched (readers never saw it); fix the transform and recompute again",
                tables=(job.output,),
            )
        return result


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame, allowMissingColumns=True)
    return result


# -- abandoned revisions -----------------------------------------------------------------


def _roll_back(
    catalog: Catalog, pipeline: Pipeline, revision: Revision, leases: Mapping[str, Lease], note: str
) -> Revision:
    """Claim the revision's tables and RESTORE each to its sealed version; mark it DISCARDED."""
    jobs = {writer_of(pipeline, t).name: writer_of(pipeline, t) for t in revision.tables}
    for job in jobs.values():
        fence = Fence(job.name, leases[job.name].generation)
        for table in pipeline.tables_of(job):
            location = catalog.get_table(table).location
            current = claim_table(location, fence=fence)
            sealed = catalog.latest_written([table]).get(table)
            target = sealed.delta_version if sealed is not None else None
            if current is not None and target != current:
                restore_table(
                    location,
                    to_version=target,
                    planned_at=current,
                    fence=fence,
                    metadata={META_REVISION: revision.id, META_JOB: job.name},
                )
    return catalog.discard_revision(revision.id, note=note)


def discard_abandoned(
    catalog: Catalog, pipeline: Pipeline, name: str, leases: Mapping[str, Lease]
) -> list[Revision]:
    """Discard every revision of pipeline ``name`` whose recompute is gone and whose jobs'
    leases are in ``leases`` (so it can never be switched: the generations moved on): its
    tables are RESTOREd to their sealed versions. Returns the discarded revisions."""
    discarded = []
    for revision in abandoned_revisions(catalog, name):
        if any(writer_of(pipeline, t).name not in leases for t in revision.tables):
            continue
        discarded.append(
            _roll_back(
                catalog,
                pipeline,
                revision,
                leases,
                note="abandoned before its switch (killed); its Delta versions were rolled "
                "back to the sealed ones",
            )
        )
        log.warning("discarded revision %s (abandoned before its switch)", revision.id)
    return discarded


# -- the task ----------------------------------------------------------------------------


def recompute(
    catalog: Catalog,
    pipeline: Pipeline,
    spark: SparkSession,
    request: RecomputeRequest,
    *,
    warehouse: str,
    owner: str | None = None,
    lease_ttl_seconds: float = DEFAULT_LEASE_TTL_SECONDS,
    wait_seconds: float = 60.0,
) -> RecomputeResult:
    """Recompute ``request.tables`` (see the module docstring); raises RecomputeError for
    a request that cannot be done (nothing switched), PipelineBusyError when a lease it
    needs stays held for ``wait_seconds`` (a run of the pipeline leaves the jobs to it as
    soon as their batches end: the revision, recorded first, asks for them)."""
    name = catalog_pipeline_name(pipeline, catalog, warehouse)
    for table in request.tables:
        catalog.get_table(table)  # UnknownTableError names it
    jobs = recompute_jobs(pipeline, request.tables, downstream=request.downstream)
    owner = owner or make_owner()
    stale_jobs = {
        writer_of(pipeline, t).name
        for revision in abandoned_revisions(catalog, name)
        for t in revision.tables
    }
    chosen = {j.name for j in jobs}
    lease_jobs = [j.name for j in pipeline.ordered_jobs() if j.name in chosen | stale_jobs]
    revision = catalog.begin_revision(
        pipeline=name,
        tables=[t for job in jobs for t in pipeline.tables_of(job)],
        from_epoch=request.from_epoch or min(catalog.get_table(j.output).first_epoch for j in jobs),
        reason=request.reason,
        actor=request.actor,
        owner=owner,
    )
    keeper = LeaseKeeper(catalog, owner=owner, ttl_seconds=lease_ttl_seconds)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            keeper.acquire(lease_jobs)
            break
        except LeaseHeldError as exc:
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            catalog.discard_revision(
                revision.id, note=f"job {exc.job}'s lease stayed held by {exc.owner}"
            )
            raise busy_error(pipeline.name, exc) from exc
    try:
        leases = {job: keeper.lease(job) for job in lease_jobs}
        discarded = discard_abandoned(catalog, pipeline, name, leases)
        engine = EpochEngine(pipeline=pipeline, catalog=catalog, spark=spark)
        build = _Build(engine, revision, leases, keeper.check)
        try:
            for job in jobs:
                recover(engine, job, leases[job.name], check_lease=partial(keeper.check, job.name))
            plans = _plan(catalog, pipeline, jobs, request)
            _check_replayable(catalog, plans)
        except Exception as exc:  # nothing of the revision was written
            catalog.discard_revision(revision.id, note=f"refused: {exc}")
            raise
        try:
            results = tuple(build.run(plan) for plan in plans)
        except Exception as exc:
            # Roll the revision back now rather than leave it to the next recompute.
            _roll_back(catalog, pipeline, revision, leases, note=f"failed: {exc}")
            if isinstance(exc, RecomputeError):
                raise
            raise RecomputeError(
                f"revision {revision.id} failed and was discarded (readers never saw it): {exc}",
                tables=revision.tables,
            ) from exc
        through = max(plan.batches[-1].last for plan in plans)
        for plan in plans:
            maybe_crash("before_seal", job=plan.job.name, epoch=through)
        switched = catalog.switch_revision(
            revision.id,
            generations={job.name: leases[job.name].generation for job in jobs},
            seals=build.seals,
            schemas={t: open_table(build.location(t)).schema().to_json() for t in revision.tables},
        )
        for job_name, record in build.validations:
            catalog.record_validation(record, job=job_name, generation=leases[job_name].generation)
        for plan in plans:
            maybe_crash("after_seal", job=plan.job.name, epoch=through)
        return RecomputeResult(revision=switched, tables=results, discarded=tuple(discarded))
    finally:
        keeper.release()


__all__ = [
    "RecomputeRequest",
    "RecomputeResult",
    "RevisionWriter",
    "TableRecompute",
    "discard_abandoned",
    "recompute",
    "recompute_jobs",
]
