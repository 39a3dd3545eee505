"""Checking a pipeline file before anything runs: no Spark, no catalog write.

``etl validate`` runs these checks alone, ``etl run`` and ``etl recover`` run them first.
Every problem is collected (never only the first), each naming its job, table, source or
parameter and what to do:

- parameters: every ``--param`` is one the file reads (with a "did you mean"), and every
  parameter it reads without a default was given;
- inputs: every input table is written by a job of the pipeline or registered in the
  catalog (a read-only lookup), and a SQL job reads only its declared inputs (and its own
  output, its previous state);
- write modes and keys: keys go with merge (and are among a merge SQL job's result
  columns, when its SQL names them all), no table has two writer jobs, no source is
  read by two jobs, gates guard tables of the pipeline, the lineage has no cycle;
- sources can be reached (:meth:`etl.sources.base.Source.unreachable`);
- registration (``etl validate`` with a catalog; ``etl run`` checks it itself): no name
  another pipeline owns, no input table of another pipeline.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from etl.errors import (
    DeltaBarrierError,
    MissingParamError,
    PipelineDefinitionError,
    PipelineInvalidError,
    SqlTablesError,
    UsageError,
)
from etl.pipeline import Pipeline, params_read

if TYPE_CHECKING:
    from catalog import Catalog

Subject = Literal["pipeline", "param", "job", "table", "source", "gate"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a pipeline file: what it is about, and what to do."""

    subject: Subject
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject} {self.name!r}: {self.message}"


@dataclass(frozen=True)
class Validation:
    """The outcome of validating a pipeline file: the pipeline (None when it could not be
    built, e.g. a required parameter is missing) and every problem found."""

    path: str
    pipeline: Pipeline | None
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.pipeline is not None and not self.problems

    def checked(self) -> Pipeline:
        """The pipeline; PipelineInvalidError listing every problem if there is one."""
        if self.pipeline is None or self.problems:
            raise PipelineInvalidError(path=self.path, problems=[str(p) for p in self.problems])
        return self.pipeline

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "pipeline": self.pipeline.name if self.pipeline is not None else None,
            "ok": self.ok,
            "problems": [
                {"subject": p.subject, "name": p.name, "message": p.message} for p in self.problems
            ],
        }


def validate_file(
    path: str | Path,
    params: Mapping[str, str],
    *,
    catalog: Catalog | None = None,
    check_sources: bool = True,
) -> Validation:
    """Load the pipeline file with ``params`` and validate it. A file that cannot be loaded
    at all (no such file, a syntax error, an exception) raises PipelineLoadError."""
    pipeline, read, missing = _load_reading_params(path, params)
    problems = param_problems(params, read, missing=missing)
    if pipeline is not None:
        problems += validate_pipeline(pipeline, catalog=catalog, check_sources=check_sources)
    return Validation(path=str(path), pipeline=pipeline, problems=tuple(problems))


def _load_reading_params(
    path: str | Path, params: Mapping[str, str]
) -> tuple[Pipeline | None, set[str] | None, list[str]]:
    """The pipeline (None when a required parameter is missing), the parameters the file
    reads (None when that cannot be told) and the required ones missing.

    Loading stops at the first missing parameter, so the file is loaded again with a
    stand-in (an empty string) for each one missing, to learn the others; a stand-in the
    file cannot take (it fails otherwise) leaves what it reads after it unknown."""
    from etl.loader import load_pipeline

    missing: list[str] = []
    while True:
        with params_read() as read:
            try:
                pipeline = load_pipeline(path, {**params, **dict.fromkeys(missing, "")})
            except MissingParamError as exc:
                missing.append(exc.key)
                continue
            except DeltaBarrierError:
                if not missing:
                    raise
                return None, None, missing
        return (None if missing else pipeline), read, missing


def validate_pipeline(
    pipeline: Pipeline, *, catalog: Catalog | None = None, check_sources: bool = True
) -> list[Problem]:
    """Every problem of a loaded pipeline. ``catalog``: looked up (read-only) for input
    tables no job of the pipeline writes; without one, those are problems."""
    registered = {t.name for t in catalog.list_tables()} if catalog is not None else set()
    problems = declaration_problems(pipeline, registered)
    if check_sources:
        problems += source_problems(pipeline)
    return problems


def registration_problems(pipeline: Pipeline, catalog: Catalog, warehouse: str) -> list[Problem]:
    """What registering the pipeline in ``catalog`` would refuse (checked read-only, as
    ``etl run`` checks it before Spark starts): a job, source or table name another
    pipeline owns, an input table of another pipeline, a table location that already holds
    a Delta table."""
    from catalog import RegistrationError
    from etl.registration import check_registration

    try:
        check_registration(catalog, pipeline, warehouse)
    except (RegistrationError, UsageError) as exc:
        return [Problem("pipeline", pipeline.name, str(exc))]
    return []


def param_problems(
    given: Mapping[str, str], read: Collection[str] | None, *, missing: Sequence[str] = ()
) -> list[Problem]:
    """``--param`` names the file does not read (with the closest it does; none when
    ``read`` is unknown), and the required ones missing."""
    problems = []
    read = set(read) if read is not None else set(given)
    for key in sorted(set(given) - read):
        close = _closest(key, set(read) - set(given)) or _closest(key, read)
        hint = f"did you mean {close!r}?" if close else None
        declared = ", ".join(sorted(read)) or "none"
        problems.append(
            Problem(
                "param",
                key,
                f"unknown param {key!r}"
                + (f", {hint}" if hint else "")
                + f" (the file reads: {declared})",
            )
        )
    for key in missing:
        problems.append(Problem("param", key, f"required: pass --param {key}=VALUE"))
    return problems


