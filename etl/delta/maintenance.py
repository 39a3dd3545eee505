"""Delta-level maintenance for retention (issue 11): which files the kept versions of a
table reference, deleting the rest, compacting small files and keeping the log short.

Nothing here decides *which* versions are kept: the caller (etl/retention/maintain.py)
computes that from the catalog. Compaction commits go through
:func:`etl.delta.commit.commit_files` under the writer job's fence, with no epoch
metadata: recovery (consistency/recovery.py, ``_replay_log``) sees a commit of the job
without an epoch, which holds no rows of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from etl.delta.commit import CommitRequest, commit_files
from etl.delta.dv import DV_FILE_PREFIX, read_rows
from etl.delta.fence import Fence
from etl.delta.files import STAGING_PREFIX, DataFile, write_data_file
from etl.delta.layout import filesystem, normalize_location, serialize_partition_value
from etl.delta.log import ActiveFile, active_files, open_table
from etl.delta.logfile import (
    CHECKPOINT_FILE,
    COMMIT_FILE,
    CRC_FILE,
    LOG_DIR,
    log_entry,
    log_versions,
)
from etl.storage import list_directory

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


def referenced_files(location: str, keep_versions: Iterable[int], *, keep_from: int) -> Referenced:
    """The files active at any version in ``keep_versions``, at any version from
    ``keep_from`` on (the latest sealed state and everything after it: batches in flight),
    and at the versions that only rearranged the rows of a kept one (compaction).

    A data file's deletion vector file is needed with it: without it the rows it deletes
    would come back (Delta protocol, "Deletion Vectors"). One DV file may serve several
    data files. Loads the table once at the oldest kept version and replays the JSON
    entries after it; the entries before it only name files (``known``): a file no
    readable entry names is an orphan, which only its age lets go.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    latest = open_table(location, operation="vacuum").version()
    kept = {v for v in keep_versions if 0 <= v <= latest}
    keep_from = max(0, min(keep_from, latest))
    first = min(kept | {keep_from})
    result = Referenced(first_version=first, latest_version=latest)
    base = open_table(location, version=first, operation="vacuum")
    active: dict[str, str | None] = {}  # data file -> its DV file
    for file in active_files(base):
        descriptor = file.deletion_vector
        active[file.path] = None if descriptor is None else descriptor.relative_path()
    result.known |= set(active) | {dv for dv in active.values() if dv}
    # Files that commits before it added or removed are known too: the log says which
    # versions had them, so they go without waiting for the orphan age.
    commits, _ = log_versions(fs, root)
    for version in (v for v in commits if v < first):
        for _, path, dv in log_entry(fs, root, version).files:
            result.known |= {p for p in (path, dv) if p}
    pending = set(active) | {dv for dv in active.values() if dv}  # not yet marked needed
    previous_kept = first in kept or first >= keep_from
    if previous_kept:
        result.needed |= pending
        pending.clear()
    for version in range(first + 1, latest + 1):
        entry = log_entry(fs, root, version)
        for kind, path, dv in entry.files:
            result.known.add(path)
            if dv:
                result.known.add(dv)
            if kind == "add":
                active[path] = dv
                pending |= {p for p in (path, dv) if p and p not in result.needed}
            else:
                active.pop(path, None)
                pending.discard(path)
                if dv and dv not in active.values():
                    pending.discard(dv)
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
    """Data files on storage: every ``*.parquet`` and deletion vector file
    (``deletion_vector_*.bin``) outside ``_delta_log`` and outside hidden (``_``/``.``)
    directories, which staging directories are (see :func:`staging_dirs`)."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    found = []
    for info in list_directory(fs, root, recursive=True):
        if not info.is_file:
            continue
        relative = info.path[len(root) + 1 :]
        parts = relative.split("/")
        if any(p.startswith(("_", ".")) for p in parts) or not _is_table_file(parts[-1]):
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
        found.append(StoredFile(relative, info.size or 0, mtime))
    return found


def _is_table_file(name: str) -> bool:
    return name.endswith(".parquet") or (name.startswith(DV_FILE_PREFIX) and name.endswith(".bin"))


def staging_dirs(location: str) -> list[StoredFile]:
    """Staging directories of writes (a crashed batch leaves its own): size of their files
    and the newest modification time inside. One its writer removed while it was listed
    (a batch that committed) is not one."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    dirs = []
    for info in list_directory(fs, root):
        if info.type != pafs.FileType.Directory or not info.base_name.startswith(STAGING_PREFIX):
            continue
        inside = list_directory(fs, info.path, recursive=True)
        if not inside and fs.get_file_info(info.path).type == pafs.FileType.NotFound:
            continue
        times = [i.mtime.timestamp() for i in [info, *inside] if i.mtime is not None]
        size = sum(i.size or 0 for i in inside if i.is_file)
        dirs.append(StoredFile(info.base_name, size, max(times) if times else time.time()))
    return dirs


