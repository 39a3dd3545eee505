"""The Delta I/O layer: Spark tasks write Parquet files, the driver commits them via delta-rs.

Tables stay plain Delta (protocol reader 1 / writer 2 unless the caller's data needs more,
e.g. timestampNtz), readable by any Delta reader.

Writing one batch::

    files = write_files(df, location, partition_by=["_epoch"], file_prefix="7-1-0")
    version = commit_files(
        location, files, schema=to_arrow_schema(df.schema, timezone="UTC"), mode="append",
        partition_by=["_epoch"], app_id="delta-barrier/job", txn_version=7, metadata={...},
    )

Reading: :func:`read_table`, :func:`read_epochs` (Spark), :func:`read_arrow`,
:func:`read_pandas` (delta-rs, no Spark). Recovery: :func:`log_commits`, :func:`restore_table`.
"""

from etl.delta_read import (
    EPOCH_COLUMN,
    SUPPORTED_READER_FEATURES,
    log_commits,
    read_arrow,
    read_epochs,
    read_pandas,
    read_table,
    table_version,
)
from etl.delta_write import (
    DataFile,
    MergeWrite,
    commit_files,
    merge_files,
    remove_staging,
    restore_table,
    write_files,
)

__all__ = [
    "EPOCH_COLUMN",
    "SUPPORTED_READER_FEATURES",
    "DataFile",
    "MergeWrite",
    "commit_files",
    "log_commits",
    "merge_files",
    "read_arrow",
    "read_epochs",
    "read_pandas",
    "read_table",
    "remove_staging",
    "restore_table",
    "table_version",
    "write_files",
]
