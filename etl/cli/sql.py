"""``etl sql``: a query on a consistent snapshot of the tables it names."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from enum import StrEnum
from typing import Annotated

import typer

from etl.cli.app import (
    DEFAULT_FORMAT,
    CatalogUrl,
    Consistency,
    ConsistencyOption,
    Format,
    Warehouse,
    app,
    guard,
    open_catalog_reads,
    parse_consistency,
)
from etl.cli.render import note, pipeline_cuts, print_query


class Engine(StrEnum):
    DUCKDB = "duckdb"
    SPARK = "spark"


AsOfEpoch = Annotated[
    int | None,
    typer.Option("--as-of-epoch", metavar="EPOCH", help="Repeatable-read at this epoch.", min=1),
]
AsOfTime = Annotated[
    str | None,
    typer.Option(
        "--as-of-time",
        metavar="ISO-8601",
        help="Newest repeatable-read cut at or before this time (e.g. 2025-01-31T12:00:00Z).",
    ),
]
AsOfTag = Annotated[
    str | None,
    typer.Option(
        "--as-of-tag", metavar="TAG", help="Repeatable-read at the epoch a tag names (etl tag)."
    ),
]


def time_travel(
    consistency: Consistency,
    as_of_epoch: int | None,
    as_of_time: str | None,
    as_of_tag: str | None = None,
) -> datetime | None:
    """Check the time-travel flags (in flag names) and parse ``--as-of-time``."""
    from catalog import as_utc
    from etl.errors import UsageError

    given = [
        f
        for f, v in (
            ("--as-of-epoch", as_of_epoch),
            ("--as-of-time", as_of_time),
            ("--as-of-tag", as_of_tag),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise UsageError(f"give one of --as-of-epoch, --as-of-time, --as-of-tag, not {given}")
    if given and consistency is not Consistency.REPEATABLE_READ:
        raise UsageError(
            f"{given[0]} reads a consistent cut, which is --consistency repeatable-read; "
            f"not {consistency.value}"
        )
    if as_of_time is None:
        return None
    try:
        when = datetime.fromisoformat(as_of_time.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--as-of-time must be ISO-8601, got {as_of_time!r}") from None
    return as_utc(when)


@app.command()
@guard
def sql(
    query: Annotated[
        str,
        typer.Argument(metavar="QUERY", help="A SELECT over the pipeline's tables (Spark SQL)."),
    ],
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    consistency: ConsistencyOption = Consistency.REPEATABLE_READ.value,
    as_of_epoch: AsOfEpoch = None,
    as_of_time: AsOfTime = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            envvar="ETL_SQL_ENGINE",
            case_sensitive=False,
            help="duckdb: in-process, answers in about a second, no Spark (the default; "
            "for reads that fit one machine). spark: for large reads or Spark-only SQL.",
        ),
    ] = Engine.DUCKDB,
    format: Annotated[Format, typer.Option("--format", case_sensitive=False)] = DEFAULT_FORMAT,
    limit: Annotated[int, typer.Option(help="At most this many rows are printed.", min=0)] = 1000,
    master: Annotated[
        str | None,
        typer.Option(
            envvar="ETL_SPARK_MASTER", metavar="URL", help="Spark master (--engine spark)."
        ),
    ] = None,
    as_of_tag: AsOfTag = None,
) -> None:
    """Run a query on a consistent snapshot of the tables it names.

    The level, epoch and Delta versions used are printed on stderr; the rows on stdout.
    Both engines read the same snapshot and give the same answer.

    Example: etl sql "SELECT cnt, words FROM cnt_counts" --consistency repeatable-read
    """
    from catalog import as_utc
    from etl.reader import snapshot
    from etl.reader.translation import translate, translate_ahead

    if engine is Engine.DUCKDB:
        # A first run's translation is made in a child meanwhile (translate_ahead).
        translate_ahead(query)
        from etl.reader.duckdb_session import open_ahead

        open_ahead()

    level = parse_consistency(consistency)
    when = time_travel(level, as_of_epoch, as_of_time, as_of_tag)

    translate(query)  # a syntax error is reported before anything opens
    with (
        open_catalog_reads(warehouse, catalog_url) as catalog,
        # Resolved before any engine starts: an unknown table or epoch is reported at once.
        snapshot(
            catalog,
            query,
            level.value,
            as_of_epoch=as_of_epoch,
            as_of_time=when,
            as_of_tag=as_of_tag,
        ) as reader,
    ):
        barrier = reader.barrier_ts
        note(
            f"level={reader.level.value} epoch={reader.epoch if reader.epoch is not None else '-'} "
            f"versions={json.dumps(dict(reader.versions), sort_keys=True)}"
        )
        if barrier is not None:
            note(f"barrier_ts={as_utc(barrier).isoformat()}")
        cut = reader.describe()
        if "pipelines" in cut:
            note(pipeline_cuts(cut))
        if engine is Engine.SPARK:
            result = _run_on_spark(reader, query, limit=limit, master=master)
        else:
            result = reader.query_rows(query, limit=limit)  # no Arrow
    print_query(result, format)


def _run_on_spark(reader, query: str, *, limit: int, master: str | None):
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.logger import PySparkLogger

    from etl.errors import UsageError
    from etl.spark import build_spark

    reader.use_spark(build_spark(master=master, app_name="etl-sql"))
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # Query errors are reported below in one line, not as a logged Java stack trace.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
    from etl.reader import QueryRows

    try:
        return QueryRows.from_arrow(reader.query(query, engine="spark", limit=limit))
    except CapturedException as exc:  # Spark's analysis, parse and runtime errors
        problem = str(exc).strip().splitlines()[0]
        raise UsageError(f"Spark cannot run the query: {problem}") from None


__all__ = [
    "Engine",
    "sql",
    "time_travel",
]
