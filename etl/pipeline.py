"""Declaring a pipeline: sources, jobs (Python or SQL transforms) and quality gates.

A pipeline file is a Python file that builds a :class:`Pipeline` and exposes it as
``pipeline``. Parameters given on the command line (``--param key=value``) are read
with :func:`param`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, get_args

from catalog import JobSpec, TableSpec, WriteMode, validate_name
from consistency.retention import Retention
from etl.delta.merge import MERGE_STRATEGIES, MergeStrategy
from etl.errors import MissingParamError, PipelineDefinitionError
from etl.sources.base import Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from etl.quality import QualityGate

InputRead = Literal["slice", "snapshot"]
_WRITE_MODES: tuple[str, ...] = get_args(WriteMode)


@dataclass(frozen=True)
class Input:
    """A table a job reads: the epoch's ``slice`` of its rows, or its ``snapshot`` at the epoch."""

    table: str
    read: InputRead | None = None
    """Default: ``slice`` for append and merge jobs, ``snapshot`` for overwrite jobs."""


_PER_EPOCH = frozenset({"epoch", "first_epoch", "barrier_ts", "previous"})


@dataclass(frozen=True)
class EpochContext:
    """What a transform sees: its inputs at one epoch (or one batch of coalesced epochs)."""

    spark: SparkSession
    job: str
    epoch: int
    first_epoch: int
    barrier_ts: datetime
    inputs: Mapping[str, DataFrame]
    read_previous: Callable[[], DataFrame | None] = field(
        default=lambda: None, repr=False, compare=False
    )
    per_epoch_reads: set[str] = field(default_factory=set, repr=False, compare=False)
    """What the transform read of what changes from one epoch to the next: its epoch
    numbers, barrier time or previous output. One that read none of it computes the same
    rows from the same inputs (docs/design.md, "Idle epochs")."""

    def __getattribute__(self, name: str) -> Any:
        if name in _PER_EPOCH:
            object.__getattribute__(self, "per_epoch_reads").add(name)
        return object.__getattribute__(self, name)

    @cached_property
    def previous(self) -> DataFrame | None:
        """The job's own output as of its last sealed epoch (None before its first epoch);
        read only if the transform asks for it."""
        return self.read_previous()

    def __getitem__(self, name: str) -> DataFrame:
        try:
            return self.inputs[name]
        except KeyError:
            raise KeyError(
                f"job {self.job!r} has no input {name!r}; inputs: {sorted(self.inputs)}"
            ) from None


Transform = Callable[[EpochContext], "DataFrame"]


@dataclass(frozen=True)
class Job:
    """One step of the pipeline: inputs (tables, or one source) -> one output table."""

    name: str
    output: str
    transform: Transform | str | None = None
    """A function of the EpochContext, or a SQL statement over the inputs' table names
    (the output's own name reads its previous state). None: a source job's rows as read."""
    inputs: tuple[Input, ...] = ()
    source: Source | None = None
    mode: WriteMode = "append"
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    rejects: str | None = None
    """Table for records the source could not decode (source jobs; default <output>_rejects)."""
    merge_strategy: MergeStrategy = field(default="deletion-vectors", kw_only=True)
    """How a merge job replaces updated rows (:func:`etl.delta.merge_files`):
    ``deletion-vectors`` (merge-on-read; its new table gets the Delta feature) or
    ``copy-on-write`` (rewrites the files holding updated keys; plain protocol 1/2)."""

    def __post_init__(self) -> None:
        validate_name(self.name, kind="job")
        validate_name(self.output, kind="table")
        if self.mode not in _WRITE_MODES:
            raise PipelineDefinitionError(
                f"job {self.name!r}: unknown write mode {self.mode!r}; use one of {_WRITE_MODES}"
            )
        if self.merge_strategy not in MERGE_STRATEGIES:
            raise PipelineDefinitionError(
                f"job {self.name!r}: unknown merge_strategy {self.merge_strategy!r}; use one "
                f"of {list(MERGE_STRATEGIES)}"
            )
        if self.mode == "merge" and not self.keys:
            raise PipelineDefinitionError(
                f"job {self.name!r}: merge mode needs keys=(...) to match rows on"
            )
        if (self.source is None) == (not self.inputs):
            raise PipelineDefinitionError(
                f"job {self.name!r}: give either one source or at least one input table"
            )
        if self.source is None and self.transform is None:
            raise PipelineDefinitionError(f"job {self.name!r}: a derived job needs a transform")
        for item in self.inputs:
            validate_name(item.table, kind="table")
            if item.read is not None and item.read not in get_args(InputRead):
                raise PipelineDefinitionError(
                    f"job {self.name!r}: input {item.table!r} read must be 'slice' or 'snapshot'"
                )
        if self.rejects is not None:
            validate_name(self.rejects, kind="table")

    @property
    def rejects_table(self) -> str | None:
        if self.source is None or not self.source.produces_rejects:
            return None
        return self.rejects or f"{self.output}_rejects"

    def read_mode(self, item: Input) -> InputRead:
        return item.read or ("snapshot" if self.mode == "overwrite" else "slice")

    def spec(self, *, side_outputs: Sequence[str] = ()) -> JobSpec:
        return JobSpec(
            name=self.name,
            output=self.output,
            mode=self.mode,
            inputs=tuple(i.table for i in self.inputs),
            source=self.source.name if self.source else None,
            keys=self.keys,
            side_outputs=tuple(side_outputs),
        )


