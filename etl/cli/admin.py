"""``etl catalog ...``: catalog maintenance."""

from __future__ import annotations

from pathlib import Path

import typer

from etl.cli.app import CatalogUrl, Warehouse, catalog_app, guard


@catalog_app.command("upgrade")
@guard
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


__all__ = [
    "catalog_upgrade",
]
