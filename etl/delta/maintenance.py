"""Delta-level maintenance for retention (issue 11): which files the kept versions of a
table reference, deleting the rest, compacting small files and keeping the log short.

Nothing here decides *which* versions are kept: the caller (etl/retention/maintain.py)
computes that from the catalog. Compaction commits go through
:func:`etl.delta.write.commit_files` under the writer job's fence, with no epoch
metadata: recovery (consistency/recovery.py, ``_replay_log``) sees a commit of the job
without an epoch, which holds no rows of its own.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from etl.delta.layout import hive_directory, normalize_location, serialize_partition_value
from etl.delta.log import active_files, open_table
from etl.delta.write import (
    STAGING_PREFIX,
    DataFile,
    Fence,
    commit_files,
    file_statistics,
    filesystem,
)

LOG_DIR = "_delta_log"
MAINTENANCE_META = "delta_barrier.maintenance"
"""commitInfo key of maintenance commits (value: ``compaction``)."""
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
_CRC_FILE = re.compile(r"^(\d{20})\.crc$")
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


def _log_versions(fs: pafs.FileSystem, root: str) -> tuple[list[int], dict[int, float]]:
    """(commit versions with a JSON entry, {checkpoint version: its file's mtime})."""
    commits: list[int] = []
    checkpoints: dict[int, float] = {}
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}", allow_not_found=True)):
        if match := _COMMIT_FILE.match(info.base_name):
            commits.append(int(match.group(1)))
        elif match := _CHECKPOINT_FILE.match(info.base_name):
            mtime = info.mtime.timestamp() if info.mtime else 0.0
            checkpoints[int(match.group(1))] = max(checkpoints.get(int(match.group(1)), 0.0), mtime)
    return sorted(commits), checkpoints


def _actions(fs: pafs.FileSystem, root: str, version: int) -> Iterable[tuple[str, str]]:
    with fs.open_input_stream(f"{root}/{LOG_DIR}/{version:020d}.json") as stream:
        text = stream.read().decode()
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        for kind in ("add", "remove"):
            if kind in action:
                yield kind, unquote(action[kind]["path"])


def referenced_files(location: str, keep_versions: Iterable[int], *, keep_from: int) -> Referenced:
    """The files active at any version in ``keep_versions`` or at any version from
    ``keep_from`` on (the latest sealed state and everything after it: batches in flight).

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
    for version in range(first + 1, latest + 1):
        for kind, path in _actions(fs, root, version):
            result.known.add(path)
            if kind == "add":
                active.add(path)
                if path not in result.needed:
                    pending.add(path)
            else:
                active.discard(path)
                pending.discard(path)
        if version in kept or version >= keep_from:
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


def compact(location: str, plan: CompactionPlan, *, fence: Fence) -> int | None:
    """Rewrite each group of ``plan`` into one file, in one commit of ``fence``'s job that
    removes the small files; rows and their ``_epoch`` are unchanged. Returns the new
    version (None when there was nothing to do). CommitConflictError when another commit
    removed one of the files meanwhile (nothing is lost: the rewritten files are orphans).
    """
    if not plan.groups:
        return None
    location = normalize_location(location)
    table = open_table(location, version=plan.version, operation="compact")
    partition_by = list(table.metadata().partition_columns)
    schema = pa.schema(table.schema().to_arrow())
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    current = {f.path: f for f in active_files(table)}
    fs, root = filesystem(location)
    written: list[DataFile] = []
    removes: list[str] = []
    for group in plan.groups:
        parts = [pq.read_table(f"{root}/{path}", filesystem=fs) for path in group]
        rows = pa.concat_tables([p.select(file_schema.names).cast(file_schema) for p in parts])
        values = {
            k: serialize_partition_value(v) for k, v in current[group[0]].partition_values.items()
        }
        directory = hive_directory(partition_by, values)
        name = f"part-compact-{uuid.uuid4()}.parquet"
        target = f"{directory}/{name}" if directory else name
        fs.create_dir(f"{root}/{directory}" if directory else root, recursive=True)
        pq.write_table(rows, f"{root}/{target}", filesystem=fs, compression="snappy")
        metadata = pq.read_metadata(f"{root}/{target}", filesystem=fs)
        written.append(
            DataFile(
                path=target,
                size=fs.get_file_info(f"{root}/{target}").size,
                partition_values=values,
                rows=metadata.num_rows,
                stats=file_statistics(metadata, file_schema),
                modification_time=int(time.time() * 1000),
            )
        )
        removes.extend(group)
    return commit_files(
        location,
        written,
        schema=schema,
        mode="append",
        fence=fence,
        metadata={MAINTENANCE_META: "compaction"},
        partition_by=partition_by,
        removes=removes,
        data_change=False,
    )


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
    commits, checkpoints = _log_versions(fs, root)
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
    _, checkpoints = _log_versions(fs, root)
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
                _COMMIT_FILE.match(info.base_name)
                or _CHECKPOINT_FILE.match(info.base_name)
                or _CRC_FILE.match(info.base_name)
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
    "StoredFile",
    "compact",
    "delete_paths",
    "log_size",
    "log_upkeep",
    "plan_compaction",
    "referenced_files",
    "staging_dirs",
    "stored_files",
]
