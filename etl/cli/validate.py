"""``etl validate``: check a pipeline file without running it (no Spark, no catalog write)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    Params,
    PipelineFile,
    TableOrJson,
    Warehouse,
    app,
    guard,
    parse_params,
    warehouse_root,
)
from etl.cli.render import print_json

if TYPE_CHECKING:
    from catalog import Catalog


@app.command()
@guard
def validate(
    pipeline_file: PipelineFile,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    param: Params = [],  # noqa: B006 - typer needs a literal default
    format: Annotated[
        TableOrJson,
        typer.Option("--format", case_sensitive=False, help="json: the problems as JSON."),
    ] = TableOrJson.TABLE,
) -> None:
    """Check a pipeline file before anything runs, and list every problem at once.

    Checks the parameters (with "did you mean"), that every input table is written by a
    job of the pipeline or registered in the catalog, that a SQL job reads only its
    inputs, write modes and keys, that the sources can be reached, and that no job,
    source or table name (nor an input table) belongs to another pipeline. Starts no
    Spark and writes nothing; `etl run` runs the same checks first.

    Exit codes: 0 valid, 2 problems (each names its job, table, source or parameter).

    Example: etl validate examples/wordcount/pipeline.py --param input_dir=./incoming
    """
    from etl.validation import registration_problems, validate_file

    known = existing_catalog(warehouse, catalog_url)
    validation = validate_file(pipeline_file, parse_params(param), catalog=known)
    if validation.ok and known is not None:
        refused = registration_problems(validation.checked(), known, warehouse_root(warehouse))
        validation = replace(validation, problems=(*validation.problems, *refused))
    if format == TableOrJson.JSON:
        print_json(validation.to_json())
        raise typer.Exit(0 if validation.ok else 2)
    pipeline = validation.checked()
    typer.echo(f"{pipeline_file}: pipeline {pipeline.name!r} is valid ({len(pipeline.jobs)} jobs)")


def existing_catalog(warehouse: Path | str, catalog_url: str | None) -> Catalog | None:
    """The catalog if it exists (nothing is created), for read-only lookups; None if not."""
    from catalog import CatalogNotFoundError, load_catalog

    if catalog_url is None:
        from catalog import CATALOG_FILE_NAME

        if isinstance(warehouse, str):  # an object-store warehouse has no embedded catalog
            return None
        if not (warehouse / CATALOG_FILE_NAME).is_file():
            return None
    try:
        return load_catalog(catalog_url, warehouse=warehouse, create=False)
    except CatalogNotFoundError:
        return None


__all__ = [
    "existing_catalog",
    "validate",
]
