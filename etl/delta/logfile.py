"""The Delta log's files read and written directly: our own replay of the log (the
active files, app transactions, protocol and metadata of a version:
:func:`log_snapshot`), which commits and Spark reads plan on, since delta-rs' load of a
table reads its newest checkpoint again for every version it is brought to (a cost that
grows with the table's files); and what delta-rs does not expose or write: deletion vectors.

delta-rs' ``get_add_actions`` does not give a file's deletion vector, and its
``AddAction``/``RemoveAction`` cannot carry one: a remove of a file with a DV written by
delta-rs leaves the logical file active (Delta protocol, "Deletion Vectors": a logical
file is identified by its path *and* its DV's unique id). So the active files' ``add``
actions are replayed here from the newest checkpoint at or before a version plus the JSON
commits after it (Delta protocol, "Action Reconciliation"), and commits that add a DV or
remove a file carrying one are written here as newline-delimited JSON actions, put if
absent (Delta protocol, "Delta Log Entries": a version is created at most once).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from etl.delta.layout import filesystem, normalize_location
from etl.errors import DeltaIOError
from etl.storage import is_local, list_directory, put_if_absent, read_object

if TYPE_CHECKING:
    # pyarrow (and the DV codec, which needs it) are imported where used: a reader's
    # same_rows_version of a local table imports neither.
    import pyarrow.fs as pafs

    from etl.delta.dv import DeletionVector

LOG_DIR = "_delta_log"
COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
CRC_FILE = re.compile(r"^(\d{20})\.crc$")
CHECKPOINT_INTERVAL = 10
"""Versions between the checkpoints our commits write (Delta protocol, "Checkpoints"):
delta-spark's default ``delta.checkpointInterval`` (delta-rs' is 100). A job commits once
per epoch and every open replays the JSON commits after the newest checkpoint."""
DELETION_VECTORS = "deletionVectors"
"""The reader and writer table feature of deletion vectors (Delta protocol, "Table Features")."""


def log_versions(fs: pafs.FileSystem, root: str) -> tuple[list[int], dict[int, float]]:
    """(commit versions with a JSON entry, {checkpoint version: its file's mtime})."""
    commits: list[int] = []
    checkpoints: dict[int, float] = {}
    for info in list_directory(fs, f"{root}/{LOG_DIR}"):
        if match := COMMIT_FILE.match(info.base_name):
            commits.append(int(match.group(1)))
        elif match := CHECKPOINT_FILE.match(info.base_name):
            mtime = info.mtime.timestamp() if info.mtime else 0.0
            checkpoints[int(match.group(1))] = max(checkpoints.get(int(match.group(1)), 0.0), mtime)
    return sorted(commits), checkpoints


def read_actions(fs: pafs.FileSystem, root: str, version: int) -> list[dict]:
    """The actions of commit ``version`` (FileNotFoundError when it has no JSON entry)."""
    with fs.open_input_stream(f"{root}/{LOG_DIR}/{version:020d}.json") as stream:
        return _actions(stream.read())


def _actions(entry: bytes) -> list[dict]:
    return [json.loads(line) for line in entry.decode().splitlines() if line.strip()]


@dataclass(frozen=True)
class LogEntry:
    """One commit of the log: the files it adds and removes, and whether the version it
    makes holds the same rows as the one before."""

    files: tuple[tuple[str, str, str | None], ...]
    """(``add`` or ``remove``, decoded path, the relative path of its DV file or None)."""
    same_rows: bool
    """Every file it adds or removes has dataChange false (compaction; Delta protocol, "Add
    File and Remove File"), or it has none (a job's claim), and it changes no schema or
    protocol."""


def log_entry(fs: pafs.FileSystem, root: str, version: int) -> LogEntry:
    return _entry(read_actions(fs, root, version))


def _entry(actions: list[dict]) -> LogEntry:
    files = []
    data_change = False
    other = False
    for action in actions:
        other = other or "metaData" in action or "protocol" in action
        for kind in ("add", "remove"):
            if kind in action:
                body = action[kind]
                files.append((kind, unquote(body["path"]), _dv_file(body)))
                data_change = data_change or body.get("dataChange", True) is not False
    return LogEntry(tuple(files), not data_change and not other)


def same_rows_version(location: str, version: int) -> int:
    """The newest version from ``version`` on reached through commits that changed no row
    (compaction, a job's claim): it reads the same rows as ``version``, from fewer files.

    Vacuum keeps these versions whenever it keeps ``version`` (:func:`etl.delta.maintenance.referenced_files`),
    so a reader protected at ``version`` may read them instead.
    """
    location = normalize_location(location)
    while True:
        try:
            entry = _entry(_actions(read_object(location, f"{LOG_DIR}/{version + 1:020d}.json")))
        except FileNotFoundError:
            return version
        if not entry.same_rows:
            return version
        version += 1


def _dv_file(body: Mapping) -> str | None:
    descriptor = body.get("deletionVector")
    if not descriptor:
        return None
    from etl.delta.dv import DeletionVector

    return DeletionVector.from_json(descriptor).relative_path()


def deletion_vector(add: Mapping) -> DeletionVector | None:
    """The DV of a replayed ``add`` action, if it has one."""
    descriptor = add.get("deletionVector")
    if not descriptor:
        return None
    from etl.delta.dv import DeletionVector

    return DeletionVector.from_json(descriptor)


def active_adds(location: str, version: int) -> dict[str, dict]:
    """The ``add`` actions of the files active at ``version``, by decoded path, replayed
    from the newest checkpoint at or before it and the JSON commits after it."""
    return dict(_replayed(location, version).adds)


def app_transactions(location: str, version: int) -> dict[str, int]:
    """The latest version of each application's transaction at ``version`` (Delta protocol,
    "Transaction Identifiers"), by app id, from the same replay as :func:`active_adds`.

    delta-rs' ``transaction_version`` scans the log since the checkpoint on every call:
    one request per entry on an object store, twice per commit (the fence's checks)."""
    return dict(_replayed(location, version).txns)


@dataclass(frozen=True)
class LogSnapshot:
    """One version of a table as our own replay of its log reads it (:func:`log_snapshot`):
    what a commit our JSON writer writes whole is planned on and a read finds its files
    in, without delta-rs loading the table (whose load grows with the table's active files:
    delta-rs reads the newest checkpoint again to bring a table forward by one entry)."""

    location: str
    version: int
    protocol: Mapping[str, Any]
    """The ``protocol`` action in force (minReaderVersion, minWriterVersion, features)."""
    metadata: Mapping[str, Any]
    """The ``metaData`` action in force (schemaString, partitionColumns, configuration...)."""
    adds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    """The ``add`` actions of the active files, by decoded path (never changed)."""
    txns: Mapping[str, int] = field(default_factory=dict)
    """The app transactions: the latest version recorded per app id (never changed)."""
    chosen: dict[Any, tuple] = field(default_factory=dict, repr=False, compare=False)
    """What reads of this version chose of its files, by what they asked for: kept with
    the version's replay (:func:`etl.delta.log.active_files`)."""

    @property
    def schema_json(self) -> str:
        return str(self.metadata["schemaString"])

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.get("partitionColumns") or [])

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.get("configuration") or {})


