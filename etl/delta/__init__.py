"""The only door to Delta: Spark tasks write Parquet files (small outputs: the driver, from
rows collected as Arrow), the driver commits them via delta-rs.

Tables stay plain Delta (protocol reader 1 / writer 2 unless the caller's data needs more,
e.g. timestampNtz, or merge jobs' deletion vectors: reader 3 / writer 7), readable by any
Delta reader that supports their features.

- :mod:`etl.delta.log`: opening a table, its files, the commit metadata recovery reads
  back (:func:`log_commits`), and :data:`EPOCH_COLUMN`;
- :mod:`etl.delta.layout`: Hive-style partition directories and partition types;
- :mod:`etl.delta.read`: Spark DataFrames (:func:`read_table`, :func:`read_epochs`) and
  Arrow/pandas without Spark (:func:`read_arrow`, :func:`read_pandas`);
- :mod:`etl.delta.write`: :func:`write_files`, :func:`commit_files`, :func:`restore_table`;
- :mod:`etl.delta.merge`: keyed upserts (:func:`merge_files`): deletion vectors or
  copy-on-write;
- :mod:`etl.delta.dv`: the deletion-vector codec; :mod:`etl.delta.logfile`: the log read
  and written directly where delta-rs cannot carry deletion vectors.

Writing one batch::

    files = write_files(df, location, partition_by=["_epoch"], file_prefix="7-1-0")
    version = commit_files(
        location, files, schema=to_arrow_schema(df.schema, timezone="UTC"), mode="append",
        partition_by=["_epoch"], fence=Fence("job", generation=3), metadata={...},
    )
"""

from etl.delta.layout import PARTITION_TYPES
from etl.delta.log import (
    EPOCH_COLUMN,
    SUPPORTED_READER_FEATURES,
    ActiveFile,
    active_files,
    log_commits,
    open_table,
    table_exists,
    table_version,
)
from etl.delta.merge import (
    MERGE_STRATEGIES,
    REWRITE_ALL_BYTES,
    MergeStrategy,
    MergeWrite,
    merge_files,
    require_unique_keys,
)
from etl.delta.read import epoch_rows, read_arrow, read_epochs, read_pandas, read_table, scan
from etl.delta.write import (
    SMALL_OUTPUT_ROWS,
    CommitMode,
    DataFile,
    DeletedRows,
    Fence,
    claim_table,
    commit_files,
    estimated_bytes,
    remove_staging,
    restore_table,
    write_files,
)

__all__ = [
    "EPOCH_COLUMN",
    "MERGE_STRATEGIES",
    "PARTITION_TYPES",
    "REWRITE_ALL_BYTES",
    "SMALL_OUTPUT_ROWS",
    "SUPPORTED_READER_FEATURES",
    "ActiveFile",
    "CommitMode",
    "DataFile",
    "DeletedRows",
    "Fence",
    "MergeStrategy",
    "MergeWrite",
    "active_files",
    "claim_table",
    "commit_files",
    "estimated_bytes",
    "log_commits",
    "merge_files",
    "open_table",
    "epoch_rows",
    "read_arrow",
    "read_epochs",
    "read_pandas",
    "read_table",
    "remove_staging",
    "require_unique_keys",
    "restore_table",
    "scan",
    "table_exists",
    "table_version",
    "write_files",
]
