"""``etl run`` and ``etl recover``: run a pipeline file, or bring it back after a crash."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    Params,
    PipelineFile,
    SparkMaster,
    SparkVerbose,
    TableOrJson,
    Warehouse,
    app,
    guard,
    load_pipeline_file,
    open_catalog,
    quiet_pyspark,
    quiet_spark_log,
    warehouse_root,
)
from etl.cli.progress import BatchProgress
from etl.cli.render import err, escape, print_json
from etl.cli.validate import existing_catalog
from etl.scheduling import (
    BATCH_BACKLOG_THRESHOLD,
    CONTINUOUS_BACKLOG_THRESHOLD,
    DEFAULT_LEASE_TTL_SECONDS,
    DEFAULT_RETRIES,
    DEFAULT_RETRY_BACKOFF_SECONDS,
    DEFAULT_SLOW_BATCH_SECONDS,
    MAX_RETRY_BACKOFF_SECONDS,
)


@app.command()
@guard
def run(
    pipeline_file: PipelineFile,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    once: Annotated[
        bool, typer.Option("--once", help="Run one epoch to completion and exit.")
    ] = False,
    continuous: Annotated[
        bool, typer.Option("--continuous", help="Keep opening epochs until interrupted.")
    ] = False,
    epoch_interval: Annotated[
        float | None,
        typer.Option(help="Seconds between epochs with --continuous (default 10).", min=0.1),
    ] = None,
    max_epochs: Annotated[
        int | None, typer.Option(help="With --continuous: stop after this many epochs.", min=1)
    ] = None,
    maintenance_interval: Annotated[
        float | None,
        typer.Option(
            help="With --continuous: run `etl maintain PIPELINE` every SECONDS inside this "
            "run (off by default); the jobs go on meanwhile.",
            min=1.0,
        ),
    ] = None,
    param: Params = [],  # noqa: B006 - typer needs a literal default
    master: SparkMaster = None,
    backlog_threshold: Annotated[
        int | None,
        typer.Option(
            help="Coalesce a job's pending epochs into one batch at this many (default: "
            f"{CONTINUOUS_BACKLOG_THRESHOLD} with --continuous, {BATCH_BACKLOG_THRESHOLD} "
            "with --once).",
            min=1,
        ),
    ] = None,
    max_parallel: Annotated[
        int | None,
        typer.Option(
            help="Batches run at once (default: the cores this process may use), the "
            "oldest epoch first; a batch running longer than --slow-batch-seconds stops "
            "counting.",
            min=1,
        ),
    ] = None,
    slow_batch_seconds: Annotated[
        float,
        typer.Option(
            help="After this many seconds a running batch no longer counts against "
            "--max-parallel, so that a slow job never holds back the jobs upstream of it.",
            min=0.1,
        ),
    ] = DEFAULT_SLOW_BATCH_SECONDS,
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for another run to release the pipeline.")
    ] = 0.0,
    lease_ttl: Annotated[
        float,
        typer.Option(
            help="Seconds a job lease lasts unless renewed (a live run renews it every "
            "third of that). A dead run's lease on this host is taken over at once; on "
            "another host, once it expired.",
            min=1.0,
        ),
    ] = DEFAULT_LEASE_TTL_SECONDS,
    retries: Annotated[
        int | None,
        typer.Option(
            help="Times a failed batch is tried again before the run gives up and exits 1 "
            f"(default: {DEFAULT_RETRIES} with --continuous, 0 with --once). The job is "
            "recovered before each retry; every failed attempt stays on record.",
            min=0,
        ),
    ] = None,
    retry_backoff: Annotated[
        float,
        typer.Option(
            help="Seconds before the first retry; doubled after every failed attempt, up to "
            f"{MAX_RETRY_BACKOFF_SECONDS:.0f} s.",
            min=0.0,
        ),
    ] = DEFAULT_RETRY_BACKOFF_SECONDS,
    keep_going: Annotated[
        bool,
        typer.Option(
            "--keep-going",
            help="Do not give up: retry a failing job (backoff capped) for as long as the "
            "run opens epochs (the other jobs go on), instead of exiting 1 once its "
            "retries are spent.",
        ),
    ] = False,
    format: Annotated[
        TableOrJson,
        typer.Option(
            "--format", case_sensitive=False, help="json: the run's result as JSON on stdout."
        ),
    ] = TableOrJson.TABLE,
    verbose: SparkVerbose = False,
) -> None:
    """Run a pipeline: once (for cron or Airflow) or continuously.

    Exit codes: 0 done, 1 a job failed (with --continuous: its retries are spent), 2
    usage error or an invalid pipeline file (`etl validate`), 3 another run holds the
    pipeline, 4 an epoch is blocked by a quality gate (`etl status` says how to resolve
    it), 130/143 a second Ctrl-C/SIGTERM stopped it at once (the next run recovers).

    Example: etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming
    """
    from etl.pipeline_run import PipelineRun, RunSettings
    from etl.run_mode import RunMode

    settings = RunSettings(
        warehouse=warehouse_root(warehouse),
        mode=RunMode.from_options(
            once=once,
            continuous=continuous,
            epoch_interval=epoch_interval,
            max_epochs=max_epochs,
            maintenance_interval=maintenance_interval,
        ),
        wait_seconds=wait,
        lease_ttl_seconds=lease_ttl,
        backlog_threshold="auto" if backlog_threshold is None else backlog_threshold,
        max_parallel_jobs=max_parallel,
        slow_batch_seconds=slow_batch_seconds,
        retries=retries,
        retry_backoff_seconds=retry_backoff,
        keep_going=keep_going,
    )
    quiet_pyspark(verbose)
    outcome = PipelineRun(
        settings,
        _setup(warehouse, catalog_url, pipeline_file, param, master, verbose),
        _RunConsole(pipeline_file),
    ).execute()
    _report(
        outcome, fmt=format, invocation=_invocation(pipeline_file, param, warehouse, catalog_url)
    )
    if verbose:
        import traceback

        for failure in outcome.result.failures:
            if failure.exception is not None:
                err.print("".join(traceback.format_exception(failure.exception)), markup=False)
    raise typer.Exit(outcome.exit_code)


def _setup(
    warehouse: Path | str,
    catalog_url: str | None,
    pipeline_file: Path,
    params: list[str],
    master: str | None,
    verbose: bool,
):
    """How a run of the command loads its file, opens its catalog and starts Spark."""
    from etl.pipeline_run import RunSetup

    return RunSetup(
        load_pipeline=lambda known: load_pipeline_file(pipeline_file, params, known),
        existing_catalog=lambda: existing_catalog(warehouse, catalog_url),
        open_catalog=lambda: open_catalog(warehouse, catalog_url, create=True),
        start_spark=_spark_starter(master, verbose),
    )


def _spark_starter(master: str | None, verbose: bool):
    """Starts Spark for an application name, its JVM log quiet unless ``verbose``."""

    def start_spark(app_name: str):
        from etl.spark import build_spark

        return quiet_spark_log(build_spark(master=master, app_name=app_name), verbose)

    return start_spark


class _RunConsole:
    """What ``etl run`` says on stderr as the run goes (:class:`etl.pipeline_run.RunEvents`)."""

    def __init__(self, pipeline_file: Path) -> None:
        self.pipeline_file = pipeline_file

    def waiting(self, busy, seconds_left: float) -> None:
        _say_waiting(busy, seconds_left)

    def started(self, run) -> None:
        # After Spark starts: its SparkContext installs a SIGINT handler of its own (cancel
        # all jobs). Until here, Ctrl-C or SIGTERM exits having written nothing.
        _handle_signals(run)

    def took_over(self, lease) -> None:
        err.print(
            f"took over job {lease.job} from {lease.owner}: that process is gone "
            "(its lease was not waited for)"
        )

    def undeclared(self, undeclared, catalog_pipeline: str) -> None:
        file = escape(str(self.pipeline_file))
        for job in undeclared.jobs:
            err.print(
                f"[yellow]warning:[/] job {job} is registered in pipeline "
                f"{catalog_pipeline!r} but {file} no longer declares "
                f"it; its tables hold the pipeline's COMMIT back. Retire it: etl retire job {job}"
            )
        for table in undeclared.tables:
            err.print(
                f"[yellow]warning:[/] table {table} is registered in pipeline "
                f"{catalog_pipeline!r} but no job of {file} writes "
                f"it any more; it holds the pipeline's COMMIT back. Retire it: etl retire table "
                f"{table}"
            )

    def maintained(self, report, error) -> None:
        if error is not None:
            err.print(
                f"[yellow]maintenance failed[/] (tried again next round): {escape(str(error))}"
            )
        else:
            err.print("maintenance: " + escape(report.summary()))

    def progress(self, pipeline) -> BatchProgress:
        return BatchProgress([job.name for job in pipeline.ordered_jobs()])


def _handle_signals(run) -> None:
    """First Ctrl-C or SIGTERM: say how many epochs are left and finish them; second:
    stop at once, saying what the next run will recover."""

    def interrupt(signum, frame):
        if run.stopping.is_set():
            in_flight = run.in_flight()
            doing = (
                "; ".join(
                    f"job {job} epoch {b.first}..{b.last}"
                    if b.coalesced
                    else f"job {job} epoch {b.last}"
                    for job, b in in_flight.items()
                )
                or "nothing in flight"
            )
            err.print(
                f"stopped at once ({doing}). The next `etl run` recovers: it seals what is "
                "complete, rolls back what is partial and replays it; the leases of this "
                "run are taken over at once"
            )
            os._exit(128 + signum)
        run.stop()
        try:
            left = {job: n for job, n in run.remaining().items() if n}
        except Exception:  # noqa: BLE001 - a report, never a reason to fail
            left = {}
        total = max(left.values(), default=0)
        detail = ", ".join(f"{job}: {n}" for job, n in left.items())
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"
        err.print(
            f"stopping ({name}): finishing {total} epoch(s) left, coalesced"
            + (f" (per job: {detail})" if detail else "")
            + "; no new epochs are opened. Ctrl-C or SIGTERM again stops at once"
        )

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def _resolve_commands(table: str, epoch: int, invocation: tuple[str, str]) -> str:
    """The commands that resolve a blocked epoch, each working as printed (``invocation``:
    the run's warehouse and catalog, its pipeline file and params): ``--quarantine`` loads
    the pipeline (the gate splits the rows), so it names the run's file and params."""
    where, loading = invocation
    command = f"etl resolve {table} {epoch}"
    return (
        f"Resolve it with one of (--reason TEXT records why):\n  {command} --accept{where}\n"
        f"  {command} --skip{where}\n  {command} --quarantine{loading}{where}"
    )


def _invocation(
    pipeline_file: Path, params: list[str], warehouse: Path | str, catalog_url: str | None
) -> tuple[str, str]:
    """The run's warehouse and catalog, and its pipeline file and params, as ``etl
    resolve`` takes them (the catalog's password masked)."""
    from etl.config import scrub

    where: list[str] = []
    if warehouse != Path("warehouse"):
        where += ["--warehouse", str(warehouse)]
    if catalog_url is not None:
        where += ["--catalog", scrub(catalog_url, catalog_url)]
    loading = ["--pipeline", str(pipeline_file)]
    for item in params:
        loading += ["--param", item]
    return _shell_words(where), _shell_words(loading)


def _shell_words(words: list[str]) -> str:
    return "".join(" " + shlex.quote(word) for word in words)


def _report(outcome, *, fmt: str, invocation: tuple[str, str] = ("", "")) -> None:
    result, maintenance = outcome.result, outcome.maintenance
    if fmt == "json":
        _print_result(outcome.to_json())
    for step in result.recovered:
        err.print(f"recovered {step.table}: {step.action} epoch(s) {list(step.epochs)}")
    sealed = [b for b in result.batches if b.sealed]
    blocked = len(result.blocked) + len(result.blocked_in_recovery)
    err.print(
        f"{len(result.epochs_opened)} epoch(s) opened, {len(sealed)} batch(es) sealed, "
        f"{blocked} blocked, {len(result.failures)} failed"
    )
    for batch in result.blocked:
        job = outcome.pipeline.jobs[batch.job]
        err.print(
            f"[yellow]blocked:[/] job {batch.job} epoch {batch.epoch}: "
            + escape(str(batch.blocked_reason))
            + ". "
            + escape(_resolve_commands(job.output, batch.epoch, invocation))
        )
    for step in result.blocked_in_recovery:
        for epoch in step.epochs:
            err.print(
                f"[yellow]blocked:[/] job {step.job} epoch {epoch} (still failing its gate). "
                + escape(_resolve_commands(step.table, epoch, invocation))
            )
    if result.left_to_recompute:
        err.print(
            f"left to a running recompute: job(s) {', '.join(result.left_to_recompute)} "
            "(they go on from its switch, in a later run)"
        )
    for failure in result.retried:
        err.print("[yellow]failed, then retried successfully:[/] " + escape(failure.error))
    for failure in result.failures:
        spent = (
            " (retries spent: the run exits 1 so that its supervisor restarts it)"
            if failure.retries_spent
            else ""
        )
        err.print("[bold red]failed:[/] " + escape(failure.error + spent))
    if maintenance is not None:
        err.print(escape(maintenance.summary()))


def _print_result(data: dict) -> None:
    """A run's result as JSON on stdout. Into a closed pipe it is dropped quietly, and the
    command still exits with the run's own code (print_json would exit 0)."""
    with contextlib.suppress(typer.Exit):
        print_json(data)


def _say_waiting(exc, seconds_left: float) -> None:
    until = (
        f" (its lease runs until {exc.expires_at:%H:%M:%S} unless renewed)"
        if isinstance(exc.expires_at, datetime)
        else ""
    )
    err.print(
        f"waiting for {exc.owner} to release job {exc.job}{until}; "
        f"{seconds_left:.0f} s left of --wait"
    )


@app.command()
@guard
def recover(
    pipeline_file: PipelineFile,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    param: Params = [],  # noqa: B006 - typer needs a literal default
    master: SparkMaster = None,
    format: Annotated[
        TableOrJson,
        typer.Option(
            "--format", case_sensitive=False, help="json: what recovery did, as JSON on stdout."
        ),
    ] = TableOrJson.TABLE,
    verbose: SparkVerbose = False,
) -> None:
    """Bring the catalog and the tables back into agreement after a crash.

    Seals complete but unrecorded epochs and rolls partial ones back; the next
    `etl run` replays a rolled-back epoch from its recorded slice.

    Example: etl recover examples/wordcount/pipeline.py --param input_dir=./incoming
    """
    from etl.engine import StepAction
    from etl.pipeline_run import recover_pipeline

    quiet_pyspark(verbose)
    catalog = open_catalog(warehouse, catalog_url)
    # Recovery reads no source (it seals or rolls back; the next run replays): a source
    # that cannot be reached now does not keep it from bringing the tables back.
    pipeline = load_pipeline_file(pipeline_file, param, catalog, check_sources=False)
    outcome = recover_pipeline(
        catalog,
        pipeline,
        warehouse=warehouse_root(warehouse),
        start_spark=_spark_starter(master, verbose),
    )
    result = outcome.result
    if format == "json":
        _print_result(outcome.to_json())
        raise typer.Exit(result.exit_code)
    for revision in result.discarded:
        typer.echo(_discarded_line(revision))
    if not result.recovered and not result.discarded:
        typer.echo("nothing to recover: catalog and tables agree")
    for step in result.recovered:
        typer.echo(f"{step.table}: {step.action} epoch(s) {', '.join(map(str, step.epochs))}")
    if any(step.action is StepAction.ROLLED_BACK for step in result.recovered):
        typer.echo("the next `etl run` replays the rolled-back epochs from their recorded slices")
    raise typer.Exit(result.exit_code)


def _discarded_line(revision) -> str:
    return (
        f"discarded revision {revision.id} ({', '.join(revision.tables)} from epoch "
        f"{revision.from_epoch}, started {revision.started_at:%Y-%m-%d %H:%M:%S} by "
        f"{revision.actor}): it was never switched, its versions were rolled back"
    )


@app.command()
@guard
def recompute(
    tables: Annotated[
        list[str], typer.Argument(metavar="TABLE...", help="The tables to recompute.")
    ],
    pipeline_file: Annotated[
        Path, typer.Option("--pipeline", help="The pipeline file with the fixed transforms.")
    ],
    downstream: Annotated[
        bool,
        typer.Option(
            "--downstream", help="Recompute every table derived from them too (else refused)."
        ),
    ] = False,
    from_epoch: Annotated[
        int | None,
        typer.Option(
            "--from-epoch", metavar="E", min=1, help="First epoch recomputed (default: all)."
        ),
    ] = None,
    per_epoch: Annotated[
        bool,
        typer.Option(
            "--per-epoch",
            help="One batch per sealed epoch, keeping time travel epoch by epoch (default: "
            "coalesced, as catch-up).",
        ),
    ] = False,
    reason: Annotated[str, typer.Option(help="Why (kept with the revision).")] = "",
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="S",
            min=0,
            help="How long to wait for a run of the pipeline to leave the jobs to the "
            "recompute (it does once their batches end); then exit 3.",
        ),
    ] = 60.0,
    param: Params = [],  # noqa: B006 - typer needs a literal default
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    master: SparkMaster = None,
    format: Annotated[
        TableOrJson, typer.Option("--format", case_sensitive=False, help="json: the revision.")
    ] = TableOrJson.TABLE,
    verbose: SparkVerbose = False,
) -> None:
    """Recompute tables from their inputs' history as a new revision, switched for
    readers all at once.

    While it runs every reader (read-committed, repeatable-read) sees the old data; one
    catalog transaction then switches every recomputed table together. A continuous run
    of the pipeline leaves the recomputed tables' jobs to it meanwhile and goes on from the
    switch; its other jobs keep running. A killed recompute
    is discarded (its versions rolled back) by the next `etl recompute` or `etl recover`.

    Example: etl recompute word_counts --downstream --pipeline pipeline.py --reason "fix"
    """
    from etl.recompute import RecomputeRequest
    from etl.recompute import recompute as recomputing

    quiet_pyspark(verbose)
    catalog = open_catalog(warehouse, catalog_url)
    pipeline = load_pipeline_file(pipeline_file, param, catalog, check_sources=False)
    request = RecomputeRequest(
        tables=tuple(tables),
        downstream=downstream,
        from_epoch=from_epoch,
        per_epoch=per_epoch,
        reason=reason,
    )
    spark = _spark_starter(master, verbose)("etl-recompute")
    result = recomputing(
        catalog, pipeline, spark, request, warehouse=warehouse_root(warehouse), wait_seconds=wait
    )
    revision = result.revision
    if format == "json":
        print_json(
            {
                "revision": dataclasses.asdict(revision),
                "tables": [dataclasses.asdict(t) for t in result.tables],
                "discarded": [dataclasses.asdict(r) for r in result.discarded],
            }
        )
        return
    for discarded in result.discarded:
        typer.echo(_discarded_line(discarded))
    for table in result.tables:
        batches = ", ".join(f"{a}..{b}" if a < b else str(b) for a, b in table.batches)
        typer.echo(
            f"{table.table}: epochs {batches} recomputed by {table.job} "
            f"({table.rows} rows, Delta version {table.version})"
        )
    typer.echo(
        f"revision {revision.id} switched at {revision.finished_at:%Y-%m-%d %H:%M:%S}: "
        f"{', '.join(revision.tables)} from epoch {revision.from_epoch} through "
        f"{revision.through_epoch}, all at once"
    )


__all__ = [
    "recompute",
    "recover",
    "run",
]
