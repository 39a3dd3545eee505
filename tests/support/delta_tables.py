"""Committing files a test wrote from a DataFrame to a Delta table, rows of every kind of
column to write, and a table's copy read from its newest checkpoint on."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from pyspark.sql.pandas.types import to_arrow_schema

from etl.delta import CommitRequest, DataFile, Fence, commit_files
from etl.delta.layout import filesystem
from etl.delta.logfile import log_versions

WIDE_COLUMNS = (
    "id long, name string, amount decimal(12,3), ratio double, flag boolean, day date, "
    "at timestamp, local timestamp_ntz, raw binary, tags array<int>, "
    "attrs map<string,int>, address struct<city:string,zip:int>, "
    "part string, bucket int, _epoch long"
)


def wide_rows(ids, epoch: int) -> list[tuple]:
    """Rows of :data:`WIDE_COLUMNS` for ``ids``, of epoch ``epoch``."""
    return [
        (
            i,
            None if i % 7 == 0 else f"n{i}",
            Decimal(i) / 8,
            i / 3,
            i % 2 == 0,
            dt.date(2026, 1, 1) + dt.timedelta(days=i),
            dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC) + dt.timedelta(seconds=i * 1.5),
            dt.datetime(2026, 2, 1, 8) + dt.timedelta(minutes=i),
            bytes([i % 256]),
            [i, None, i + 1],
            {"a": i, "b": None},
            (f"city{i % 3}", None if i % 5 == 0 else i),
            # null, empty (stored as null) and ordinary partition values
            None if i % 4 == 0 else "" if i % 4 == 1 else f"p{i % 4}",
            i % 2,
            epoch,
        )
        for i in ids
    ]


def commit_frame_files(
    location: str,
    df,
    files: Sequence[DataFile],
    *,
    fence: Fence,
    epoch: int,
    partition_by: Sequence[str] = (),
    **options,
) -> int:
    """Append ``files`` (written from ``df``) to the table at ``location`` with ``df``'s
    schema and ``epoch`` in the commit's metadata; returns the version."""
    return commit_files(
        location,
        CommitRequest(
            files,
            schema=to_arrow_schema(df.schema, timezone="UTC"),
            mode="append",
            partition_by=partition_by,
            fence=fence,
            metadata={"delta_barrier.epoch": epoch},
            **options,
        ),
    )


def copy_from_checkpoint(location: str, copy: Path) -> int:
    """A copy of the table at ``copy`` without the log entries before its newest checkpoint
    (as ``etl maintain`` leaves a log): no replay of it is kept, so it is read from the
    checkpoint on. Returns the checkpoint's version (where it falls depends on the table's
    checkpoint phase)."""
    shutil.copytree(location, copy)
    _, checkpoints = log_versions(*filesystem(str(copy)))
    assert checkpoints, f"{location} has no checkpoint yet"
    newest = max(checkpoints)
    for version in range(newest):
        (copy / "_delta_log" / f"{version:020d}.json").unlink()
    return newest