def temporary_leftovers(location: str) -> list[StoredFile]:
    """Temporary files that a writer killed mid-write left: in ``_delta_log`` ours
    (``.<version>.json.<uuid>.tmp``, :func:`etl.delta.logfile.commit_actions`), delta-rs'
    (``_commit_<uuid>.json.tmp``) and object_store's staged uploads (``<name>#<n>``); at
    the table's root a deletion vector file being written
    (``.deletion_vector_<uuid>.bin.<pid>.tmp``, :func:`etl.delta.dv.write_dv_file`).
    No reader takes them for table files; only their age tells a dead writer's from a
    live one's."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    found = []
    for directory, is_leftover in (
        (LOG_DIR, lambda name: name.endswith(".tmp") or "#" in name),
        ("", lambda name: name.startswith("." + DV_FILE_PREFIX) and name.endswith(".tmp")),
    ):
        where = f"{root}/{directory}" if directory else root
        for info in list_directory(fs, where):
            if info.is_file and is_leftover(info.base_name):
                mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
                path = f"{directory}/{info.base_name}" if directory else info.base_name
                found.append(StoredFile(path, info.size or 0, mtime))
    return found


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


DV_PURGE_SHARE = 0.2
"""Compaction rewrites a file whose deletion vector deletes at least this share of its
rows, whatever its size, so that deleted rows do not pile up behind deletion vectors."""


@dataclass(frozen=True)
class CompactionPlan:
    groups: tuple[tuple[ActiveFile, ...], ...]
    """Per partition, the files to rewrite into one: small ones, and ones mostly deleted."""
    version: int

    @property
    def files_in(self) -> int:
        return sum(len(g) for g in self.groups)


def plan_compaction(
    location: str, *, small_file_bytes: int = 16 << 20, min_files: int = 4
) -> CompactionPlan:
    """Per partition of the latest version, the files under ``small_file_bytes`` when
    there are at least ``min_files`` of them, and the files whose deletion vectors delete
    at least :data:`DV_PURGE_SHARE` of their rows."""
    table = open_table(normalize_location(location), operation="compact")
    small: dict[tuple, list[ActiveFile]] = {}
    purged: dict[tuple, list[ActiveFile]] = {}
    for file in active_files(table):
        key = tuple(sorted((k, repr(v)) for k, v in file.partition_values.items()))
        if _mostly_deleted(file):
            purged.setdefault(key, []).append(file)
        elif file.size < small_file_bytes:
            small.setdefault(key, []).append(file)
    groups = []
    for key in sorted(set(small) | set(purged)):
        files = purged.get(key, []) + (small[key] if len(small.get(key, ())) >= min_files else [])
        if files:
            groups.append(tuple(sorted(files, key=lambda f: f.path)))
    return CompactionPlan(groups=tuple(groups), version=table.version())


def _mostly_deleted(file: ActiveFile) -> bool:
    dv = file.deletion_vector
    rows = file.rows
    return (
        dv is not None and rows is not None and rows > 0 and dv.cardinality >= DV_PURGE_SHARE * rows
    )


@dataclass(frozen=True)
class Rewrite:
    """Files written by :func:`rewrite_small_files`, not committed yet."""

    location: str
    plan: CompactionPlan
    files: tuple[DataFile, ...]
    schema: pa.Schema
    partition_by: tuple[str, ...]

    @property
    def removes(self) -> tuple[ActiveFile, ...]:
        return tuple(file for group in self.plan.groups for file in group)


def rewrite_small_files(location: str, plan: CompactionPlan) -> Rewrite:
    """Write each group of ``plan`` as one file (rows and their ``_epoch`` unchanged, the
    rows deletion vectors delete left out); nothing is committed: see
    :func:`commit_rewrite`, or :func:`discard_rewrite`."""
    location = normalize_location(location)
    table = open_table(location, version=plan.version, operation="compact")
    partition_by = list(table.metadata().partition_columns)
    schema = pa.schema(table.schema().to_arrow())
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    fs, root = filesystem(location)
    written: list[DataFile] = []
    for group in plan.groups:
        parts = [_live_rows(fs, root, file).select(file_schema.names) for file in group]
        rows = pa.concat_tables([p.cast(file_schema) for p in parts])
        if not rows.num_rows:
            continue  # every row deleted: the files go, nothing replaces them
        values = {k: serialize_partition_value(v) for k, v in group[0].partition_values.items()}
        written.append(
            write_data_file(
                fs, root, rows, partition_by=partition_by, values=values, prefix="compact"
            )
        )
    return Rewrite(location, plan, tuple(written), schema, tuple(partition_by))


def _live_rows(fs: pafs.FileSystem, root: str, file: ActiveFile) -> pa.Table:
    """The rows of a data file its deletion vector does not delete."""
    rows = pq.read_table(f"{root}/{file.path}", filesystem=fs)
    if file.deletion_vector is None:
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[read_rows(fs, root, file.deletion_vector)] = False
    return rows.filter(pa.array(keep))


def commit_rewrite(rewrite: Rewrite, *, fence: Fence) -> int:
    """Commit ``rewrite`` as one commit of ``fence``'s job that adds the new files and
    removes the rewritten ones (with their deletion vectors), every action with
    dataChange false; returns the new version. CommitConflictError when another commit
    removed one of them or changed its deletion vector meanwhile (nothing is lost: call
    :func:`discard_rewrite`)."""
    return commit_files(
        rewrite.location,
        CommitRequest(
            rewrite.files,
            schema=rewrite.schema,
            mode="append",
            fence=fence,
            metadata={MAINTENANCE_META: "compaction"},
            partition_by=rewrite.partition_by,
            removes=rewrite.removes,
            data_change=False,
        ),
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
    entries_held: int = 0
    """Log entries of versions no kept cut needs that stay for now: below the newest
    checkpoint at or before the oldest kept version only once it is ``grace`` old."""


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
    the log before that checkpoint was written may still be loading an older one. A dry
    run counts exactly what a run now would delete (a checkpoint it would write is new,
    so it deletes nothing below it yet).
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    commits, checkpoints = log_versions(fs, root)
    table = open_table(location, operation="checkpoint")  # loaded once: a long log is slow
    latest = table.version()
    keep_from = max(0, min(keep_from_version, latest))
    old = [v for v in commits if v < keep_from]
    checkpointed = None
    if not dry_run:
        if old and keep_from not in checkpoints and keep_from != latest:
            open_table(location, version=keep_from, operation="checkpoint").create_checkpoint()
        if latest not in checkpoints or old:
            table.create_checkpoint()
            checkpointed = latest if latest not in checkpoints else None
        _, checkpoints = log_versions(fs, root)
    elif latest not in checkpoints:
        checkpointed = latest
    settled = time.time() - grace.total_seconds()
    boundary = max(
        (v for v, mtime in checkpoints.items() if v <= keep_from and mtime <= settled),
        default=None,
    )
    names = _log_entries(fs, root, below=boundary) if boundary is not None else []
    held = len(_log_entries(fs, root, below=keep_from)) - len(names)
    if not dry_run:
        for path in sorted(names):
            fs.delete_file(path)
    first = boundary if names and boundary is not None else (commits[0] if commits else 0)
    return LogUpkeep(checkpointed, len(names), first, entries_held=held)


def _log_entries(fs: pafs.FileSystem, root: str, *, below: int) -> list[str]:
    """Paths of the log's commits, checkpoints and crc files of versions below ``below``."""
    names = []
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}")):
        match = (
            COMMIT_FILE.match(info.base_name)
            or CHECKPOINT_FILE.match(info.base_name)
            or CRC_FILE.match(info.base_name)
        )
        if match and int(match.group(1)) < below:
            names.append(info.path)
    return names


def log_size(location: str) -> tuple[int, int]:
    """(files, bytes) of the table's ``_delta_log``."""
    location = normalize_location(location)
    fs, root = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}", recursive=True))
    files = [info for info in infos if info.type == pafs.FileType.File]
    return len(files), sum(info.size or 0 for info in files)


__all__ = [
    "DV_PURGE_SHARE",
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
    "temporary_leftovers",
    "log_size",
    "log_upkeep",
    "plan_compaction",
    "referenced_files",
    "rewrite_small_files",
    "staging_dirs",
    "stored_files",
]
