"""The Delta log: opening a table, its versions and files, and the commits as recovery sees them.

Every row a job writes carries :data:`EPOCH_COLUMN`; every commit carries Delta Barrier's
commit metadata (the ``META_*`` keys of :mod:`consistency.models`), which
:func:`log_commits` reads back for recovery.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError, TableNotFoundError

from consistency.models import (
    META_ATTEMPT,
    META_AUDIT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    META_RESTORED_TO,
    LogCommit,
)
from etl.delta.dv import DeletionVector
from etl.delta.layout import filesystem, normalize_location
from etl.delta.logfile import (
    DELETION_VECTORS,
    TABLES_KEPT,
    LogSnapshot,
    active_adds,
    app_transactions,
    deletion_vector,
    entry_stamp,
    entry_written,
    log_versions,
    read_actions,
)
from etl.errors import DeltaIOError, UnsupportedTableFeatureError
from etl.storage import storage_options

EPOCH_COLUMN = "_epoch"
"""The column every row written by a job carries: the epoch it belongs to."""

# Reader features we read correctly (Delta protocol, "Table Features"): timestampNtz only
# adds a type Spark reads natively; vacuumProtocolCheck only constrains VACUUM;
# deletionVectors are applied by every read (etl.delta.read.scan), kept by merges,
# compaction, vacuum and RESTORE.
SUPPORTED_READER_FEATURES = frozenset({DELETION_VECTORS, "timestampNtz", "vacuumProtocolCheck"})


_MAX_READER_VERSION = 3


_LISTING_GAP = "Expected contiguous commit files"
"""delta-rs' error for a listing of the log with a version missing between two others."""
LISTING_ATTEMPTS = 5
"""How many times a load whose listing of the log had a gap is made (see :func:`open_table`)."""


def open_table(
    location: str,
    *,
    version: int | None = None,
    operation: str = "read",
) -> DeltaTable:
    """Load the table at ``version`` (latest when None); errors become DeltaIOError.

    A listing of a directory that other processes create files in may miss some of them
    (a local file system lists in hash order: an entry created behind the listing is not
    in it, one created ahead is): delta-rs then finds versions on both sides of one it did
    not see and refuses the log. Entries are only ever added in order, each put if absent,
    so the load lists again; a gap still there after :data:`LISTING_ATTEMPTS` listings is
    the log's own (entries deleted), and reported."""
    attempt = 1
    while True:
        try:
            return DeltaTable(location, version=version, storage_options=storage_options(location))
        except TableNotFoundError as exc:
            raise DeltaIOError(
                table=location, operation=operation, reason=f"no Delta table there ({exc})"
            ) from exc
        except DeltaError as exc:
            if _LISTING_GAP in str(exc) and attempt < LISTING_ATTEMPTS:
                attempt += 1
                continue
            at = f" at version {version}" if version is not None else ""
            raise DeltaIOError(table=location, operation=operation, reason=f"{exc}{at}") from exc


@contextlib.contextmanager
def loaded_table(
    location: str, *, version: int | None = None, operation: str = "read"
) -> Iterator[DeltaTable]:
    """The table at ``version`` (the latest when None), for use inside the ``with`` only.

    Opening a table replays its log from the newest checkpoint: one request per JSON entry
    on an object store, and a job opens its tables several times per epoch (read, merge,
    commit, recovery). So the tables loaded here are kept per location after use and
    brought forward to the next version asked for by reading only the log entries after
    the kept version (delta-rs' ``load_as_version``, ``update_incremental``). Whether a
    kept state is still the latest version is asked of the next version's entry alone (one
    HEAD on an object store, where listing the log is a LIST that grows with the history):
    entries are written one after another, each put if absent, so while entry ``v + 1`` is
    absent no version after ``v`` exists; once it is there, the log is read on from ``v``
    as a fresh open does. A kept state is never a stale "latest" (a reader sees every
    version it was told exists, the commit path every commit of another writer). A commit
    on a stale state would fail anyway (a log entry is put if absent); a kept state whose
    version's entry changed (the table was deleted and created again) or is gone is
    dropped, and the table opened afresh.

    Each use has the loaded table to itself: one kept for the location, else a new one
    (a nested use of the same table opens another). A use that raises drops its table.
    """
    location = normalize_location(location)
    kept = _kept(location, version)
    table = open_table(location, version=version, operation=operation) if kept is None else kept[0]
    yield table
    if kept is not None and kept[0].version() == kept[1]:
        _keep(location, table, kept[2])  # still the version whose entry was just checked
    else:
        _keep(location, table, entry_stamp(location, table.version()))


