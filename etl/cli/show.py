"""``etl status``, ``etl lineage`` and ``etl epochs``: what operators look at. No Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from etl.cli.app import CatalogUrl, Warehouse, app, guard, open_catalog
from etl.cli.render import out, rows_table, status_table
from etl.errors import UsageError


@app.command()
@guard
def status(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
) -> None:
    """Per table: writer job, latest PROCESSED and WRITTEN epochs, lag, last COMMIT, blocks.

    Example: etl status --format json
    """
    from etl.report import status_rows, to_json

    with open_catalog(warehouse, catalog_url) as catalog:
        rows = status_rows(catalog)
    if format == "json":
        out.print_json(to_json(rows))
        return
    out.print(status_table(rows))


@app.command()
@guard
def lineage(
    warehouse: Warehouse = Path("warehouse"),
    catalog_url: CatalogUrl = None,
    format: Annotated[Literal["text", "dot", "mermaid", "json"], typer.Option("--format")] = "text",
) -> None:
    """The graph of sources, jobs and tables.

    Example: etl lineage --format mermaid
    """
    from etl.report import lineage_graph, lineage_text

    with open_catalog(warehouse, catalog_url) as catalog:
        graph = lineage_graph(catalog)
    typer.echo(lineage_text(graph, fmt=format))


@app.command()
@guard
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
    with open_catalog(warehouse, catalog_url) as catalog:
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
    columns = ["epoch", "state", "delta_version", "rows", "attempt", "validation", "barrier_ts"]
    cells = [[record[c] for c in columns] for record in records]
    if slices:
        columns.append("slice")
        for row, record in zip(cells, records, strict=True):
            row.append("catch-up" if record["catch_up"] else "")
    out.print(rows_table(columns, cells, title=f"epochs of {table}"))


__all__ = [
    "epochs",
    "lineage",
    "status",
]
