"""The one renderer of the ``etl`` command: rows as a Rich table, CSV or JSON."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from etl.report import TableStatusRow

out = Console(soft_wrap=True)
if not out.is_terminal:
    # Piped or captured: tables take their natural width instead of truncating cells to 80.
    out = Console(soft_wrap=True, width=1000)
err = Console(stderr=True, soft_wrap=True)


def text(value: object) -> str:
    """A cell's text: ``-`` for nothing."""
    return "-" if value is None else str(value)


def rows_table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], *, title: str | None = None
) -> Table:
    """A Rich table of ``rows``; every cell is shown as text, markup escaped."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(text(v)) for v in row))
    return table


def print_rows(columns: list[str], rows: list[tuple], fmt: str) -> None:
    """Rows on stdout as ``table``, ``csv`` or ``json``."""
    if fmt == "json":
        typer.echo(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        out.print(rows_table(columns, rows))


STATUS_COLUMNS = (
    "table",
    "kind",
    "writer",
    "processed",
    "written",
    "lag (epochs)",
    "lag (s)",
    "last commit",
    "blocked",
)


def status_table(rows: Sequence[TableStatusRow]) -> Table:
    """The status rows as a Rich table (what ``etl status`` prints)."""
    return rows_table(
        STATUS_COLUMNS,
        (
            (
                r.table,
                r.kind,
                r.writer_job,
                r.latest_processed,
                r.latest_written,
                r.lag_epochs,
                f"{r.lag_seconds:.1f}" if r.lag_seconds is not None else None,
                r.last_commit,
                r.blocked or "",
            )
            for r in rows
        ),
        title="tables",
    )


__all__ = [
    "STATUS_COLUMNS",
    "err",
    "out",
    "print_rows",
    "rows_table",
    "status_table",
    "text",
]