def log_snapshot(location: str, version: int | None = None) -> LogSnapshot | None:
    """``version`` (the latest when None) of the table at ``location`` as our replay reads
    it; None when there is no table.

    The latest version is found as :func:`etl.delta.log.loaded_table` finds it: from the
    newest replay kept for the table (its entry unchanged), the next versions' entries are
    looked up one by one (one HEAD each on an object store) until one is absent; entries
    are written one after another, put if absent, so no version follows an absent entry.
    Without a usable kept replay, the log is listed. Only the entries after the newest
    replay kept at or before the version are read (DeltaIOError when the version's entries
    are gone)."""
    location = normalize_location(location)
    checked = None
    if version is None:
        with _replays_lock:
            known = max(_replays.get(location, ()), key=lambda r: r.version, default=None)
        if known is not None and _still_valid(location, known):
            checked = known
            version = known.version
            while entry_written(location, version + 1):
                version += 1
        else:
            commits, checkpoints = log_versions(*filesystem(location))
            versions = [*commits[-1:], *checkpoints]
            if not versions:
                return None
            version = max(versions)
    replay = _replayed(location, version, checked)
    if replay.protocol is None or replay.metadata is None:
        raise DeltaIOError(
            table=location,
            operation="read log",
            reason=f"version {version} has no protocol or metaData action in its log",
        )
    return LogSnapshot(
        location,
        version,
        replay.protocol,
        replay.metadata,
        replay.adds,
        replay.txns,
        replay.chosen,
    )


def entry_written(location: str, version: int) -> bool:
    """Whether log entry ``version`` exists: one HEAD on an object store (Arrow's
    ``get_file_info`` of an absent key lists the prefix too, to tell a directory)."""
    name = f"{version:020d}.json"
    if is_local(location):
        return os.path.isfile(os.path.join(location, LOG_DIR, name))
    fs, root = filesystem(location)
    try:
        fs.open_input_file(f"{root}/{LOG_DIR}/{name}").close()
    except FileNotFoundError:
        return False
    return True


