"""The only door to Delta: Spark tasks write Parquet files (small outputs: the driver, from
rows collected as Arrow), the driver commits them.

Tables stay plain Delta (protocol reader 1 / writer 2 unless the caller's data needs more,
e.g. timestampNtz, or merge jobs' deletion vectors: reader 3 / writer 7), readable by any
Delta reader that supports their features.

Reading:

- :mod:`etl.delta.log`: opening a table, its files, the commit metadata recovery reads
  back (:func:`log_commits`), and :data:`EPOCH_COLUMN`;
- :mod:`etl.delta.layout`: Hive-style partition directories and partition types;
- :mod:`etl.delta.read`: Spark DataFrames (:func:`read_table`, :func:`read_epochs`) and
  Arrow/pandas without Spark (:func:`read_arrow`, :func:`read_pandas`);
- :mod:`etl.delta.dv`: the deletion-vector codec; :mod:`etl.delta.logfile`: our own replay
  of the log (:func:`~etl.delta.logfile.log_snapshot`), which commits and Spark reads plan
  on (delta-rs' load of a table grows with its files), and our JSON entries.

Writing (imported only when used: a reader never loads them):

- :mod:`etl.delta.files`: Parquet files and their descriptors (:func:`write_files`,
  :class:`DataFile`), not yet committed;
- :mod:`etl.delta.fence`: a job's :class:`Fence`, its lease generation in the log;
- :mod:`etl.delta.commit`: :func:`commit_files` of a :class:`CommitRequest`,
  :func:`claim_table`, and the retry/verify loop every commit goes through
  (:func:`~etl.delta.commit.run_commit`: conflict back-off, the fence checked on each
  version tried, "did it land?" after an unknown outcome);
- :mod:`etl.delta.logwriter`: what writes a version's log entry put if absent, and reads
  back what landed (:class:`~etl.delta.logwriter.LogWriter`): our own JSON log writer for
  every commit to a table whose writer features ask nothing more than its actions (ours),
  delta-rs for the others, a table's creation and RESTOREs;
- :mod:`etl.delta.actions`: the log actions our own entries hold;
- :mod:`etl.delta.restore`: :func:`restore_table`;
- :mod:`etl.delta.merge`: keyed upserts (:func:`merge_files`): deletion vectors or
  copy-on-write; :mod:`etl.delta.maintenance`: compaction and log upkeep.

Writing one batch::

    files = write_files(df, location, partition_by=["_epoch"], file_prefix="7-1-0")
    version = commit_files(
        location,
        CommitRequest(
            files, schema=to_arrow_schema(df.schema, timezone="UTC"), mode="append",
            partition_by=["_epoch"], fence=Fence("job", generation=3), metadata={...},
        ),
    )
"""

from etl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    # reading
    "EPOCH_COLUMN": "etl.delta.log",
    "SUPPORTED_READER_FEATURES": "etl.delta.log",
    "ActiveFile": "etl.delta.log",
    "active_files": "etl.delta.log",
    "log_commits": "etl.delta.log",
    "open_table": "etl.delta.log",
    "table_exists": "etl.delta.log",
    "table_version": "etl.delta.log",
    "PARTITION_TYPES": "etl.delta.layout",
    "DRIVER_READ_BYTES": "etl.delta.read",
    "epoch_rows": "etl.delta.read",
    "read_arrow": "etl.delta.read",
    "TableRead": "etl.delta.read",
    "read_epochs": "etl.delta.read",
    "read_epochs_sized": "etl.delta.read",
    "read_pandas": "etl.delta.read",
    "read_table": "etl.delta.read",
    "read_table_sized": "etl.delta.read",
    "scan": "etl.delta.read",
    # writing
    "SMALL_OUTPUT_ROWS": "etl.delta.files",
    "DataFile": "etl.delta.files",
    "remove_staging": "etl.delta.files",
    "write_files": "etl.delta.files",
    "Fence": "etl.delta.fence",
    "CommitMode": "etl.delta.commit",
    "CommitRequest": "etl.delta.commit",
    "DeletedRows": "etl.delta.commit",
    "claim_table": "etl.delta.commit",
    "commit_files": "etl.delta.commit",
    "restore_table": "etl.delta.restore",
    "MERGE_STRATEGIES": "etl.delta.merge",
    "REWRITE_ALL_BYTES": "etl.delta.merge",
    "MergeStrategy": "etl.delta.merge",
    "MergeWrite": "etl.delta.merge",
    "merge_files": "etl.delta.merge",
    "require_unique_keys": "etl.delta.merge",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