_KEPT_PER_TABLE = 3
"""Loaded states kept per table: a merge plans on one version while the commit checks the
latest, and the commit's own check of whether it landed opens a third."""
_kept_states: OrderedDict[str, list[tuple[DeltaTable, tuple[int, int]]]] = OrderedDict()
_kept_lock = threading.Lock()


def _kept(location: str, version: int | None) -> tuple[DeltaTable, int, tuple[int, int]] | None:
    """A kept state of ``location`` brought to ``version``, with the version it was kept
    at and that version's entry stamp (checked); None: none kept at or before ``version``,
    or the one kept cannot be brought forward."""
    with _kept_lock:
        states = _kept_states.get(location) or []
        usable = [s for s in states if version is None or s[0].version() <= version]
        if not usable:
            return None
        table, stamp = max(usable, key=lambda s: s[0].version())
        states.remove((table, stamp))
    kept_at = table.version()
    if entry_stamp(location, kept_at) != stamp:
        return None
    try:
        if version is None:
            # Entry kept_at is there (checked above) and kept_at + 1 is not: kept_at is the
            # latest. Only log cleanup removes entries (never Delta Barrier's commits; another
            # writer's, of entries past the log retention, 30 days by default, and older than
            # a checkpoint): a state kept that long could read as the latest only while a
            # cleanup has deleted its successor and not yet its own entry.
            if entry_written(location, kept_at + 1):
                table.update_incremental()
        elif version > table.version():
            table.load_as_version(version)
    except DeltaError:  # e.g. entries after it cleaned up: a fresh open says what is wrong
        return None
    return table, kept_at, stamp


def _keep(location: str, table: DeltaTable, stamp: tuple[int, int] | None) -> None:
    if stamp is None:
        return
    with _kept_lock:
        states = _kept_states.setdefault(location, [])
        _kept_states.move_to_end(location)
        states.append((table, stamp))
        if len(states) > _KEPT_PER_TABLE:
            states.remove(min(states, key=lambda s: s[0].version()))
        while len(_kept_states) > TABLES_KEPT:
            _kept_states.popitem(last=False)


def check_supported(table: TableVersion, location: str) -> None:
    """Raise UnsupportedTableFeatureError when the table uses features we cannot read."""
    if isinstance(table, LogSnapshot):
        reader_version = int(table.protocol.get("minReaderVersion", 1))
        features = table.protocol.get("readerFeatures") or ()
        configuration = table.configuration
    else:
        protocol = table.protocol()
        reader_version = protocol.min_reader_version
        features = protocol.reader_features or ()
        configuration = table.metadata().configuration
    unsupported: list[str] = []
    if reader_version > _MAX_READER_VERSION:
        unsupported.append(f"minReaderVersion {reader_version}")
    unsupported += sorted(set(features) - SUPPORTED_READER_FEATURES)
    mapping = configuration.get("delta.columnMapping.mode")
    if mapping not in (None, "none") and "columnMapping" not in unsupported:
        unsupported.append(f"columnMapping (mode {mapping})")
    if unsupported:
        raise UnsupportedTableFeatureError(location, unsupported)


# Writer features under which a commit is complete with its add, remove and metaData
# actions (Delta protocol, "Table Features"; invariants only while no column declares one,
# checked apart): the others ask a writer to check rows (CHECK constraints), fill columns
# (generated, identity), write change data, track rows, or stamp commits, which delta-rs
# does or refuses.
_PLAIN_WRITER_FEATURES = frozenset(
    {"appendOnly", "invariants", DELETION_VECTORS, "timestampNtz", "vacuumProtocolCheck"}
)
# Legacy writer version 2 is appendOnly and column invariants.
_PLAIN_WRITER_VERSION = 2


