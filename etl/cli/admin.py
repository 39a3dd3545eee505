"""``etl catalog ...``: catalog maintenance."""

from __future__ import annotations

import json

import typer

from etl.cli.app import CatalogUrl, TableOrJson, TableOrJsonFormat, Warehouse, catalog_app, guard


@catalog_app.command("upgrade")
@guard
def catalog_upgrade(
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    format: TableOrJsonFormat = TableOrJson.TABLE,
) -> None:
    """Migrate an existing catalog database to this version's schema (creates none).

    Example: etl catalog upgrade --catalog postgresql://etl@db-host/etl
    """
    from catalog import SCHEMA_VERSION, SqlCatalog

    catalog = SqlCatalog.open_for_upgrade(catalog_url, warehouse=warehouse)
    try:
        before = catalog.upgrade()
    finally:
        catalog.close()
    if format is TableOrJson.JSON:
        typer.echo(json.dumps({"schema_version_before": before, "schema_version": SCHEMA_VERSION}))
    else:
        typer.echo(
            f"catalog schema: version {before} -> {SCHEMA_VERSION}"
            if before != SCHEMA_VERSION
            else f"catalog schema: already at version {SCHEMA_VERSION}, nothing to do"
        )


__all__ = [
    "catalog_upgrade",
]
