"""``etl config``: the effective settings and where each comes from. No Spark."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    TableOrJson,
    TableOrJsonFormat,
    Warehouse,
    app,
    guard,
    warehouse_location,
    warehouse_root,
)
from etl.cli.render import print_json, print_rows


@app.command("config")
@guard
def config_command(
    ctx: typer.Context,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    master: Annotated[
        str | None, typer.Option(envvar="ETL_SPARK_MASTER", metavar="URL", help="Spark master.")
    ] = None,
    format: TableOrJsonFormat = TableOrJson.TABLE,
) -> None:
    """The effective settings and where each comes from (password masked).

    Precedence: flags > environment > project file (etl.toml, or the tool.etl table of
    pyproject.toml) > defaults.

    Example: etl config --format json
    """
    from catalog import mask_url
    from etl.config import SETTINGS, find_project_file, load_project_config

    project = load_project_config()
    given = {"warehouse": warehouse, "catalog_url": catalog_url, "master": master}
    rows = []
    for setting in SETTINGS:
        if setting.param in given:
            source = ctx.get_parameter_source(setting.param)
            value = given[setting.param]
            origin = _origin(source, setting, project.path)
            if value is None:
                value, origin = setting.default, "default"
        else:
            if setting.env and os.environ.get(setting.env):
                value, origin = os.environ[setting.env], f"env {setting.env}"
            elif setting.key in project.values:
                value, origin = project.values[setting.key], f"file {project.path}"
            else:
                value, origin = setting.default, "default"
        if setting.key == "catalog":
            if value is None and isinstance(warehouse, str):
                origin = "none: a warehouse on object storage needs --catalog"
            elif value is None:
                value = f"sqlite:///{Path(str(warehouse)).resolve() / '_catalog.sqlite'}"
                origin = "default (in the warehouse)"
            if value is not None:
                value = mask_url(str(value))
        elif setting.key == "warehouse" and value is not None:
            value = warehouse_root(warehouse_location(value))
        rows.append((setting.key, None if value is None else str(value), origin))
    path = find_project_file()
    if format is TableOrJson.JSON:
        print_json(
            {
                "project_file": str(path) if path else None,
                "settings": {k: {"value": v, "source": o} for k, v, o in rows},
            }
        )
        return
    print_rows(["setting", "value", "source"], rows, "table")


def _origin(source, setting, path) -> str:
    name = getattr(source, "name", "DEFAULT")
    if name == "COMMANDLINE":
        return "flag"
    if name == "ENVIRONMENT":
        return f"env {setting.env}"
    if name == "DEFAULT_MAP":
        return f"file {path}"
    return "default"


__all__ = ["config_command"]
