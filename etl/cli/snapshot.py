"""``etl snapshot``: the consistent cut as data, for any Delta reader. No Spark."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from etl.cli.app import (
    CatalogUrl,
    Consistency,
    ConsistencyOption,
    Warehouse,
    app,
    guard,
    open_catalog_reads,
    parse_consistency,
)
from etl.cli.render import echo, note, pipeline_cuts, print_json, print_rows
from etl.cli.sql import AsOfEpoch, AsOfTag, AsOfTime, time_travel


class SnapshotFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    DUCKDB = "duckdb"
    """A DuckDB SQL script: the bundled Delta extension loaded, a view per table."""


@app.command("snapshot")
@guard
def snapshot_command(
    targets: Annotated[
        list[str],
        typer.Argument(metavar="TABLE... | QUERY", help="Table names, or one SQL query."),
    ],
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    consistency: ConsistencyOption = Consistency.REPEATABLE_READ.value,
    as_of_epoch: AsOfEpoch = None,
    as_of_time: AsOfTime = None,
    as_of_tag: AsOfTag = None,
    format: Annotated[
        SnapshotFormat,
        typer.Option(
            "--format",
            case_sensitive=False,
            help="duckdb: a SQL script for any DuckDB (offline: it loads the bundled Delta "
            "extension) with one view per table at the cut's version.",
        ),
    ] = SnapshotFormat.TABLE,
) -> None:
    """The consistent cut as data: level, epoch, barrier time, per table location and version.

    Any Delta reader (Trino, a remote Spark, DuckDB elsewhere) can then read the same
    snapshot. No Spark is started.

    Example: etl snapshot words word_counts cnt_counts --format duckdb > cut.sql
    """
    level = parse_consistency(consistency)
    when = time_travel(level, as_of_epoch, as_of_time, as_of_tag)
    from etl.reader import snapshot

    what = targets[0] if len(targets) == 1 else targets
    with (
        open_catalog_reads(warehouse, catalog_url) as catalog,
        snapshot(
            catalog,
            what,
            level.value,
            as_of_epoch=as_of_epoch,
            as_of_time=when,
            as_of_tag=as_of_tag,
        ) as snap,
    ):
        cut = snap.describe()
    if format is SnapshotFormat.JSON:
        print_json(cut)
        return
    if format is SnapshotFormat.DUCKDB:
        from etl.reader import duckdb_script

        _refuse_tables_never_written(cut)
        echo(duckdb_script(cut).rstrip("\n"))
        return
    print_rows(
        ["table", "version", "epoch", "location"],
        [(t["table"], t["version"], t["epoch"], t["location"]) for t in cut["tables"]],
        "table",
    )
    note(
        f"level={cut['level']} epoch={cut['epoch'] if cut['epoch'] is not None else '-'} "
        f"barrier_ts={cut['barrier_ts'] or '-'}"
    )
    if "pipelines" in cut:
        note(pipeline_cuts(cut))


def _refuse_tables_never_written(cut: dict) -> None:
    """A table with nothing visible is an empty view in the DuckDB script, made from its
    Delta table's schema; a table whose job never committed has no Delta table to make it
    from (its ATTACH would fail in the script)."""
    from deltalake import DeltaTable

    from etl.errors import UsageError

    never = [
        t
        for t in cut["tables"]
        if t["version"] is None and not DeltaTable.is_deltatable(t["location"])
    ]
    if never:
        names = ", ".join(f"{t['table']!r} ({t['location']})" for t in never)
        raise UsageError(
            f"no Delta table yet for {names}: its job has not committed anything, so a "
            "DuckDB script cannot make a view of it; leave it out, or run its pipeline first"
        )


__all__ = ["snapshot_command"]
