"""``etl sql``: a query on a consistent snapshot of the tables it names."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

import typer

from catalog import as_utc
from etl.cli.app import CatalogUrl, Warehouse, app, guard, open_catalog
from etl.cli.render import err, print_rows
from etl.errors import UsageError


@app.command()
@guard
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
    as_of_tag: Annotated[
        str | None, typer.Option(help="Repeatable-read at the epoch this tag names (etl tag).")
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
        when = as_utc(when)
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.logger import PySparkLogger

    from etl.reader import snapshot
    from etl.spark import build_spark

    with open_catalog(warehouse, catalog_url) as catalog:
        # Resolved before Spark starts: an unknown table or epoch is reported at once.
        reader = snapshot(
            catalog, query, level, as_of_epoch=as_of_epoch, as_of_time=when, as_of_tag=as_of_tag
        )
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
        finally:
            reader.close()  # the snapshot's retention pin
    print_rows(columns, rows, format)


__all__ = [
    "sql",
]
