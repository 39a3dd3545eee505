"""``etl resolve`` (the way out of a blocked epoch) and ``etl retire`` (jobs and tables a
pipeline no longer declares). Accept, skip and retire need no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    Params,
    TableOrJson,
    Warehouse,
    app,
    guard,
    load_pipeline_file,
    open_catalog,
    quiet_pyspark,
)
from etl.cli.render import print_json

DoneFormat = Annotated[
    TableOrJson, typer.Option("--format", case_sensitive=False, help="json: what was done.")
]

retire_app = typer.Typer(
    help="Retire a job or table a pipeline no longer declares (its history stays readable), "
    "or remove a whole pipeline."
    "\n\nExample: etl retire job old_job",
    no_args_is_help=True,
)
app.add_typer(retire_app, name="retire")


@app.command()
@guard
def resolve(
    table: Annotated[str, typer.Argument(help="The blocked table (a job's output).")],
    epoch: Annotated[int, typer.Argument(help="The blocked epoch.")],
    accept: Annotated[
        bool, typer.Option("--accept", help="Seal the epoch as written, failing rows included.")
    ] = False,
    quarantine: Annotated[
        bool,
        typer.Option(
            "--quarantine",
            help="Move the rows failing a row-level expectation to the gate's quarantine "
            "table and seal the rest (needs --pipeline; starts Spark).",
        ),
    ] = False,
    skip: Annotated[
        bool,
        typer.Option(
            "--skip",
            help="Roll the epoch back and seal it empty: a recorded loss; downstream sees "
            "an empty epoch.",
        ),
    ] = False,
    reason: Annotated[str, typer.Option(help="Why (kept with the resolution).")] = "",
    pipeline_file: Annotated[
        Path | None, typer.Option("--pipeline", help="The pipeline file (for --quarantine).")
    ] = None,
    param: Params = [],  # noqa: B006 - typer needs a literal default
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    master: Annotated[
        str | None,
        typer.Option(
            envvar="ETL_SPARK_MASTER", help="Spark master for --quarantine (default local[*])."
        ),
    ] = None,
    format: DoneFormat = TableOrJson.TABLE,
) -> None:
    """Resolve an epoch a quality gate blocked; the resolution is recorded in the catalog.

    Then `etl run` goes on from the next epoch and downstream catches up. A rerun without
    resolving re-audits the epoch (e.g. after the gate's definition changed).

    Example: etl resolve orders 7 --skip --reason "bad upstream export"
    """
    from catalog import ResolutionAction
    from etl.engine.resolve import chosen_action, resolve_epoch
    from etl.leases import operator

    action = chosen_action(
        accept=accept, quarantine=quarantine, skip=skip, with_pipeline=pipeline_file is not None
    )

    def engine_for(catalog):
        from etl.engine import EpochEngine
        from etl.spark import build_spark

        assert pipeline_file is not None  # chosen_action checked it
        quiet_pyspark(False)
        pipeline = load_pipeline_file(pipeline_file, param, catalog, check_sources=False)
        spark = build_spark(master=master, app_name="etl-resolve")
        return EpochEngine(pipeline=pipeline, catalog=catalog, spark=spark)

    with open_catalog(warehouse, catalog_url) as catalog:
        result = resolve_epoch(
            catalog,
            table,
            epoch,
            action,
            actor=operator(),
            reason=reason,
            engine_for=engine_for if pipeline_file is not None else None,
        )
    what = {
        ResolutionAction.ACCEPT: "accepted as written",
        ResolutionAction.QUARANTINE: f"sealed without its {result.quarantined} failing row(s) "
        "(quarantined)",
        ResolutionAction.SKIP: "skipped: rolled back and sealed empty",
    }[action]
    if format is TableOrJson.JSON:
        print_json(
            {
                "table": table,
                "epoch": epoch,
                "action": action.value,
                "versions": dict(result.versions),
                "quarantined": result.quarantined,
                "actor": result.resolution.actor,
                "reason": reason,
            }
        )
        return
    typer.echo(
        f"epoch {epoch} of table {table} {what} (Delta version {result.versions[table]}); "
        f"recorded as {action.value} by {result.resolution.actor}. "
        "The next `etl run` lets downstream catch up"
    )


@retire_app.command("job")
@guard
def retire_job(
    name: Annotated[str, typer.Argument(help="The job to retire.")],
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: DoneFormat = TableOrJson.TABLE,
) -> None:
    """Retire a job: it no longer runs or holds its pipeline's COMMIT back; its history
    stays readable. Registering it again (a pipeline file that declares it) revives it.

    Example: etl retire job old_job
    """
    from etl.retire import retire_job as retire

    with open_catalog(warehouse, catalog_url) as catalog:
        result = retire(catalog, name)
    if format is TableOrJson.JSON:
        print_json({"job": result.job, "retired_tables": list(result.tables)})
        return
    typer.echo(
        f"retired job {result.job}"
        + (f" and its table(s) {', '.join(result.tables)}" if result.tables else "")
        + "; their history stays readable"
    )


@retire_app.command("table")
@guard
def retire_table(
    name: Annotated[str, typer.Argument(help="The table to retire.")],
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: DoneFormat = TableOrJson.TABLE,
) -> None:
    """Retire a table: its pipeline's COMMIT no longer waits for it; its epochs stay
    readable. Its writer job must be retired first.

    Example: etl retire table old_table
    """
    with open_catalog(warehouse, catalog_url) as catalog:
        catalog.retire_table(name)
    if format is TableOrJson.JSON:
        print_json({"table": name, "retired": True})
        return
    typer.echo(f"retired table {name}; its history stays readable")


@retire_app.command("pipeline")
@guard
def retire_pipeline(
    name: Annotated[str, typer.Argument(help="The pipeline to remove (its name in the catalog).")],
    drop_tables: Annotated[
        bool, typer.Option("--drop-tables", help="Delete its tables' Delta files too.")
    ] = False,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: DoneFormat = TableOrJson.TABLE,
) -> None:
    """Remove a pipeline's registration: its jobs, sources and their slices, its tables'
    registration, epochs, COMMITs and tags. Its tables' Delta files stay (readable by any
    Delta reader) unless --drop-tables. Refused while a run of it holds a live lease.

    Example: etl retire pipeline team_test --drop-tables
    """
    from etl.retire import retire_pipeline as retire

    with open_catalog(warehouse, catalog_url) as catalog:
        result = retire(catalog, name, drop_tables=drop_tables)
    retired = result.retired
    if format is TableOrJson.JSON:
        print_json(
            {
                "pipeline": retired.pipeline,
                "jobs": list(retired.jobs),
                "sources": list(retired.sources),
                "tables": [t.name for t in retired.tables],
                "epochs": retired.epochs,
                "dropped": list(result.dropped),
            }
        )
        return
    kept = "deleted" if drop_tables else "kept at their locations"
    typer.echo(
        f"removed pipeline {retired.pipeline}: job(s) {', '.join(retired.jobs) or '-'}, "
        f"source(s) {', '.join(retired.sources) or '-'}, {retired.epochs} epoch(s); "
        f"table(s) {', '.join(t.name for t in retired.tables) or '-'} unregistered, files {kept}"
    )


__all__ = ["resolve", "retire_app", "retire_job", "retire_pipeline", "retire_table"]
