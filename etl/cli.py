"""The ``etl`` command: a thin layer over the runner, the snapshot reader and the catalog.

Exit codes: 0 done; 1 a job failed (the message names the job and epoch); 2 usage or
configuration error; 3 another run holds the pipeline (nothing was written).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from catalog import Catalog, DeltaBarrierError, load_catalog

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3

app = typer.Typer(
    name="etl",
    help="Delta Barrier: consistent multi-table ETL on Spark and Delta Lake.\n\n"
    "Example: etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
catalog_app = typer.Typer(
    help="Catalog maintenance.\n\nExample: etl catalog upgrade --warehouse ./warehouse",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")

out = Console(soft_wrap=True)
if not out.is_terminal:
    # Piped or captured: tables take their natural width instead of truncating cells to 80.
    out = Console(soft_wrap=True, width=1000)
err = Console(stderr=True, soft_wrap=True)

Warehouse = Annotated[
    Path,
    typer.Option(
        "--warehouse",
        envvar="ETL_WAREHOUSE",
        help="Directory holding the Delta tables (and the default SQLite catalog).",
    ),
]
CatalogUrl = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        envvar="ETL_CATALOG_URL",
        help="Catalog URL (default: SQLite file in the warehouse; postgresql://... to share).",
    ),
]


class UsageError(DeltaBarrierError):
    """Bad input from the command line: exit 2 with the message."""


def _open_catalog(warehouse: Path, catalog_url: str | None, *, create: bool = False) -> Catalog:
    """The catalog; only ``create`` (running a pipeline) may start a new embedded one."""
    if catalog_url is None and not create:
        from catalog.sql import CATALOG_FILE_NAME

        if not (warehouse / CATALOG_FILE_NAME).is_file():
            raise UsageError(
                f"no catalog in warehouse {str(warehouse)!r} (no {CATALOG_FILE_NAME} there): "
                "pass --warehouse DIR (or set ETL_WAREHOUSE) for a warehouse that has been "
                "run, or --catalog URL"
            )
    return load_catalog(catalog_url, warehouse=warehouse)


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _guard(fn):
    """Turn project errors into exit codes with a clear message (no tracebacks)."""
    from functools import wraps

    @wraps(fn)
    def wrapper(*args, **kwargs):
        from etl.errors import PipelineBusyError, PipelineLoadError

        try:
            return fn(*args, **kwargs)
        except PipelineBusyError as exc:
            raise _fail(str(exc), EXIT_BUSY) from None
        except (UsageError, PipelineLoadError) as exc:
            raise _fail(str(exc), EXIT_USAGE) from None
        except DeltaBarrierError as exc:
            from etl.errors import JobError

            code = EXIT_JOB_FAILED if isinstance(exc, JobError) else EXIT_USAGE
            raise _fail(str(exc), code) from None

    return wrapper


def _params(items: list[str]) -> dict[str, str]:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param takes key=value, got {item!r}")
        params[key] = value
    return params


@app.command()
@_guard
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

    pipeline = load_pipeline(pipeline_file, _params(param))
    from etl.runner import Runner
    from etl.spark import build_spark

    catalog = _open_catalog(warehouse, catalog_url, create=True)
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
    from datetime import UTC

    from etl.errors import PipelineBusyError

    now = datetime.now(UTC)
    for job in pipeline.ordered_jobs():
        lease = catalog.get_lease(job.name)
        if lease is not None and lease.expires_at > now:
            raise PipelineBusyError(pipeline=pipeline.name, job=job.name, owner=lease.owner)


def _retry_while_busy(attempt, deadline: float) -> None:
    """Call ``attempt`` until another run stops holding the pipeline or ``deadline`` passes."""
    from etl.errors import PipelineBusyError

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
@_guard
def status(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
) -> None:
    """Per table: writer job, latest PROCESSED and WRITTEN epochs, lag, last COMMIT, blocks.

    Example: etl status --format json
    """
    from etl.report import status_rows, status_table, to_json

    with _open_catalog(warehouse, catalog_url) as catalog:
        rows = status_rows(catalog)
    if format == "json":
        out.print_json(to_json(rows))
        return
    out.print(status_table(rows))


@app.command()
@_guard
def lineage(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["text", "dot", "mermaid", "json"], typer.Option("--format")] = "text",
) -> None:
    """The graph of sources, jobs and tables.

    Example: etl lineage --format mermaid
    """
    from etl.report import lineage_graph, lineage_text

    with _open_catalog(warehouse, catalog_url) as catalog:
        graph = lineage_graph(catalog)
    typer.echo(lineage_text(graph, fmt=format))


@app.command()
@_guard
def sql(
    query: Annotated[str, typer.Argument(help="A SELECT over the pipeline's tables.")],
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    consistency: Annotated[
        str,
        typer.Option("--consistency", help="read-uncommitted | read-committed | repeatable-read"),
    ] = "repeatable-read",
    as_of_epoch: Annotated[int | None, typer.Option(help="Repeatable-read at this epoch.")] = None,
    as_of_time: Annotated[
        str | None, typer.Option(help="Newest repeatable-read cut at or before this ISO-8601 time.")
    ] = None,
    format: Annotated[Literal["table", "csv", "json"], typer.Option("--format")] = "table",
    limit: Annotated[int, typer.Option(help="At most this many rows are printed.")] = 1000,
    master: Annotated[str | None, typer.Option(envvar="ETL_SPARK_MASTER")] = None,
) -> None:
    """Run a query on a consistent snapshot of the tables it names.

    Example: etl sql "SELECT cnt, words FROM cnt_counts" --consistency repeatable-read
    """
    from consistency import parse_level

    level = parse_level(consistency)
    when = None
    if as_of_time is not None:
        try:
            when = datetime.fromisoformat(as_of_time)
        except ValueError:
            raise UsageError(f"--as-of-time must be ISO-8601, got {as_of_time!r}") from None
        if when.tzinfo is None:
            from datetime import UTC

            when = when.replace(tzinfo=UTC)
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.logger import PySparkLogger

    from etl.snapshot import snapshot
    from etl.spark import build_spark

    with _open_catalog(warehouse, catalog_url) as catalog:
        # Resolved before Spark starts: an unknown table or epoch is reported at once.
        reader = snapshot(catalog, query, level, as_of_epoch=as_of_epoch, as_of_time=when)
        err.print(
            f"level={reader.level.value} epoch={reader.epoch if reader.epoch is not None else '-'} "
            f"versions={json.dumps(dict(reader.versions), sort_keys=True)}",
            highlight=False,
        )
        build_spark(master=master, app_name="etl-sql")  # the session the reader then uses
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            # Query errors are reported below in one line, not as a logged Java stack trace.
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        try:
            frame = reader.sql(query).limit(limit)
            columns = frame.columns
            rows = [tuple(r) for r in frame.toLocalIterator()]
        except CapturedException as exc:  # Spark's analysis, parse and runtime errors
            problem = str(exc).strip().splitlines()[0]
            raise UsageError(f"Spark cannot run the query: {problem}") from None
    _print_rows(columns, rows, format)


def _print_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        typer.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str))
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        table = Table()
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(escape(_text(v)) for v in row))
        out.print(table)


@app.command()
@_guard
def epochs(
    table: Annotated[str, typer.Argument(help="Table name.")],
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
    last: Annotated[int, typer.Option(help="Show the newest N epochs.", min=1)] = 50,
) -> None:
    """A table's epochs: state, Delta version, rows, validation, times, catch-up slices.

    Example: etl epochs word_counts --last 10
    """
    with _open_catalog(warehouse, catalog_url) as catalog:
        known = sorted(t.name for t in catalog.list_tables())
        if table not in known:
            raise UsageError(f"unknown table {table!r}; the catalog has {known}")
        states = catalog.table_epochs(table)[-last:]
        checks = {v.epoch: v for v in catalog.validations(table)}
        barrier = (
            {e.id: e.barrier_ts for e in catalog.epochs(after=states[0].epoch - 1)}
            if states
            else {}
        )
        source = next(
            (j.source for j in catalog.list_jobs() if j.output == table and j.source), None
        )
        slices = {
            s.epoch: recorded
            for s in states
            if source and (recorded := catalog.get_slice(source, s.epoch)) is not None
        }
    records = [
        {
            "epoch": s.epoch,
            "state": s.state.value,
            "delta_version": s.delta_version,
            "rows": s.rows,
            "attempt": s.attempt,
            "coalesced_into": s.coalesced_into,
            "catch_up": slices[s.epoch].catch_up if s.epoch in slices else None,
            "failed_expectations": (
                checks[s.epoch].results.get("failed_expectations") if s.epoch in checks else None
            ),
            "validation": (
                None
                if s.epoch not in checks
                else ("passed" if checks[s.epoch].success else "failed")
                + f" ({checks[s.epoch].policy})"
            ),
            "barrier_ts": ts.isoformat() if (ts := barrier.get(s.epoch)) else None,
            "updated_at": s.updated_at.isoformat() if s.updated_at else None,
        }
        for s in states
    ]
    if format == "json":
        typer.echo(json.dumps(records, indent=2))
        return
    view = Table(title=f"epochs of {table}")
    columns = ("epoch", "state", "delta_version", "rows", "attempt", "validation", "barrier_ts")
    for column in columns:
        view.add_column(column)
    if slices:
        view.add_column("slice")
    for record in records:
        cells = [_text(record[c]) for c in columns]
        if slices:
            cells.append("catch-up" if record["catch_up"] else "")
        view.add_row(*cells)
    out.print(view)


@app.command()
@_guard
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
    from etl.loader import load_pipeline
    from etl.runner import Runner
    from etl.spark import build_spark

    pipeline = load_pipeline(pipeline_file, _params(param))
    catalog = _open_catalog(warehouse, catalog_url)
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
    if any(step.action == "rolled back" for step in result.recovered):
        typer.echo("the next `etl run` replays the rolled-back epochs from their recorded slices")


@catalog_app.command("upgrade")
@_guard
def catalog_upgrade(
    warehouse: Warehouse = Path("warehouse"), catalog_url: CatalogUrl = None
) -> None:
    """Migrate the catalog database to this version's schema.

    Example: etl catalog upgrade --catalog postgresql://etl@db-host/etl
    """
    from catalog import SCHEMA_VERSION, SqlCatalog

    catalog = SqlCatalog.open_for_upgrade(catalog_url, warehouse=warehouse)
    before = catalog.upgrade()
    typer.echo(f"catalog schema: version {before} -> {SCHEMA_VERSION}")


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    app()