@dataclass
class Pipeline:
    """The jobs and quality gates of one pipeline."""

    name: str
    jobs: dict[str, Job] = field(default_factory=dict)
    gates: dict[str, QualityGate] = field(default_factory=dict)
    retention: Retention | None = None
    """How long epochs stay readable (None: the catalog-wide default); consistency/retention.py."""

    def __post_init__(self) -> None:
        validate_name(self.name, kind="pipeline")
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise PipelineDefinitionError(
                f"pipeline {self.name!r}: retention must be a Retention(...), got {self.retention!r}"
            )

    def add(self, job: Job) -> Job:
        if job.name in self.jobs:
            raise PipelineDefinitionError(f"pipeline {self.name!r} already has a job {job.name!r}")
        self.jobs[job.name] = job
        return job

    def job(
        self,
        name: str,
        *,
        output: str,
        inputs: Sequence[str | Input] = (),
        source: Source | None = None,
        mode: WriteMode = "append",
        keys: Sequence[str] = (),
        partition_by: Sequence[str] = (),
        rejects: str | None = None,
        merge_strategy: MergeStrategy = "deletion-vectors",
    ) -> Callable[[Transform], Transform]:
        """Decorator: declare a job whose transform is the decorated function."""

        def register(fn: Transform) -> Transform:
            self.add(
                Job(
                    name=name,
                    output=output,
                    transform=fn,
                    inputs=_inputs(inputs),
                    source=source,
                    mode=mode,
                    keys=tuple(keys),
                    partition_by=tuple(partition_by),
                    rejects=rejects,
                    merge_strategy=merge_strategy,
                )
            )
            return fn

        return register

    def sql(
        self,
        name: str,
        *,
        output: str,
        query: str,
        inputs: Sequence[str | Input],
        mode: WriteMode = "append",
        keys: Sequence[str] = (),
        partition_by: Sequence[str] = (),
        merge_strategy: MergeStrategy = "deletion-vectors",
    ) -> Job:
        """Declare a job whose transform is a SQL statement over its inputs' names."""
        return self.add(
            Job(
                name=name,
                output=output,
                transform=query,
                inputs=_inputs(inputs),
                mode=mode,
                keys=tuple(keys),
                partition_by=tuple(partition_by),
                merge_strategy=merge_strategy,
            )
        )

    def ingest(
        self,
        name: str,
        *,
        source: Source,
        output: str,
        transform: Transform | None = None,
        partition_by: Sequence[str] = (),
        rejects: str | None = None,
    ) -> Job:
        """Declare a root job that appends a source's slices to ``output``."""
        return self.add(
            Job(
                name=name,
                output=output,
                transform=transform,
                source=source,
                partition_by=tuple(partition_by),
                rejects=rejects,
            )
        )

    def expect(self, gate: QualityGate) -> None:
        """Attach a data-quality gate to a table written by this pipeline."""
        self.gates[gate.table] = gate

    def gate_of(self, job: Job) -> QualityGate | None:
        """The quality gate on the job's output, if it has one."""
        return self.gates.get(job.output)

    def tables_of(self, job: Job) -> list[str]:
        """Every table the job writes and seals together: its output, then side outputs
        (the rejects table of its source, the quarantine table of its output's gate)."""
        tables = [job.output]
        if job.rejects_table:
            tables.append(job.rejects_table)
        gate = self.gate_of(job)
        if gate is not None:
            tables.append(gate.quarantine_table)
        return tables

    def job_spec(self, job: Job) -> JobSpec:
        """The job as the catalog registers it, side outputs included."""
        return job.spec(side_outputs=self.tables_of(job)[1:])

    def table_specs(self, warehouse: str) -> list[TableSpec]:
        """Every table the pipeline writes, located under the warehouse."""
        specs: dict[str, TableSpec] = {}
        for job in self.jobs.values():
            specs[job.output] = TableSpec(
                name=job.output,
                location=table_location(warehouse, job.output),
                kind="root" if job.source else "derived",
                partition_by=job.partition_by,
            )
            if job.rejects_table:
                specs[job.rejects_table] = TableSpec(
                    name=job.rejects_table,
                    location=table_location(warehouse, job.rejects_table),
                    kind="rejects",
                )
        for gate in self.gates.values():
            specs[gate.quarantine_table] = TableSpec(
                name=gate.quarantine_table,
                location=table_location(warehouse, gate.quarantine_table),
                kind="quarantine",
            )
        return list(specs.values())

    def ordered_jobs(self) -> list[Job]:
        """Jobs in lineage order (every job after the writers of its inputs)."""
        writers = {job.output: job.name for job in self.jobs.values()}
        ordered: list[Job] = []
        seen: set[str] = set()

        def visit(job: Job, path: tuple[str, ...]) -> None:
            if job.name in seen:
                return
            if job.name in path:
                raise PipelineDefinitionError(
                    f"pipeline {self.name!r} has a cycle: {' -> '.join((*path, job.name))}"
                )
            for item in job.inputs:
                upstream = writers.get(item.table)
                if upstream:
                    visit(self.jobs[upstream], (*path, job.name))
            seen.add(job.name)
            ordered.append(job)

        for job in self.jobs.values():
            visit(job, ())
        return ordered