def declaration_problems(pipeline: Pipeline, registered: Collection[str]) -> list[Problem]:
    """What the pipeline declares that cannot run together: inputs, SQL reads, write
    modes and keys, writers, sources, gates, cycles. ``registered``: the tables the
    catalog knows (active ones, of every pipeline)."""
    from etl.reader import tables_in_sql

    problems: list[Problem] = []
    if not pipeline.jobs:
        problems.append(
            Problem(
                "pipeline", pipeline.name, "declares no job: add one (pipeline.job, .sql, .ingest)"
            )
        )
    writers: dict[str, list[str]] = {}
    for job in pipeline.jobs.values():
        for table in pipeline.tables_of(job):
            writers.setdefault(table, []).append(job.name)
    own = set(writers)
    for table, jobs in writers.items():
        if len(jobs) > 1:
            problems.append(
                Problem(
                    "table",
                    table,
                    f"written by jobs {jobs}: a table has one writer job; give each its own output",
                )
            )
    readers: dict[str, list[str]] = {}
    for job in pipeline.jobs.values():
        if job.source is not None:
            readers.setdefault(job.source.name, []).append(job.name)
        declared = [item.table for item in job.inputs]
        for table in declared:
            if table not in own and table not in registered:
                close = _closest(table, own) or _closest(table, registered)
                problems.append(
                    Problem(
                        "job",
                        job.name,
                        f"input {table!r} is neither written by a job of pipeline "
                        f"{pipeline.name!r} nor registered in the catalog"
                        + (f"; did you mean {close!r}?" if close else "")
                        + "; fix inputs=[...], or run the pipeline that writes it first",
                    )
                )
        if isinstance(job.transform, str):
            try:
                read = tables_in_sql(job.transform)
            except SqlTablesError as exc:
                problems.append(Problem("job", job.name, f"its SQL: {exc}"))
                read = []
            allowed = {t.lower() for t in (*declared, job.output)}
            undeclared = [t for t in read if t.lower() not in allowed]
            if undeclared:
                problems.append(
                    Problem(
                        "job",
                        job.name,
                        f"its SQL reads {undeclared}, which {'is' if len(undeclared) == 1 else 'are'}"
                        f" not among its inputs {declared}: add "
                        f"{'it' if len(undeclared) == 1 else 'them'} to inputs=[...] (barrier "
                        "alignment waits only for declared inputs), or fix the query",
                    )
                )
        if job.mode == "merge" and isinstance(job.transform, str):
            problems += _merge_key_problems(job.name, job.transform, job.keys)
        if job.keys and job.mode != "merge":
            problems.append(
                Problem(
                    "job",
                    job.name,
                    f"keys={list(job.keys)} only apply to merge jobs, and its mode is "
                    f"{job.mode!r}: use mode='merge', or drop keys",
                )
            )
    for source, jobs in readers.items():
        if len(jobs) > 1:
            problems.append(
                Problem(
                    "source",
                    source,
                    f"read by jobs {jobs}: a source's slices belong to one job; give each "
                    "job a source of its own name",
                )
            )
    for table, gate in pipeline.gates.items():
        if table not in own:
            close = _closest(table, own)
            problems.append(
                Problem(
                    "gate",
                    table,
                    f"guards a table no job of pipeline {pipeline.name!r} writes"
                    + (f"; did you mean {close!r}?" if close else "")
                    + f" (gate on {gate.table!r}): fix the gate's table",
                )
            )
    try:
        pipeline.ordered_jobs()
    except PipelineDefinitionError as exc:
        problems.append(Problem("pipeline", pipeline.name, f"{exc}: break the cycle"))
    return problems


def _merge_key_problems(job: str, query: str, keys: Sequence[str]) -> list[Problem]:
    """A merge SQL job's keys that its query's result does not have (only when the result's
    column names can be told without Spark: no ``*``, every expression named)."""
    from etl.reader import parse_query

    try:
        columns = parse_query(query).expression.named_selects
    except SqlTablesError:
        return []  # reported with the SQL's tables
    if not columns or any(c in ("", "*") for c in columns):
        return []
    missing = [k for k in keys if k.lower() not in {c.lower() for c in columns}]
    if not missing:
        return []
    return [
        Problem(
            "job",
            job,
            f"merges on keys {missing}, which its SQL's result does not have (its columns: "
            f"{', '.join(columns)}): select them, or fix keys=[...]",
        )
    ]


def source_problems(pipeline: Pipeline) -> list[Problem]:
    """Sources that cannot be read now (a missing directory, topic or table)."""
    problems = []
    for job in pipeline.jobs.values():
        if job.source is None:
            continue
        problem = job.source.unreachable()
        if problem is not None:
            problems.append(Problem("source", job.source.name, f"(job {job.name!r}) {problem}"))
    return problems


def _closest(name: str, candidates: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.5)
    return found[0] if found else None


__all__ = [
    "Problem",
    "Validation",
    "declaration_problems",
    "param_problems",
    "registration_problems",
    "source_problems",
    "validate_file",
    "validate_pipeline",
]