def _replayed(location: str, version: int, checked: _Replay | None = None) -> _Replay:
    """The replay of the log through ``version``.

    A version's actions never change, so the newest replays of each table are kept: a
    later version only replays the commits after the newest kept at or before it (a job
    reads its input at each new sealed version and commits once per epoch, and a reader
    may read a version just before the one the writer committed; without this every read
    and commit replayed the log since the checkpoint). ``checked``: a kept replay at or
    before ``version`` whose entry the caller has just found unchanged."""
    if checked is not None and checked.version <= version:
        known: _Replay | None = checked
    else:
        with _replays_lock:
            usable = [r for r in _replays.get(location, ()) if r.version <= version]
        known = max(usable, key=lambda r: r.version, default=None)
        if known is not None and not _still_valid(location, known):
            known = None
    replay = None
    if known is not None:
        if known.version == version:
            return known
        try:
            replay = _replay(location, known.state(), known.version + 1, version)
        except FileNotFoundError:  # entries after the kept replay were cleaned up
            replay = None
    return _keep(location, version, replay or _full_replay(location, version))


def _keep(location: str, version: int, state: _ReplayState) -> _Replay:
    """The replay of ``version`` whose state is ``state``, kept among the table's newest
    (only while its entry exists: a version read from a checkpoint alone has no stamp)."""
    stamp = entry_stamp(location, version)
    replayed = _Replay(version, stamp, *state)
    if stamp is not None:
        with _replays_lock:
            kept = [r for r in _replays.pop(location, ()) if r.version != version]
            kept = sorted([*kept, replayed], key=lambda r: r.version)[-_REPLAYS_PER_TABLE:]
            _replays[location] = kept
            while len(_replays) > TABLES_KEPT:
                _replays.pop(next(iter(_replays)))
    return replayed


_ReplayState = tuple[dict[str, dict], dict[str, int], "dict | None", "dict | None"]
"""(adds by decoded path, app transactions, the protocol action, the metaData action)."""


@dataclass(frozen=True)
class _Replay:
    version: int
    stamp: tuple[int, int] | None
    """(mtime_ns, size) of the version's log entry: a table deleted and created again at
    the same place has other entries, and its replay starts afresh."""
    adds: dict[str, dict]
    txns: dict[str, int]
    protocol: dict | None
    metadata: dict | None
    chosen: dict[Any, tuple] = field(default_factory=dict, compare=False)

    def state(self) -> _ReplayState:
        return dict(self.adds), dict(self.txns), self.protocol, self.metadata


def _still_valid(location: str, kept: _Replay) -> bool:
    """Whether ``kept``'s entry is still the one it replayed; when not (the table was
    deleted and created again, or its old entries cleaned up), every replay kept of the
    location is dropped, so that the next read does not check them again."""
    if entry_stamp(location, kept.version) == kept.stamp:
        return True
    with _replays_lock:
        _replays.pop(location, None)
    return False


def entry_stamp(location: str, version: int) -> tuple[int, int] | None:
    """(mtime_ns, size) of log entry ``version``, None when it has no JSON entry: what tells
    a state kept of ``version`` from one of a table deleted and created again at the same
    place (its entries are other files)."""
    if is_local(location):
        try:
            stat = os.stat(os.path.join(location, LOG_DIR, f"{version:020d}.json"))
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size
    import pyarrow.fs as pafs

    fs, root = filesystem(location)
    try:
        info = fs.get_file_info(f"{root}/{LOG_DIR}/{version:020d}.json")
    except OSError:
        return None
    if info.type != pafs.FileType.File or info.mtime_ns is None or info.size is None:
        return None
    return info.mtime_ns, info.size


TABLES_KEPT = 1024
"""Tables whose newest states a process keeps, here and in :func:`etl.delta.log.loaded_table`
(the least recently used is dropped): more than a wide pipeline's tables, whose batches
each read and commit a few of them in turn. With 64, a 100-table pipeline replayed every
table's log from its checkpoint at each commit."""
_REPLAYS_PER_TABLE = 3
"""Replays kept per table: a reader of a sealed version, the writer's next commit, and
its check of whether the commit landed."""
_replays: dict[str, list[_Replay]] = {}
_replays_lock = threading.Lock()


def _full_replay(location: str, version: int) -> _ReplayState:
    fs, root = filesystem(location)
    commits, checkpoints = log_versions(fs, root)
    start = max((v for v in checkpoints if v <= version), default=None)
    state: _ReplayState = ({}, {}, None, None)
    if start is not None:
        state = _checkpoint_actions(fs, root, start)
    first = 0 if start is None else start + 1
    # A listing may miss entries created while it ran (in hash order, a local directory's
    # entries created behind it): one it did not see is looked up by name.
    listed = set(commits)
    missing = [
        v for v in range(first, version + 1) if v not in listed and not entry_written(location, v)
    ]
    if missing:
        raise DeltaIOError(
            table=location,
            operation="read log",
            reason=f"log entries {missing[:5]} of version {version} are gone",
        )
    return _replay(location, state, first, version)