def takes_plain_commits(snapshot: LogSnapshot, *, removes_rows: bool) -> bool:
    """Whether a commit to ``snapshot`` (files added and removed, deletion vectors, nullable
    columns added, the schema replaced) is complete as bare JSON actions: no writer feature
    of the table asks more of its writer (Delta Barrier's tables ask nothing more).
    ``removes_rows``: the commit removes files or rows as a change of data, which an
    append-only table refuses (delta-rs says so)."""
    if removes_rows and snapshot.configuration.get("delta.appendOnly", "").lower() == "true":
        return False
    writer_version = int(snapshot.protocol.get("minWriterVersion", 1))
    if writer_version == 7:
        features = set(snapshot.protocol.get("writerFeatures") or ())
        if not features <= _PLAIN_WRITER_FEATURES:
            return False
    elif writer_version > _PLAIN_WRITER_VERSION:
        return False
    return "delta.invariants" not in snapshot.schema_json


def table_exists(location: str) -> bool:
    """Whether a Delta table is at ``location``; no log is read (unlike :func:`table_version`)."""
    location = normalize_location(location)
    return DeltaTable.is_deltatable(location, storage_options=storage_options(location))


def table_version(location: str) -> int | None:
    """The latest Delta version at ``location``; None when there is no Delta table.

    From a listing of the log, without replaying it (opening the table replays the log
    from its last checkpoint, even without tracking the files). A commit
    entry appears whole or not at all (Delta protocol, "Delta Log Entries": put if
    absent), so the newest listed entry is the latest version."""
    commits, checkpoints = log_versions(*filesystem(normalize_location(location)))
    versions = [*commits[-1:], *checkpoints]
    return max(versions) if versions else None


@dataclass(frozen=True)
class ActiveFile:
    """A data file of one table version, as the log describes it."""

    path: str
    """Relative to the table root and decoded (as on storage), or an absolute URI."""
    size: int
    partition_values: Mapping[str, Any]
    """Typed partition values (None for null)."""
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]
    null_counts: Mapping[str, int | None] = field(default_factory=dict)
    """nullCount of the file's statistics, per column (physical rows)."""
    rows: int | None = None
    """numRecords of the file's statistics (physical rows, deleted ones included); None
    when the log has none."""
    deletion_vector: DeletionVector | None = None
    """The rows of the file this version deletes (Delta protocol, "Deletion Vectors")."""

    def only_epochs(self, first: int, last: int) -> bool:
        """Whether the log shows that every row of the file has its :data:`EPOCH_COLUMN`
        in [first, last]: by its partition value, else by its statistics (bounds inside,
        no null); False when it cannot tell."""
        if EPOCH_COLUMN in self.partition_values:
            value = self.partition_values[EPOCH_COLUMN]
            return value is not None and first <= value <= last
        low, high = self.min_values.get(EPOCH_COLUMN), self.max_values.get(EPOCH_COLUMN)
        return (
            low is not None
            and high is not None
            and self.null_counts.get(EPOCH_COLUMN) == 0
            and first <= low
            and high <= last
        )

    @property
    def live_rows(self) -> int | None:
        """The rows a reader of this version sees: ``rows`` minus the deleted ones."""
        if self.rows is None or self.deletion_vector is None:
            return self.rows
        return self.rows - self.deletion_vector.cardinality


TableVersion = DeltaTable | LogSnapshot
"""One version of a table, loaded by delta-rs or read from our replay of its log."""


def version_of(table: TableVersion) -> int:
    return table.version if isinstance(table, LogSnapshot) else table.version()


def app_transactions_of(table: TableVersion, location: str) -> Mapping[str, int]:
    """The version's app transactions: the latest version recorded per app id (a job's
    fence among them)."""
    if isinstance(table, LogSnapshot):
        return table.txns
    return app_transactions(location, table.version())


