"""Committing files a test wrote from a DataFrame to a Delta table."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.pandas.types import to_arrow_schema

from etl.delta import CommitRequest, DataFile, Fence, commit_files


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
