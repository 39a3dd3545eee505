"""Delta-level maintenance for retention (issue 11): which files the kept versions of a
table reference, deleting the rest, compacting small files and keeping the log short.

Nothing here decides *which* versions are kept: the caller (etl/retention/maintain.py)
computes that from the catalog. Compaction commits go through
:func:`etl.delta.write.commit_files` under the writer job's fence, with no epoch
metadata: recovery (consistency/recovery.py, ``_replay_log``) sees a commit of the job
without an epoch, which holds no rows of its own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from etl.delta.layout import filesystem, normalize_location, serialize_partition_value
from etl.delta.log import active_files, open_table
from etl.delta.logfile import (
    CHECKPOINT_FILE,
    COMMIT_FILE,
    CRC_FILE,
    LOG_DIR,
    log_entry,
    log_versions,
)
from etl.delta.write import (
    STAGING_PREFIX,
    DataFile,
    Fence,
    commit_files,
    write_data_file,
)

MAINTENANCE_META = "delta_barrier.maintenance"
"""commitInfo key of maintenance commits (value: ``compaction``)."""
LOG_GRACE = timedelta(minutes=5)
"""How long a checkpoint must exist before the log entries it supersedes are deleted."""


@dataclass(frozen=True)
class StoredFile:
    path: str
    """Relative to the table root, as on storage."""
    size: int
    mtime: float
    """Seconds since the Unix epoch."""


@dataclass
class Referenced:
    """Files the kept versions need, and every file the readable log mentions."""

    needed: set[str] = field(default_factory=set)
    known: set[str] = field(default_factory=set)
    first_version: int = 0
    latest_version: int = -1


def same_rows_version(location: str, version: int) -> int:
    """The newest version from ``version`` on reached through commits that changed no row
    (compaction, a job's claim): it reads the same rows as ``version``, from fewer files.

    Vacuum keeps these versions whenever it keeps ``version`` (:func:`referenced_files`),
    so a reader protected at ``version`` may read them instead.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    while True:
        try:
            entry = log_entry(fs, root, version + 1)
        except FileNotFoundError:
            return version
        if not entry.same_rows:
            return version
        version += 1


def referenced_files(location: str, keep_versions: Iterable[int], *, keep_from: int) -> Referenced:
    """The files active at any version in ``keep_versions``, at any version from
    ``keep_from`` on (the latest sealed state and everything after it: batches in flight),
    and at the versions that only rearranged the rows of a kept one (compaction).

    Loads the table once at the oldest kept version and replays the JSON entries after it.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    latest = open_table(location, operation="vacuum").version()
    kept = {v for v in keep_versions if 0 <= v <= latest}
    keep_from = max(0, min(keep_from, latest))
    first = min(kept | {keep_from})
    result = Referenced(first_version=first, latest_version=latest)
    base = open_table(location, version=first, operation="vacuum")
    active = {f.path for f in active_files(base)}
    result.known |= active
    pending = set(active)  # active and not yet marked needed
    if first in kept or first >= keep_from:
        result.needed |= pending
        pending.clear()
    previous_kept = first in kept or first >= keep_from
    for version in range(first + 1, latest + 1):
        entry = log_entry(fs, root, version)
        for kind, path in entry.files:
            result.known.add(path)
            if kind == "add":
                active.add(path)
                if path not in result.needed:
                    pending.add(path)
            else:
                active.discard(path)
                pending.discard(path)
        # A version holding a kept version's rows is kept with it: readers of the kept
        # one may read it instead (same_rows_version).
        previous_kept = (
            version in kept or version >= keep_from or (previous_kept and entry.same_rows)
        )
        if previous_kept:
            result.needed |= pending
            pending.clear()
    return result


def stored_files(location: str) -> list[StoredFile]:
    """Data files on storage: every ``*.parquet`` outside ``_delta_log`` and outside hidden
    (``_``/``.``) directories, which staging directories are (see :func:`staging_dirs`)."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    found = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if not info.is_file:
            continue
        relative = info.path[len(root) + 1 :]
        parts = relative.split("/")
        if any(p.startswith(("_", ".")) for p in parts) or not parts[-1].endswith(".parquet"):
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
        found.append(StoredFile(relative, info.size or 0, mtime))
    return found


def staging_dirs(location: str) -> list[StoredFile]:
    """Staging directories of writes (a crashed batch leaves its own): size of their files
    and the newest modification time inside."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    dirs = []
    for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        if info.type != pafs.FileType.Directory or not info.base_name.startswith(STAGING_PREFIX):
            continue
        inside = fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
        times = [i.mtime.timestamp() for i in [info, *inside] if i.mtime is not None]
        size = sum(i.size or 0 for i in inside if i.is_file)
        dirs.append(StoredFile(info.base_name, size, max(times) if times else time.time()))
    return dirs


def delete_paths(location: str, paths: Sequence[str], *, directories: bool = False) -> None:
    location = normalize_location(location)
    fs, root = filesystem(location)
    for path in paths:
        try:
            if directories:
                fs.delete_dir(f"{root}/{path}")
            else:
                fs.delete_file(f"{root}/{path}")
        except FileNotFoundError:
            pass


# -- compaction --------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionPlan:
    groups: tuple[tuple[str, ...], ...]
    """Per partition, the small files to rewrite into one."""
    version: int

    @property
    def files_in(self) -> int:
        return sum(len(g) for g in self.groups)


def plan_compaction(
    location: str, *, small_file_bytes: int = 16 << 20, min_files: int = 4
) -> CompactionPlan:
    """Per partition of the latest version, the files under ``small_file_bytes``, when
    there are at least ``min_files`` of them."""
    table = open_table(normalize_location(location), operation="compact")
    by_partition: dict[tuple, list[str]] = {}
    for file in active_files(table):
        if file.size < small_file_bytes:
            key = tuple(sorted((k, repr(v)) for k, v in file.partition_values.items()))
            by_partition.setdefault(key, []).append(file.path)
    groups = tuple(tuple(sorted(p)) for p in by_partition.values() if len(p) >= min_files)
    return CompactionPlan(groups=groups, version=table.version())


@dataclass(frozen=True)
class Rewrite:
    """Files written by :func:`rewrite_small_files`, not committed yet."""

    location: str
    plan: CompactionPlan
    files: tuple[DataFile, ...]
    schema: pa.Schema
    partition_by: tuple[str, ...]

    @property
    def removes(self) -> tuple[str, ...]:
        return tuple(path for group in self.plan.groups for path in group)


def rewrite_small_files(location: str, plan: CompactionPlan) -> Rewrite:
    """Write each group of ``plan`` as one file (rows and their ``_epoch`` unchanged);
    nothing is committed: see :func:`commit_rewrite`, or :func:`discard_rewrite`."""
    location = normalize_location(location)
    table = open_table(location, version=plan.version, operation="compact")
    partition_by = list(table.metadata().partition_columns)
    schema = pa.schema(table.schema().to_arrow())
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    current = {f.path: f for f in active_files(table)}
    fs, root = filesystem(location)
    written: list[DataFile] = []
    for group in plan.groups:
        parts = [pq.read_table(f"{root}/{path}", filesystem=fs) for path in group]
        rows = pa.concat_tables([p.select(file_schema.names).cast(file_schema) for p in parts])
        values = {
            k: serialize_partition_value(v) for k, v in current[group[0]].partition_values.items()
        }
        written.append(
            write_data_file(
                fs, root, rows, partition_by=partition_by, values=values, prefix="compact"
            )
        )
    return Rewrite(location, plan, tuple(written), schema, tuple(partition_by))


def commit_rewrite(rewrite: Rewrite, *, fence: Fence) -> int:
    """Commit ``rewrite`` as one commit of ``fence``'s job that adds the new files and
    removes the small ones, every action with dataChange false; returns the new version.
    CommitConflictError when another commit removed one of the small files meanwhile
    (nothing is lost: call :func:`discard_rewrite`)."""
    return commit_files(
        rewrite.location,
        rewrite.files,
        schema=rewrite.schema,
        mode="append",
        fence=fence,
        metadata={MAINTENANCE_META: "compaction"},
        partition_by=rewrite.partition_by,
        removes=rewrite.removes,
        data_change=False,
    )


def discard_rewrite(rewrite: Rewrite) -> None:
    """Delete the files of a rewrite that was not committed."""
    delete_paths(rewrite.location, [f.path for f in rewrite.files])


# -- the log -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogUpkeep:
    checkpoint_version: int | None
    """The version checkpointed now (None: it already had one)."""
    entries_removed: int
    first_version: int
    """The oldest version still readable."""


def log_upkeep(
    location: str,
    *,
    keep_from_version: int,
    dry_run: bool = False,
    grace: timedelta = LOG_GRACE,
) -> LogUpkeep:
    """Checkpoint the latest version, and delete log entries (commits, checkpoints, crc)
    of versions before ``keep_from_version`` (the oldest version any kept cut needs).

    Before anything is deleted the log gets a checkpoint at exactly
    ``keep_from_version``, so every version from it on stays readable by any Delta reader;
    the latest checkpoint is written last, so ``_last_checkpoint`` names it. Entries are
    deleted only below a checkpoint that has existed for ``grace``: a reader that listed
    the log before that checkpoint was written may still be loading an older one.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    commits, checkpoints = log_versions(fs, root)
    table = open_table(location, operation="checkpoint")  # loaded once: a long log is slow
    latest = table.version()
    keep_from = max(0, min(keep_from_version, latest))
    old = [v for v in commits if v < keep_from]
    old_checkpoints = [v for v in checkpoints if v < keep_from]
    if dry_run:
        new_cp = None if latest in checkpoints else latest
        return LogUpkeep(new_cp, len(old) + len(old_checkpoints), keep_from if old else 0)
    if old and keep_from not in checkpoints and keep_from != latest:
        DeltaTable(location, version=keep_from).create_checkpoint()
    checkpointed = None
    if latest not in checkpoints or old:
        table.create_checkpoint()
        checkpointed = latest if latest not in checkpoints else None
    _, checkpoints = log_versions(fs, root)
    settled = time.time() - grace.total_seconds()
    boundary = max(
        (v for v, mtime in checkpoints.items() if v <= keep_from and mtime <= settled),
        default=None,
    )
    removed = 0
    names = []
    if boundary is not None:
        for info in fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}")):
            match = (
                COMMIT_FILE.match(info.base_name)
                or CHECKPOINT_FILE.match(info.base_name)
                or CRC_FILE.match(info.base_name)
            )
            if match and int(match.group(1)) < boundary:
                names.append(info.path)
    for path in sorted(names):
        fs.delete_file(path)
        removed += 1
    first = boundary if removed and boundary is not None else (commits[0] if commits else 0)
    return LogUpkeep(checkpointed, removed, first)


def log_size(location: str) -> tuple[int, int]:
    """(files, bytes) of the table's ``_delta_log``."""
    location = normalize_location(location)
    total = count = 0
    for dirpath, _, files in os.walk(os.path.join(location, LOG_DIR)):
        for name in files:
            count += 1
            total += os.path.getsize(os.path.join(dirpath, name))
    return count, total


__all__ = [
    "LOG_GRACE",
    "MAINTENANCE_META",
    "CompactionPlan",
    "LogUpkeep",
    "Referenced",
    "Rewrite",
    "StoredFile",
    "commit_rewrite",
    "delete_paths",
    "discard_rewrite",
    "log_size",
    "log_upkeep",
    "plan_compaction",
    "referenced_files",
    "rewrite_small_files",
    "same_rows_version",
    "staging_dirs",
    "stored_files",
]