def table_location(warehouse: str, table: str) -> str:
    """A table's directory: <warehouse>/<table>. Names are validated identifiers."""
    validate_name(table, kind="table")
    return f"{warehouse.rstrip('/')}/{table}"


def _inputs(items: Sequence[str | Input]) -> tuple[Input, ...]:
    return tuple(Input(i) if isinstance(i, str) else i for i in items)


_PARAMS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "delta_barrier_params", default=None
)


_PARAMS_READ: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "delta_barrier_params_read", default=None
)


@contextmanager
def params_read() -> Iterator[set[str]]:
    """The names of the parameters :func:`param` is asked for inside the block (what a
    pipeline file declares), so that ``etl run`` can refuse a ``--param`` nobody reads."""
    read: set[str] = set()
    token = _PARAMS_READ.set(read)
    try:
        yield read
    finally:
        _PARAMS_READ.reset(token)


def param(key: str, default: str | None = None) -> str:
    """A pipeline parameter from ``--param key=value``, or ``default``."""
    read = _PARAMS_READ.get()
    if read is not None:
        read.add(key)
    value = (_PARAMS.get() or {}).get(key, default)
    if value is None:
        raise MissingParamError(key)
    return value


@contextmanager
def parameters(values: Mapping[str, str]) -> Iterator[None]:
    """Make ``values`` visible to :func:`param` while a pipeline file is loaded."""
    token = _PARAMS.set(dict(values))
    try:
        yield
    finally:
        _PARAMS.reset(token)


__all__ = [
    "EpochContext",
    "Input",
    "InputRead",
    "Job",
    "Pipeline",
    "Transform",
    "param",
    "parameters",
    "params_read",
    "table_location",
]
