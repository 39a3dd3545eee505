"""``etl run`` and ``etl recover``: run a pipeline file, or bring it back after a crash."""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from catalog import Catalog
from etl.cli.app import CatalogUrl, Warehouse, app, guard, open_catalog, parse_params
from etl.cli.render import err
from etl.errors import PipelineBusyError, UsageError


@app.command()
@guard
def run(
    pipeline_file: Annotated[Path, typer.Argument(help="Python file that defines `pipeline`.")],
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    once: Annotated[
        bool, typer.Option("--once", help="Run one epoch to completion and exit.")
    ] = False,
    continuous: Annotated[
        bool, typer.Option("--continuous", help="Keep opening epochs until interrupted.")
    ] = False,
    epoch_interval: Annotated[
        float, typer.Option(help="Seconds between epochs with --continuous.", min=0.1)
    ] = 10.0,
    max_epochs: Annotated[
        int | None, typer.Option(help="With --continuous: stop after this many epochs.", min=1)
    ] = None,
    param: Annotated[
        list[str], typer.Option("--param", help="Pipeline parameter key=value (repeatable).")
    ] = [],  # noqa: B006 - typer needs a literal default
    master: Annotated[
        str | None, typer.Option(envvar="ETL_SPARK_MASTER", help="Spark master (default local[*]).")
    ] = None,
    backlog_threshold: Annotated[
        int, typer.Option(help="Coalesce a job's pending epochs into one batch at this many.")
    ] = 10,
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for another run to release the pipeline.")
    ] = 0.0,
    lease_ttl: Annotated[
        float,
        typer.Option(
            help="Seconds a job lease lasts unless renewed: after a crash, the next run "
            "waits this long before it may take over.",
            min=1.0,
        ),
    ] = 120.0,
) -> None:
    """Run a pipeline: once (for cron or Airflow) or continuously.

    Example: etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming
    """
    if once == continuous:
        raise UsageError("give exactly one of --once or --continuous")
    if once and max_epochs is not None:
        raise UsageError("--max-epochs goes with --continuous, not --once")
    from etl.loader import load_pipeline

    pipeline = load_pipeline(pipeline_file, parse_params(param))
    from etl.runner import Runner
    from etl.spark import build_spark

    catalog = open_catalog(warehouse, catalog_url, create=True)
    deadline = time.monotonic() + wait
    # A busy pipeline is refused before Spark starts; acquiring the leases decides.
    _retry_while_busy(lambda: _check_not_held(catalog, pipeline), deadline)
    spark = build_spark(master=master, app_name=f"etl-{pipeline.name}")
    stop = threading.Event()
    if continuous:
        # After Spark starts: its SparkContext installs a SIGINT handler of its own
        # (cancel all jobs). Until here, Ctrl-C exits with 130 having written nothing.
        def interrupt(signum, frame):  # first Ctrl-C: finish the epoch in flight
            err.print("stopping: finishing the epochs in flight (Ctrl-C again to abort)")
            stop.set()
            signal.signal(signal.SIGINT, signal.default_int_handler)

        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, interrupt)
    runner = Runner(
        pipeline,
        catalog=catalog,
        warehouse=str(warehouse.resolve()),
        spark=spark,
        lease_ttl_seconds=lease_ttl,
        backlog_threshold=backlog_threshold,
        on_batch=_progress_printer(),
    )
    _retry_while_busy(runner.acquire, deadline)
    try:
        if once:
            result = runner.run_once()
        else:
            result = runner.run_continuous(
                epoch_interval=epoch_interval, stop=stop, max_epochs=max_epochs
            )
    finally:
        runner.release()
    for step in result.recovered:
        err.print(f"recovered {step.table}: {step.action} epoch(s) {list(step.epochs)}")
    sealed = [b for b in result.batches if b.sealed]
    err.print(
        f"{len(result.epochs_opened)} epoch(s) opened, {len(sealed)} batch(es) sealed, "
        f"{len(result.blocked)} blocked, {len(result.failures)} failed"
    )
    for batch in result.blocked:
        err.print(
            f"[yellow]blocked:[/] job {batch.job} epoch {batch.epoch}: "
            + escape(str(batch.blocked_reason))
        )
    for failure in result.failures:
        err.print(
            f"[bold red]failed:[/] job {failure.job} epoch {failure.epoch}: "
            + escape(failure.error)
        )
    raise typer.Exit(result.exit_code)


def _check_not_held(catalog: Catalog, pipeline) -> None:
    """PipelineBusyError if another run holds an unexpired lease of one of the jobs."""
    now = datetime.now(UTC)
    for job in pipeline.ordered_jobs():
        lease = catalog.get_lease(job.name)
        if lease is not None and lease.expires_at > now:
            raise PipelineBusyError(pipeline=pipeline.name, job=job.name, owner=lease.owner)


def _retry_while_busy(attempt, deadline: float) -> None:
    """Call ``attempt`` until another run stops holding the pipeline or ``deadline`` passes."""
    while True:
        try:
            attempt()
            return
        except PipelineBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def _progress_printer():
    if not err.is_terminal:
        return None

    def show(batch) -> None:
        span = (
            f"{batch.first_epoch}..{batch.epoch}"
            if batch.first_epoch != batch.epoch
            else batch.epoch
        )
        state = "sealed" if batch.sealed else f"blocked ({batch.blocked_reason})"
        err.print(f"  {batch.job}: epoch {span} {state}, {batch.rows} rows")

    return show


@app.command()
@guard
def recover(
    pipeline_file: Annotated[Path, typer.Argument(help="Python file that defines `pipeline`.")],
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    param: Annotated[list[str], typer.Option("--param")] = [],  # noqa: B006
    master: Annotated[str | None, typer.Option(envvar="ETL_SPARK_MASTER")] = None,
) -> None:
    """Bring the catalog and the tables back into agreement after a crash.

    Seals complete but unrecorded epochs and rolls partial ones back; the next
    `etl run` replays a rolled-back epoch from its recorded slice.

    Example: etl recover examples/wordcount/pipeline.py --param input_dir=./incoming
    """
    from etl.engine import StepAction
    from etl.loader import load_pipeline
    from etl.runner import Runner
    from etl.spark import build_spark

    pipeline = load_pipeline(pipeline_file, parse_params(param))
    catalog = open_catalog(warehouse, catalog_url)
    _check_not_held(catalog, pipeline)  # before Spark starts
    runner = Runner(
        pipeline,
        catalog=catalog,
        warehouse=str(warehouse.resolve()),
        spark=build_spark(master=master, app_name="etl-recover"),
    )
    with runner:
        result = runner.recover()
    if not result.recovered:
        typer.echo("nothing to recover: catalog and tables agree")
    for step in result.recovered:
        typer.echo(f"{step.table}: {step.action} epoch(s) {', '.join(map(str, step.epochs))}")
    if any(step.action is StepAction.ROLLED_BACK for step in result.recovered):
        typer.echo("the next `etl run` replays the rolled-back epochs from their recorded slices")


__all__ = [
    "recover",
    "run",
]