def schema_json(table: TableVersion) -> str:
    """The version's schema, as the Delta log's JSON."""
    return table.schema_json if isinstance(table, LogSnapshot) else table.schema().to_json()


def partition_columns(table: TableVersion) -> list[str]:
    if isinstance(table, LogSnapshot):
        return table.partition_columns
    return list(table.metadata().partition_columns)


def has_deletion_vectors(table: TableVersion) -> bool:
    """Whether the version's protocol enables deletion vectors: else no file has one."""
    if isinstance(table, LogSnapshot):
        return DELETION_VECTORS in (table.protocol.get("readerFeatures") or ())
    return DELETION_VECTORS in (table.protocol().reader_features or ())


def active_files(table: TableVersion, *, epochs: tuple[int, int] | None = None) -> list[ActiveFile]:
    """The files of the version, with typed partition values and min/max stats.

    With ``epochs=(first, last)``, only the files that may hold rows of those epochs: by
    their :data:`EPOCH_COLUMN` partition value, else by its min/max statistics (a file
    without them is kept). The files are pruned before any object is made per file (in
    Arrow for delta-rs' table, on the epoch's raw values for our replay): an append table
    gains a file every epoch until compaction, and reading one epoch of it should not cost
    an object for each file of its history.
    """
    if isinstance(table, LogSnapshot):
        return _replayed_files(table, epochs)
    actions = pa.table(table.get_add_actions(flatten=False))
    keep = None if epochs is None else _may_hold_epochs(actions, *epochs)
    if keep is not None:
        actions = actions.filter(keep)
    columns = set(actions.column_names)
    rows = actions.select(
        [
            c
            for c in ("path", "size_bytes", "partition", "min", "max", "null_count", "num_records")
            if c in columns
        ]
    ).to_pylist()
    # delta-rs does not expose a file's deletion vector: our own replay of the log does.
    dvs: dict[str, DeletionVector] = {}
    if has_deletion_vectors(table):
        location = normalize_location(table.table_uri)
        for path, add in active_adds(location, table.version()).items():
            dv = deletion_vector(add)
            if dv is not None:
                dvs[path] = dv
    # The log stores paths URL-encoded (Delta protocol, "Add File and Remove File").
    return [
        ActiveFile(
            path=unquote(row["path"]),
            size=row["size_bytes"],
            partition_values=row.get("partition") or {},
            min_values=row.get("min") or {},
            max_values=row.get("max") or {},
            null_counts=row.get("null_count") or {},
            rows=row.get("num_records"),
            deletion_vector=dvs.get(unquote(row["path"])),
        )
        for row in rows
    ]


def _replayed_files(snapshot: LogSnapshot, epochs: tuple[int, int] | None) -> list[ActiveFile]:
    """:func:`active_files` of our replay: the add actions' partition values and statistics
    typed as delta-rs types them (the table's Arrow types), for the files that may hold
    ``epochs`` only.

    A fan-out's jobs all read the same version of their input for the same epoch: the
    files are chosen and typed once for all of them, and kept with the version's replay."""
    kept = snapshot.chosen.get(epochs)
    if kept is None:
        kept = snapshot.chosen[epochs] = tuple(_chosen_files(snapshot, epochs))
    return list(kept)


def _chosen_files(snapshot: LogSnapshot, epochs: tuple[int, int] | None) -> list[ActiveFile]:
    partitioned = EPOCH_COLUMN in snapshot.partition_columns
    chosen: list[tuple[str, Mapping[str, Any], dict]] = []
    for path, add in snapshot.adds.items():
        if epochs is not None:
            first, last = epochs
            if partitioned:
                value = (add.get("partitionValues") or {}).get(EPOCH_COLUMN)
                if value in (None, "") or not first <= int(value) <= last:
                    continue
            else:
                low, high = _epoch_bounds(add)
                if (low is not None and low > last) or (high is not None and high < first):
                    continue
        chosen.append((path, add, _stats(add)))
    types = _arrow_types(snapshot.schema_json)
    location = snapshot.location
    partitions = _typed_columns(
        location,
        [add.get("partitionValues") or {} for _, add, _ in chosen],
        types,
        partition_values=True,
    )
    lows = _typed_columns(location, [s.get("minValues") or {} for *_, s in chosen], types)
    highs = _typed_columns(location, [s.get("maxValues") or {} for *_, s in chosen], types)
    return [
        ActiveFile(
            path=path,
            size=int(add["size"]),
            partition_values=partition,
            min_values=low,
            max_values=high,
            null_counts=dict(stats.get("nullCount") or {}),
            rows=stats.get("numRecords"),
            deletion_vector=deletion_vector(add),
        )
        for (path, add, stats), partition, low, high in zip(
            chosen, partitions, lows, highs, strict=True
        )
    ]