def _replay(location: str, state: _ReplayState, first: int, last: int) -> _ReplayState:
    """``state`` (its dicts changed in place) after the JSON commits ``first`` to ``last``."""
    fs, root = filesystem(location)
    for v in range(first, last + 1):
        state = _applied(state, read_actions(fs, root, v))
    return state


def _applied(state: _ReplayState, actions: Sequence[Mapping[str, Any]]) -> _ReplayState:
    """``state`` (its dicts changed in place) after one commit's ``actions``."""
    adds, txns, protocol, metadata = state
    for action in actions:
        if "add" in action:
            adds[unquote(action["add"]["path"])] = action["add"]
        elif "remove" in action:
            adds.pop(unquote(action["remove"]["path"]), None)
        elif "txn" in action:
            txns[action["txn"]["appId"]] = int(action["txn"]["version"])
        elif "protocol" in action:
            protocol = action["protocol"]
        elif "metaData" in action:
            metadata = action["metaData"]
    return adds, txns, protocol, metadata


def _checkpoint_actions(fs: pafs.FileSystem, root: str, version: int) -> _ReplayState:
    """The ``add`` actions (by decoded path), app transactions, protocol and metaData of
    checkpoint ``version``."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    adds: dict[str, dict] = {}
    txns: dict[str, int] = {}
    protocol: dict | None = None
    metadata: dict | None = None
    prefix = f"{version:020d}.checkpoint"
    for info in fs.get_file_info(pafs.FileSelector(f"{root}/{LOG_DIR}")):
        if not (info.base_name.startswith(prefix) and info.base_name.endswith(".parquet")):
            continue
        with fs.open_input_file(info.path) as source:
            part = pq.ParquetFile(source)
            wanted = ("add", "txn", "protocol", "metaData")
            columns = [c for c in wanted if c in part.schema_arrow.names]
            table = part.read(columns=columns)
        if "txn" in columns:
            for txn in table.column("txn").to_pylist():
                if txn is not None:
                    txns[txn["appId"]] = int(txn["version"])
        if "protocol" in columns:
            for row in table.column("protocol").to_pylist():
                if row is not None:
                    protocol = {k: v for k, v in row.items() if v is not None}
        if "metaData" in columns:
            for row in table.column("metaData").to_pylist():
                if row is not None:
                    metadata = _checkpoint_metadata(row)
        for row in table.column("add").to_pylist():
            if row is None:
                continue
            add = {k: v for k, v in row.items() if v is not None}
            add["partitionValues"] = _as_map(add.get("partitionValues"))
            if "deletionVector" in add:
                add["deletionVector"] = {
                    k: v for k, v in add["deletionVector"].items() if v is not None
                }
            adds[unquote(add["path"])] = add
    return adds, txns, protocol, metadata


def _as_map(values: object) -> dict:
    """A checkpoint's map column, which reads back as (key, value) pairs."""
    if isinstance(values, list):
        return dict(values)
    return dict(values or {})  # type: ignore[call-overload]


def _checkpoint_metadata(row: Mapping[str, Any]) -> dict:
    metadata = {k: v for k, v in row.items() if v is not None}
    metadata["configuration"] = _as_map(metadata.get("configuration"))
    file_format = dict(metadata.get("format") or {"provider": "parquet"})
    file_format["options"] = _as_map(file_format.get("options"))
    metadata["format"] = file_format
    metadata["partitionColumns"] = list(metadata.get("partitionColumns") or [])
    return metadata


def commit_actions(location: str, version: int, actions: Sequence[Mapping]) -> None:
    """Create log entry ``version`` holding ``actions``, only if it does not exist:
    FileExistsError when another writer created it first (the caller re-plans).

    Put if absent on every storage (:func:`etl.storage.put_if_absent`): a hard link
    locally, a conditional PUT on an object store. Once written, the replay kept of the
    version before (the one the commit was planned on) is carried to ``version`` with
    the entry as a reader would read it: the writer's next commit reads nothing of it."""
    location = normalize_location(location)
    entry = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions)
    put_if_absent(location, f"{LOG_DIR}/{version:020d}.json", entry.encode())
    with _replays_lock:
        planned_on = next((r for r in _replays.get(location, ()) if r.version == version - 1), None)
    if planned_on is not None:
        _keep(location, version, _applied(planned_on.state(), _actions(entry.encode())))


__all__ = [
    "CHECKPOINT_FILE",
    "CHECKPOINT_INTERVAL",
    "COMMIT_FILE",
    "CRC_FILE",
    "DELETION_VECTORS",
    "LOG_DIR",
    "LogEntry",
    "LogSnapshot",
    "TABLES_KEPT",
    "active_adds",
    "app_transactions",
    "commit_actions",
    "deletion_vector",
    "entry_stamp",
    "entry_written",
    "log_entry",
    "log_snapshot",
    "log_versions",
    "read_actions",
    "same_rows_version",
]
