"""Log writers: what writes one version's entry of a Delta log, put if absent, and reads
back whether an entry landed.

:class:`LogWriter` is the interface the commit loop (:func:`etl.delta.commit.run_commit`)
drives; a storage backend implements it. Two implementations, chosen by what a commit
needs (:func:`etl.delta.commit.commit_files`): :class:`JsonLogWriter` (our own
newline-delimited JSON actions, :func:`etl.delta.logfile.commit_actions`: every commit to
a table whose writer features ask nothing more than its actions, claims included, planned
on our replay of the log, so that a commit costs the same whatever the table's files; and
what delta-rs' actions cannot carry, such as deletion vectors and schema changes) and
:class:`DeltaRsLogWriter` (delta-rs writes the entry: a new table, a RESTORE, and commits
to tables with other writer features). Both write the same commitInfo (the request's
metadata, the job and its generation) and the fence's app transaction.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    create_table_with_add_actions,
)

from consistency.models import META_COMMIT_ID, META_EPOCH, META_GENERATION, META_JOB
from etl.delta.fence import Fence
from etl.delta.files import DataFile
from etl.delta.layout import filesystem, log_path
from etl.delta.logfile import commit_actions, read_actions
from etl.faults import maybe_crash
from etl.storage import storage_options

CommitMode = Literal["append", "overwrite"]
"""How a commit treats the table's current files: keep them, or remove every one."""

Written = Literal["written", "taken"]
"""The outcome of writing a log entry: it is ours, or another writer created that version
first (nothing of ours is in the log then)."""

Entry = TypeVar("Entry")

# Checkpoints are ours (:func:`etl.delta.commit.checkpointed`), whichever writer commits.
# Log entries are deleted only by ``etl maintain``, which keeps every version a kept cut
# needs; delta-rs would otherwise delete them by the table's logRetentionDuration.
POST_COMMIT = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


class LogWriter(ABC, Generic[Entry]):
    """Writes version ``v`` of a table's log, only if it does not exist yet."""

    @abstractmethod
    def write(self, location: str, version: int, entry: Entry) -> Written:
        """Create log entry ``version`` of ``location`` holding ``entry`` if absent.

        "taken" when another writer created that version first. Any failure whose outcome
        is unknown (an I/O error after the write was sent) raises OSError or DeltaError:
        the caller looks up what landed (:meth:`holds`)."""

    def holds(self, location: str, version: int, commit_id: str) -> bool:
        """Whether log entry ``version`` is the commit ``commit_id``: a write can only land
        at the version it was written as (put if absent), so this is where an attempt
        reported taken, or whose outcome is unknown, is looked up."""
        fs, root = filesystem(location)
        try:
            actions = read_actions(fs, root, version)
        except FileNotFoundError:
            return False
        info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        return info.get(META_COMMIT_ID) == commit_id


@dataclass(frozen=True)
class DeltaRsCommit:
    """A log entry delta-rs writes: ``actions`` on ``table`` (the loaded version committed
    on) with ``mode``; without ``table``, a new table of ``schema`` with the adds; with
    ``restore_to``, a RESTORE of that version (no actions)."""

    fence: Fence
    custom: Mapping[str, Any]
    """commitInfo metadata besides the job and its generation."""
    schema: Schema
    partition_by: tuple[str, ...] = ()
    actions: tuple[AddAction | RemoveAction, ...] = ()
    mode: CommitMode = "append"
    table: DeltaTable | None = None
    restore_to: int | None = None

    def properties(self) -> CommitProperties:
        """commitInfo with ``custom``, the job and its generation; the fence's app
        transaction; no retry on top of another writer's commit."""
        return CommitProperties(
            custom_metadata={
                **self.custom,
                META_JOB: self.fence.job,
                META_GENERATION: self.fence.generation,
            },
            max_commit_retries=0,
            app_transactions=[self.fence.transaction()],
        )


class DeltaRsLogWriter(LogWriter[DeltaRsCommit]):
    """delta-rs writes the entry (put if absent on every store it supports)."""

    def write(self, location: str, version: int, entry: DeltaRsCommit) -> Written:
        table = entry.table
        try:
            if table is None:
                create_table_with_add_actions(
                    location,
                    entry.schema,
                    [a for a in entry.actions if isinstance(a, AddAction)],
                    mode="error",
                    partition_by=list(entry.partition_by) or None,
                    commit_properties=entry.properties(),
                    post_commithook_properties=POST_COMMIT,
                    storage_options=storage_options(location),
                )
            elif entry.restore_to is not None:
                table.restore(
                    entry.restore_to,
                    commit_properties=entry.properties(),
                    post_commithook_properties=POST_COMMIT,
                )
            else:
                table.create_write_transaction(
                    list(entry.actions),
                    mode=entry.mode,
                    schema=entry.schema,
                    partition_by=list(entry.partition_by) or None,
                    commit_properties=entry.properties(),
                    post_commithook_properties=POST_COMMIT,
                )
        except CommitFailedError:
            return "taken"
        return "written"


@dataclass(frozen=True)
class JsonCommit:
    """A log entry written as JSON actions: commitInfo (``operation`` with ``parameters``,
    ``custom``, the job and its generation), ``actions``, the adds of ``files`` and the
    fence's app transaction (Delta protocol, "Transaction Identifiers"; delta-rs writes it
    exactly so)."""

    fence: Fence
    custom: Mapping[str, Any]
    operation: str
    actions: tuple[Mapping[str, Any], ...] = ()
    files: tuple[DataFile, ...] = ()
    data_change: bool = True
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"mode": "Append"})

    def log_actions(self) -> list[Mapping[str, Any]]:
        commit_info = {
            "timestamp": int(time.time() * 1000),
            "operation": self.operation,
            "operationParameters": dict(self.parameters),
            "clientVersion": "delta-barrier",
            **self.custom,
            META_JOB: self.fence.job,
            META_GENERATION: self.fence.generation,
        }
        adds = [
            {
                "add": {
                    "path": log_path(f.path),
                    "partitionValues": dict(f.partition_values),
                    "size": f.size,
                    "modificationTime": f.modification_time,
                    "dataChange": self.data_change,
                    "stats": f.stats,
                }
            }
            for f in self.files
        ]
        txn = {"txn": {"appId": self.fence.app_id, "version": self.fence.generation}}
        return [{"commitInfo": commit_info}, *self.actions, *adds, txn]


class JsonLogWriter(LogWriter[JsonCommit]):
    """Our own writer (:func:`etl.delta.logfile.commit_actions`: a hard link locally, a
    conditional PUT on an object store)."""

    def write(self, location: str, version: int, entry: JsonCommit) -> Written:
        actions: Sequence[Mapping[str, Any]] = entry.log_actions()
        epoch = int(entry.custom.get(META_EPOCH, -1))
        maybe_crash("before_log_commit", job=entry.fence.job, epoch=epoch)
        try:
            commit_actions(location, version, actions)
        except FileExistsError:
            return "taken"
        maybe_crash("after_log_commit", job=entry.fence.job, epoch=epoch)
        return "written"


DELTA_RS = DeltaRsLogWriter()
JSON_LOG = JsonLogWriter()

__all__ = [
    "DELTA_RS",
    "JSON_LOG",
    "POST_COMMIT",
    "CommitMode",
    "DeltaRsCommit",
    "DeltaRsLogWriter",
    "JsonCommit",
    "JsonLogWriter",
    "LogWriter",
    "Written",
]
