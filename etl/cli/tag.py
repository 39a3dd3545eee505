"""``etl tag create|list|delete``: named cuts that retention keeps until deleted (issue 11)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    PipelineName,
    TableOrJson,
    TableOrJsonFormat,
    Warehouse,
    app,
    guard,
    open_catalog,
)
from etl.cli.render import out, print_json, rows_table

tag_app = typer.Typer(help="Named cuts that never expire until deleted.", no_args_is_help=True)
app.add_typer(tag_app, name="tag")


@tag_app.command("create")
@guard
def create(
    name: Annotated[str, typer.Argument(help="The tag's name.")],
    epoch: Annotated[
        int | None, typer.Option(help="The COMMIT epoch (default: the latest).")
    ] = None,
    pipeline: Annotated[
        str | None,
        typer.Option(
            "--pipeline",
            metavar="NAME",
            help="The pipeline whose COMMIT cut to tag (default: the newest of any pipeline).",
        ),
    ] = None,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: TableOrJsonFormat = TableOrJson.TABLE,
) -> None:
    """Tag a COMMIT cut; an expired epoch is refused, naming the rule that expired it.

    Example: etl tag create before-migration --epoch 42
    """
    from etl.errors import UsageError
    from etl.report import check_pipeline

    with open_catalog(warehouse, catalog_url) as catalog:
        check_pipeline(catalog, pipeline)
        if epoch is None:
            commit = catalog.latest_commit(pipeline=pipeline)
            if commit is None:
                raise UsageError("no COMMIT epoch yet to tag; run the pipeline first")
        else:
            commit = catalog.get_commit(epoch)
            if commit is None:
                expiry = catalog.expiry_of(epoch)
                if expiry is None:
                    raise UsageError(
                        f"epoch {epoch} is not a COMMIT cut: not every table has it WRITTEN"
                    )
                from catalog import EpochExpiredError

                raise EpochExpiredError(epoch=epoch, rule=expiry.rule, expired_at=expiry.expired_at)
            if pipeline not in (None, commit.pipeline):
                raise UsageError(
                    f"epoch {epoch} is a COMMIT cut of pipeline {commit.pipeline!r}, "
                    f"not of {pipeline!r}"
                )
        tag = catalog.create_tag(
            name, epoch=commit.epoch, versions=dict(commit.versions), pipeline=commit.pipeline
        )
    if format is TableOrJson.JSON:
        print_json(_tag_record(tag))
        return
    typer.echo(
        f"tag {tag.name} -> epoch {tag.epoch} {json.dumps(dict(tag.versions), sort_keys=True)}"
    )


@tag_app.command("list")
@guard
def list_(
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: TableOrJsonFormat = TableOrJson.TABLE,
    pipeline: PipelineName = None,
) -> None:
    """Every tag (or a pipeline's): name, epoch, versions."""
    from etl.report import check_pipeline

    with open_catalog(warehouse, catalog_url) as catalog:
        check_pipeline(catalog, pipeline)
        tags = [t for t in catalog.list_tags() if pipeline in (None, t.pipeline)]
    records = [_tag_record(t) for t in tags]
    if format is TableOrJson.JSON:
        print_json(records)
        return
    cells = [
        [
            r["name"],
            r["pipeline"],
            r["epoch"],
            json.dumps(r["versions"], sort_keys=True),
            r["created_at"],
        ]
        for r in records
    ]
    columns = ["name", "pipeline", "epoch", "versions", "created_at"]
    out.print(rows_table(columns, cells, title="tags"))


@tag_app.command("delete")
@guard
def delete(
    name: Annotated[str, typer.Argument(help="The tag's name.")],
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: TableOrJsonFormat = TableOrJson.TABLE,
) -> None:
    """Delete a tag; retention may then expire its epoch."""
    with open_catalog(warehouse, catalog_url) as catalog:
        catalog.delete_tag(name)
    if format is TableOrJson.JSON:
        print_json({"deleted": name})
        return
    typer.echo(f"deleted tag {name}")


def _tag_record(tag) -> dict:
    return {
        "name": tag.name,
        "epoch": tag.epoch,
        "pipeline": tag.pipeline,
        "versions": dict(tag.versions),
        "created_at": tag.created_at,
    }


__all__ = ["create", "delete", "list_"]
