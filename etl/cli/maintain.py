"""``etl maintain``: expiry, compaction, checkpoints, vacuum and log cleanup (issue 11).

Safe from cron while pipelines run: see etl/retention/maintain.py. No Spark.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from etl.cli.app import CatalogUrl, Warehouse, app, guard, open_catalog
from etl.cli.render import echo, out, rows_table


@app.command()
@guard
def maintain(
    pipeline: Annotated[str | None, typer.Argument(help="Pipeline (default: every one).")] = None,
    warehouse: Warehouse = "warehouse",
    catalog_url: CatalogUrl = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go; change nothing.")
    ] = False,
    orphan_age: Annotated[
        float, typer.Option(help="Seconds before unreferenced files of crashed batches may go.")
    ] = 3600.0,
    compact: Annotated[bool, typer.Option(help="Compact small files of idle jobs.")] = True,
    format: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
) -> None:
    """Expire epochs by the retention policy, compact, checkpoint, vacuum, trim the logs.

    It says what it removed (with --dry-run: what a run now would remove) and what it held
    back and why: epochs a pin or tag keeps, files younger than --orphan-age or of a
    running job, log entries until their checkpoint is 5 minutes old.

    Example: etl maintain --dry-run --format json
    """
    from datetime import timedelta

    from etl.retention.maintain import maintain as run_maintenance

    with open_catalog(warehouse, catalog_url) as catalog:
        report = run_maintenance(
            catalog,
            pipeline=pipeline,
            dry_run=dry_run,
            orphan_age=timedelta(seconds=orphan_age),
            compaction=compact,
        )
    if format == "json":
        typer.echo(json.dumps(report.to_json(), indent=2, default=str))
        return
    verb = "would remove" if dry_run else "removed"
    cells = [
        [
            t.table,
            t.files_removed,
            t.bytes_removed,
            t.orphans_removed,
            t.staging_removed,
            f"{t.compacted_files}->{t.compacted_into}" if t.compacted_files else "",
            t.log_entries_removed,
            "; ".join(t.skipped),
        ]
        for t in report.tables
    ]
    out.print(
        rows_table(
            [
                "table",
                "files",
                "bytes",
                "orphans",
                "staging",
                "compacted",
                "log entries",
                "skipped",
            ],
            cells,
            title=f"etl maintain ({verb})",
        )
    )
    typer.echo(
        f"{verb}: {report.files_removed} files, {report.bytes_removed} bytes; "
        f"epochs {'to expire' if dry_run else 'expired'}: {len(report.epochs_expired)}"
        + (
            f" ({report.epochs_expired[0]}..{report.epochs_expired[-1]})"
            if report.epochs_expired
            else ""
        )
        + f"; expired pins: {report.pins_removed}"
    )
    for reason in report.held_back:
        echo(f"held back: {reason}")


__all__ = ["maintain"]