def _stats(add: Mapping[str, Any]) -> dict:
    stats = add.get("stats")
    if isinstance(stats, str) and stats:
        return json.loads(stats)
    return dict(stats) if isinstance(stats, Mapping) else {}


def _epoch_bounds(add: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The lowest and highest :data:`EPOCH_COLUMN` value of an add action's statistics."""
    stats = add.get("stats")
    if isinstance(stats, str) and stats:
        return _epoch_bounds_of(stats)
    return _bounds_in(stats if isinstance(stats, Mapping) else {})


@functools.lru_cache(maxsize=1 << 16)
def _epoch_bounds_of(stats: str) -> tuple[int | None, int | None]:
    # A read of one epoch looks at every active file of its table: the statistics of a
    # file are parsed once, not at every read (an append table gains a file every epoch).
    return _bounds_in(json.loads(stats))


def _bounds_in(stats: Mapping[str, Any]) -> tuple[int | None, int | None]:
    low = (stats.get("minValues") or {}).get(EPOCH_COLUMN)
    high = (stats.get("maxValues") or {}).get(EPOCH_COLUMN)
    return (None if low is None else int(low), None if high is None else int(high))


@functools.lru_cache(maxsize=256)
def _arrow_types(table_schema: str) -> Mapping[str, pa.DataType]:
    fields = pa.schema(Schema.from_json(table_schema).to_arrow())
    return {f.name: f.type for f in fields}


def _typed_columns(
    location: str,
    rows: list[Mapping[str, Any]],
    types: Mapping[str, pa.DataType],
    *,
    partition_values: bool = False,
) -> list[dict[str, Any]]:
    """``rows`` (one mapping of column -> logged value per file) with each column's values
    cast to the column's type, as delta-rs gives them. Partition values are the protocol's
    strings (an empty one is null; a timestamp is UTC without an offset); statistics are
    JSON values. A column whose values do not cast (or a nested one) is left out: a bound
    that is not there rules no file out."""
    typed: list[dict[str, Any]] = [{} for _ in rows]
    for column in dict.fromkeys(c for row in rows for c in row):
        kind = types.get(column)
        if kind is None or pa.types.is_nested(kind):
            continue
        raw = [row.get(column) for row in rows]
        if partition_values:
            raw = [None if value == "" else value for value in raw]
        try:
            values = _cast([None if v is None else str(v) for v in raw], kind).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            if partition_values:
                raise DeltaIOError(
                    table=location,
                    operation="read log",
                    reason=f"partition values of column {column!r} do not read as {kind}: {exc}",
                ) from exc
            continue
        for row, value in zip(typed, values, strict=True):
            row[column] = value
    if partition_values:  # every partition column is in every file's partition values
        for row, given in zip(typed, rows, strict=True):
            for column in given:
                row.setdefault(column, None)
    return typed


def _cast(texts: list[str | None], kind: pa.DataType) -> pa.Array:
    strings = pa.array(texts, pa.string())
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        # Partition values carry no offset (UTC); statistics end in Z.
        plain = pc.replace_substring_regex(strings, r"(Z|[+-]00:?00)$", "")
        return plain.cast(pa.timestamp(kind.unit)).cast(kind)
    if pa.types.is_boolean(kind):
        return pc.equal(pc.utf8_lower(strings), "true")
    return strings.cast(kind)


def _epoch_field(actions: pa.Table, column: str) -> pa.ChunkedArray | None:
    """The :data:`EPOCH_COLUMN` field of the add actions' struct ``column`` (partition, min,
    max), or None when no file has it."""
    if column not in actions.column_names:
        return None
    struct = actions.column(column)
    if not pa.types.is_struct(struct.type) or struct.type.get_field_index(EPOCH_COLUMN) < 0:
        return None
    return pc.struct_field(struct, EPOCH_COLUMN)


def _may_hold_epochs(actions: pa.Table, first: int, last: int) -> pa.ChunkedArray | None:
    """Per add action, whether its file may hold rows of epochs ``first``..``last``; None
    when no file has what could rule it out."""
    partition = _epoch_field(actions, "partition")
    if partition is not None:
        inside = pc.and_(pc.greater_equal(partition, first), pc.less_equal(partition, last))
        return pc.fill_null(inside, False)  # a null partition value holds no epoch
    # A missing bound (no statistics) cannot rule the file out.
    low, high = _epoch_field(actions, "min"), _epoch_field(actions, "max")
    bounds = []
    if low is not None:
        bounds.append(pc.fill_null(pc.less_equal(low, last), True))
    if high is not None:
        bounds.append(pc.fill_null(pc.greater_equal(high, first), True))
    return functools.reduce(pc.and_, bounds) if bounds else None


def log_commits(location: str, *, after_version: int | None = None) -> list[LogCommit]:
    """The commits after ``after_version`` (all when None), oldest first, as recovery sees them.

    Epoch, job and attempt come from Delta Barrier's commit metadata (None for commits
    other writers made). ``restored_to`` is the version a RESTORE restored, or
    ``BEFORE_FIRST_VERSION`` for a rollback that emptied the table. No table yet: no commits.
    Read from the log entries' commitInfo (without loading the table in delta-rs, which
    grows with its files); entries cleaned up meanwhile are not there to read. After a
    version, the entries that follow it are read one by one until one is absent (entries
    are written one after another, put if absent), without listing the log, whose length
    grows with the table's history.
    """
    location = normalize_location(location)
    fs, root = filesystem(location)
    if after_version is None:
        versions: Iterable[int] = log_versions(fs, root)[0]
    else:
        versions = itertools.count(after_version + 1)
    found = []
    for version in versions:
        try:
            actions = read_actions(fs, root, version)
        except FileNotFoundError:
            if after_version is None:
                continue  # cleaned up since the listing
            break  # the latest version is the one before
        info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        found.append(_log_commit({**info, "version": version}))
    return found


def _log_commit(entry: Mapping[str, Any]) -> LogCommit:
    operation = str(entry.get("operation", ""))
    restored_to = _as_int(entry.get(META_RESTORED_TO))
    if operation == "RESTORE":
        restored_to = _as_int((entry.get("operationParameters") or {}).get("version"))
    return LogCommit(
        version=int(entry["version"]),
        operation=operation,
        epoch=_as_int(entry.get(META_EPOCH)),
        first_epoch=_as_int(entry.get(META_FIRST_EPOCH)),
        job=None if entry.get(META_JOB) is None else str(entry[META_JOB]),
        attempt=_as_int(entry.get(META_ATTEMPT)),
        final=_as_bool(entry.get(META_FINAL)),
        part=_as_int(entry.get(META_BATCH)),
        audit=_as_bool(entry.get(META_AUDIT)),
        restored_to=restored_to,
    )


def _as_bool(value: object) -> bool:
    return value in (True, "true", "True", 1, "1")


def _as_int(value: object) -> int | None:
    """Metadata values are JSON: ints, or strings when another writer stringified them."""
    if value is None or value == "":
        return None
    return int(str(value))


__all__ = [
    "EPOCH_COLUMN",
    "TableVersion",
    "SUPPORTED_READER_FEATURES",
    "ActiveFile",
    "active_files",
    "app_transactions_of",
    "check_supported",
    "has_deletion_vectors",
    "loaded_table",
    "log_commits",
    "open_table",
    "partition_columns",
    "schema_json",
    "takes_plain_commits",
    "version_of",
    "table_exists",
    "table_version",
]
