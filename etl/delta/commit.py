"""Committing to a Delta log: a job's written files (:func:`commit_files`, asked for by a
:class:`CommitRequest`) and its claims (:func:`claim_table`), through one retry/verify loop
(:func:`run_commit`) that restores (:mod:`etl.delta.restore`) use too.

Every commit is fenced (:class:`~etl.delta.fence.Fence`) and written as exactly the next
version, put if absent, by a :class:`~etl.delta.logwriter.LogWriter`: our own JSON log
writer, planned on our replay of the log, on every table whose writer features ask
nothing more of a commit than its actions; delta-rs on other tables (and for claims and
a table's creation), except what delta-rs' actions cannot carry (deletion vectors, a
schema change). A commit that loses the race for the version checks the fence and its
preconditions again on the new latest version and tries again after a random pause; an
attempt whose outcome is unknown is looked up in the log by its commit id, so a commit is
never applied twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, get_args

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from consistency.models import META_COMMIT_ID
from etl.delta.actions import (
    DeletedRows,
    add_action,
    added_columns,
    column_types,
    creation_actions,
    evolved_metadata,
    file_actions,
    metadata_action,
    protocol_for_schema,
    remove_actions,
    table_metadata,
    table_protocol,
)
from etl.delta.fence import Fence
from etl.delta.files import DataFile
from etl.delta.layout import normalize_location
from etl.delta.log import (
    ActiveFile,
    app_transactions_of,
    check_supported,
    has_deletion_vectors,
    loaded_table,
    table_exists,
    takes_plain_commits,
)
from etl.delta.logfile import (
    CHECKPOINT_INTERVAL,
    LogSnapshot,
    active_adds,
    entry_stamp,
    log_snapshot,
)
from etl.delta.logwriter import (
    DELTA_RS,
    JSON_LOG,
    CommitMode,
    DeltaRsCommit,
    Entry,
    JsonCommit,
    LogWriter,
)
from etl.errors import CommitConflictError, DeltaIOError, InvalidWriteOptionError

_log = logging.getLogger(__name__)

# Commits that lose the race for the next version re-check their preconditions and try
# again after a random pause that grows with every loss (so that no writer starves);
# past this many losses in a row something else writes the table without pause.
MAX_COMMIT_ROUNDS = 40
_BACKOFF_CAP_SECONDS = 0.25


@dataclass(frozen=True)
class CommitRequest:
    """What one commit of written files asks of a table (:func:`commit_files`).

    The first commit creates the table with ``schema`` and ``partition_by`` (with
    ``deletion_vectors``, with the ``deletionVectors`` table feature: protocol 3/7, and
    ``delta.enableDeletionVectors``). ``overwrite`` removes every current file;
    ``removes`` (paths, DataFiles, or ActiveFiles, whose deletion vector must be unchanged
    too) are removed in the same commit (copy-on-write) and must all still be in the
    version committed on, else CommitConflictError (the caller re-plans from the new
    version). ``deletes`` give files new deletion vectors (a merge-on-read merge): each
    file must still have the DV it was planned on, else CommitConflictError. ``metadata``
    goes into commitInfo with the job, its generation and a commit id. ``replace_schema``
    (an ``overwrite`` only): the table's schema becomes ``schema`` in the same commit,
    whatever changed (Delta's overwriteSchema: a changed type, a dropped or renamed
    column), as ``etl recompute`` does to a table it rewrites from its first epoch;
    versions before it keep their schema. ``data_change=False`` marks every add and remove
    as a rearrangement of rows already in the table (compaction; Delta protocol, "Add File
    and Remove File": streaming readers do not read such files again).
    """

    files: Sequence[DataFile]
    schema: pa.Schema
    mode: CommitMode
    fence: Fence
    metadata: Mapping[str, str | int | bool] = field(default_factory=dict)
    partition_by: Sequence[str] = ()
    removes: Sequence[DataFile | ActiveFile | str] = ()
    deletes: Sequence[DeletedRows] = ()
    data_change: bool = True
    deletion_vectors: bool = False
    replace_schema: bool = False

    def __post_init__(self) -> None:
        for name in ("files", "partition_by", "removes", "deletes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "metadata", dict(self.metadata))

    @property
    def removes_rows(self) -> bool:
        """Whether the commit removes rows from the table (not a rearrangement of them)."""
        return self.data_change and bool(self.mode == "overwrite" or self.removes or self.deletes)

    def check(self, location: str) -> None:
        """InvalidWriteOptionError when the options cannot work together."""
        if self.mode not in get_args(CommitMode):
            raise InvalidWriteOptionError(
                table=location, option="mode", reason=f"unknown mode {self.mode!r}"
            )
        if self.replace_schema and self.mode != "overwrite":
            raise InvalidWriteOptionError(
                table=location,
                option="replace_schema",
                reason="only an overwrite replaces the schema",
            )
        if self.mode == "overwrite" and (self.removes or self.deletes):
            raise InvalidWriteOptionError(
                table=location, option="removes", reason="an overwrite removes every file already"
            )


# -- the retry/verify loop ---------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt(Generic[Entry]):
    """One round's log entry: ``entry``, written as ``version`` by ``writer``."""

    writer: LogWriter[Entry]
    version: int
    entry: Entry


@dataclass(frozen=True)
class Done:
    """Nothing to commit: the table is already as asked, at ``version`` (None: no table)."""

    version: int | None


PlannedOn = Literal["delta-rs", "log"]
"""What a plan reads the version it commits on from: delta-rs' loaded table (a
``DeltaTable``: what delta-rs' writer commits on), or our own replay of the log (a
:class:`~etl.delta.logfile.LogSnapshot`: for an entry our JSON writer writes whole; its
cost does not grow with the table's files, as loading the table in delta-rs does)."""
Plan = Callable[[Any], Attempt[Any] | Done]
"""What to write on the loaded version (a ``DeltaTable`` or a ``LogSnapshot``, as
:data:`PlannedOn` says; None: there is no table yet)."""
FenceRule = Literal["claimed", "not newer"]
"""The fence a version committed on must record: exactly the fence's generation (commits,
restores), or none newer (claims)."""


def run_commit(
    location: str,
    *,
    fence: Fence,
    plan: Plan,
    commit_id: str,
    operation: str,
    fence_rule: FenceRule = "claimed",
    planned_at: int | None = None,
    planned_on: PlannedOn = "delta-rs",
    latest: LogSnapshot | None = None,
) -> int | None:
    """Commit what ``plan`` gives on the latest version (or on ``planned_at`` only, read
    by delta-rs); returns the version that holds it.

    Each round loads the version (as ``planned_on`` says), checks the fence (FencedError
    when a newer generation recorded it; with ``"claimed"``, UnclaimedTableError when it
    records an older one or none), asks ``plan`` for the entry of the next version and
    writes it. Another writer took the version: with ``planned_at``, CommitConflictError
    (the caller re-plans); else a new round after a pause (:func:`_back_off`; after
    :data:`MAX_COMMIT_ROUNDS`, CommitConflictError). An attempt reported taken, or whose
    outcome is unknown, is looked up at its version by ``commit_id`` (a store that retried
    a write which landed reports it taken): there, it is done; another writer's entry
    there, a lost race; no entry, DeltaIOError. ``latest``: the latest version as the
    caller has just read it from the log (``planned_on="log"``), what the first round
    plans on instead of reading it again.
    """
    if planned_on == "log" and planned_at is not None:
        raise ValueError("a commit planned at a given version is planned on delta-rs' table")
    if latest is not None and planned_on != "log":
        raise ValueError("only a commit planned on the log is given the latest version read")
    for lost in range(MAX_COMMIT_ROUNDS):
        with _planned_version(
            location, planned_at, operation, planned_on, latest if lost == 0 else None
        ) as table:
            if table is None:
                attempt = plan(None)
                if isinstance(attempt, Done):
                    return attempt.version
                outcome = _write(location, attempt, commit_id, operation)
            else:
                check_supported(table, location)
                transactions = app_transactions_of(table, location)
                if fence_rule == "claimed":
                    fence.require_claimed(location, transactions)
                else:
                    fence.check(location, transactions)
                attempt = plan(table)
                if isinstance(attempt, Done):
                    return attempt.version
                outcome = _write(location, attempt, commit_id, operation)
        if outcome is not None:
            return checkpointed(location, outcome)
        if planned_at is not None:
            raise CommitConflictError(
                table=location,
                reason=f"the table moved past version {planned_at}, which the {operation} "
                "was planned from",
            )
        _back_off(lost)
    raise CommitConflictError(
        table=location, reason=f"{MAX_COMMIT_ROUNDS} commits in a row lost the race"
    )


@contextlib.contextmanager
def _planned_version(
    location: str,
    planned_at: int | None,
    operation: str,
    planned_on: PlannedOn,
    latest: LogSnapshot | None,
) -> Iterator[DeltaTable | LogSnapshot | None]:
    """The version a round plans on (None: no table yet), loaded as ``planned_on`` says
    (``latest``: as just read from the log)."""
    if planned_on == "log":
        yield latest or log_snapshot(location)
    elif planned_at is None and not table_exists(location):
        yield None
    else:
        with loaded_table(location, version=planned_at, operation=operation) as table:
            yield table


def _write(location: str, attempt: Attempt[Any], commit_id: str, operation: str) -> int | None:
    """The version holding ``attempt`` once written; None when another writer took it."""
    try:
        if attempt.writer.write(location, attempt.version, attempt.entry) == "written":
            return attempt.version
    except (DeltaError, OSError) as exc:
        if entry_stamp(location, attempt.version) is None:
            raise DeltaIOError(
                table=location,
                operation="create" if attempt.version == 0 else operation,
                reason=str(exc),
            ) from exc
    return attempt.version if attempt.writer.holds(location, attempt.version, commit_id) else None


def _back_off(lost: int) -> None:
    time.sleep(random.uniform(0, min(_BACKOFF_CAP_SECONDS, 0.002 * 2**lost)))


def checkpoint_phase(location: str) -> int:
    """Where in every :data:`CHECKPOINT_INTERVAL` versions the table at ``location`` takes
    its checkpoint, by a hash of its directory's name (the table's name in a warehouse):
    the jobs of a pipeline commit in step, each once an epoch, and with one phase for all,
    every table of a wide pipeline would write its checkpoint in the same epoch (every
    tenth epoch paying for all of them, bench/RESULTS-issue28.md, session 52)."""
    name = normalize_location(location).rsplit("/", 1)[-1]
    return zlib.crc32(name.encode()) % CHECKPOINT_INTERVAL


def checkpoint_due(location: str, version: int) -> bool:
    """Whether a commit of ``version`` to ``location`` writes a checkpoint: one every
    :data:`CHECKPOINT_INTERVAL` versions, at the table's :func:`checkpoint_phase`."""
    return version > 0 and (version + checkpoint_phase(location)) % CHECKPOINT_INTERVAL == 0


def checkpointed(location: str, version: int) -> int:
    """Checkpoint ``version`` when it is due (:func:`checkpoint_due`); returns ``version``.
    Opening a table replays the JSON commits after its newest checkpoint, and a job commits
    once per epoch: without checkpoints that often, every open of a busy table grows slower
    with its history."""
    if checkpoint_due(location, version):
        try:
            with loaded_table(location, version=version, operation="checkpoint") as table:
                table.create_checkpoint()
        except (DeltaIOError, DeltaError) as exc:  # an optimization: the commit stands
            _log.warning("no checkpoint at version %s of %s: %s", version, location, exc)
    return version


# -- the kinds of commit -------------------------------------------------------------------------


def claim_table(location: str, *, fence: Fence) -> int | None:
    """Make ``location`` refuse every older generation of ``fence.job``; returns its version.

    Commits nothing when the table already records this generation; None when the table
    does not exist yet (its first commit will carry the fence). FencedError when a newer
    generation claimed it first. Planned and written as :func:`commit_files` plans a
    commit (on our replay of the log where the table takes plain commits): a takeover's
    claim races a superseded runner still committing, and a round planned on the replay
    reads only the entries after the last one it read, where delta-rs lists the log.
    """
    location = normalize_location(location)
    commit_id = uuid.uuid4().hex
    custom = {META_COMMIT_ID: commit_id}

    def plan(table: DeltaTable | None) -> Attempt[Any] | Done:
        if table is None:
            return Done(None)
        if fence.recorded(app_transactions_of(table, location)) == fence.generation:
            return Done(table.version())
        entry = DeltaRsCommit(
            fence=fence,
            custom=custom,
            schema=table.schema(),
            partition_by=tuple(table.metadata().partition_columns),
            table=table,
        )
        return Attempt(DELTA_RS, table.version() + 1, entry)

    def plan_on_log(snapshot: LogSnapshot | None) -> Attempt[Any] | Done:
        if snapshot is None:
            return Done(None)
        if fence.recorded(snapshot.txns) == fence.generation:
            return Done(snapshot.version)
        return Attempt(
            JSON_LOG,
            snapshot.version + 1,
            JsonCommit(fence=fence, custom=custom, operation="WRITE"),
        )

    snapshot = log_snapshot(location)
    on_log = snapshot is not None and takes_plain_commits(snapshot, removes_rows=False)
    return run_commit(
        location,
        fence=fence,
        plan=plan_on_log if on_log else plan,
        commit_id=commit_id,
        operation="claim",
        fence_rule="not newer",
        planned_on="log" if on_log else "delta-rs",
        latest=snapshot if on_log else None,
    )


def commit_files(location: str, request: CommitRequest) -> int:
    """Commit ``request``'s written files to the Delta log under its fence; returns the
    version holding them.

    The commit is applied to the latest version V only if V records exactly the fence's
    generation (a newer one: FencedError; an older one or none: UnclaimedTableError, since
    the table was created or written by a runner this one did not take over from: recovery
    must claim it first), and only as version V + 1 (:func:`run_commit`). A table that
    another writer creates while this commit creates it is refused the same way, never
    committed on top of.

    Who writes the entry: on a table whose writer features ask nothing of a commit beyond
    its actions (:func:`~etl.delta.log.takes_plain_commits`: ours are), the commit is
    planned on our replay of the log and written by our JSON writer, so that its cost does
    not grow with the table's files (an append table gains one every epoch until
    compaction), as a delta-rs load and commit do. On any other table delta-rs commits it,
    except what delta-rs' actions cannot carry (a deletion vector, the remove of a file
    carrying one, a schema change). A new table is created by delta-rs (by our JSON writer
    when it has deletion vectors).
    """
    location = normalize_location(location)
    request.check(location)
    commit_id = uuid.uuid4().hex
    custom = {**request.metadata, META_COMMIT_ID: commit_id}

    def plan(table: DeltaTable | None) -> Attempt[Any]:
        if table is None:
            return _creation(location, request, custom)
        return _on_version(location, table, request, custom)

    def plan_on_log(snapshot: LogSnapshot | None) -> Attempt[Any]:
        if snapshot is None:
            return _creation(location, request, custom)
        return _on_log(location, snapshot, request, custom)

    snapshot = log_snapshot(location)
    on_log = snapshot is not None and takes_plain_commits(
        snapshot, removes_rows=request.removes_rows
    )
    version = run_commit(
        location,
        fence=request.fence,
        plan=plan_on_log if on_log else plan,
        commit_id=commit_id,
        operation="commit",
        planned_on="log" if on_log else "delta-rs",
        latest=snapshot if on_log else None,
    )
    assert version is not None  # a commit's plan is never Done
    return version


def _creation(location: str, request: CommitRequest, custom: Mapping[str, Any]) -> Attempt[Any]:
    if request.removes or request.deletes:
        raise CommitConflictError(table=location, reason="there is no table to remove files from")
    if request.deletion_vectors:
        return Attempt(
            JSON_LOG,
            0,
            JsonCommit(
                fence=request.fence,
                custom=custom,
                operation="CREATE TABLE",
                actions=tuple(creation_actions(request.schema, request.partition_by)),
                files=tuple(request.files),
                data_change=request.data_change,
            ),
        )
    return Attempt(
        DELTA_RS,
        0,
        DeltaRsCommit(
            fence=request.fence,
            custom=custom,
            schema=Schema.from_arrow(request.schema),
            partition_by=tuple(request.partition_by),
            actions=tuple(add_action(f, data_change=request.data_change) for f in request.files),
        ),
    )


def _on_version(
    location: str, table: DeltaTable, request: CommitRequest, custom: Mapping[str, Any]
) -> Attempt[Any]:
    """The entry of ``request`` on top of the loaded version ``table``: written by delta-rs
    unless it holds what delta-rs' actions cannot carry."""
    table_schema = table.schema().to_json()
    version = table.version()
    _check_partitioning(location, request, table.metadata().partition_columns)
    added, replaced = _schema_change(location, table_schema, request)
    if added or replaced or request.deletes or (request.removes and has_deletion_vectors(table)):
        return _json_entry(
            location,
            version,
            table_protocol(table),
            table_metadata(table),
            active_adds(location, version),
            request,
            custom,
        )
    file_changes: list[AddAction | RemoveAction] = [
        *(add_action(f, data_change=request.data_change) for f in request.files),
        *remove_actions(table, location, request.removes, data_change=request.data_change),
    ]
    return Attempt(
        DELTA_RS,
        version + 1,
        DeltaRsCommit(
            fence=request.fence,
            custom=custom,
            schema=table.schema(),
            partition_by=tuple(request.partition_by),
            actions=tuple(file_changes),
            mode=request.mode,
            table=table,
        ),
    )


def _on_log(
    location: str, snapshot: LogSnapshot, request: CommitRequest, custom: Mapping[str, Any]
) -> Attempt[JsonCommit]:
    """The entry of ``request`` on top of ``snapshot``, written by our JSON writer."""
    if not takes_plain_commits(snapshot, removes_rows=request.removes_rows):
        raise CommitConflictError(
            table=location,
            reason=f"version {snapshot.version} changed the table's protocol to "
            f"{dict(snapshot.protocol)} while the commit was planned; commit it again",
        )
    _check_partitioning(location, request, snapshot.partition_columns)
    return _json_entry(
        location,
        snapshot.version,
        snapshot.protocol,
        snapshot.metadata,
        snapshot.adds,
        request,
        custom,
    )


def _schema_change(
    location: str, table_schema: str, request: CommitRequest
) -> tuple[list[pa.Field], bool]:
    """(the nullable columns ``request`` adds, whether it replaces the schema) against the
    table's schema (JSON); SchemaMismatchError for rows that fit neither."""
    if request.replace_schema:
        wanted = Schema.from_arrow(request.schema).to_json()
        return [], column_types(table_schema) != column_types(wanted)
    return added_columns(table_schema, location, request.schema), False


def _json_entry(
    location: str,
    version: int,
    protocol: Mapping[str, Any],
    metadata: Mapping[str, Any],
    adds: Mapping[str, Mapping[str, Any]],
    request: CommitRequest,
    custom: Mapping[str, Any],
) -> Attempt[JsonCommit]:
    """``request`` on top of ``version`` (whose ``protocol`` and ``metaData`` actions are
    ``protocol`` and ``metadata``, its active files' ``add`` actions ``adds``) as JSON
    actions: the schema change (with the protocol its columns need), the removes (every
    file for an overwrite) and new deletion vectors, checked against the version
    (:func:`~etl.delta.actions.file_actions`), and the adds."""
    added, replaced = _schema_change(location, str(metadata["schemaString"]), request)
    gone = list(adds) if request.mode == "overwrite" else request.removes
    schema_change = [evolved_metadata(metadata, added)] * bool(added) + [
        metadata_action(metadata, json.loads(Schema.from_arrow(request.schema).to_json()))
    ] * replaced
    if schema_change:
        upgrade = protocol_for_schema(protocol, schema_change[0]["metaData"]["schemaString"])
        if upgrade is not None:
            schema_change.insert(0, upgrade)
    entry = JsonCommit(
        fence=request.fence,
        custom=custom,
        operation="MERGE" if request.deletes else "WRITE",
        actions=(
            *schema_change,
            *file_actions(
                location, version, adds, gone, request.deletes, data_change=request.data_change
            ),
        ),
        files=tuple(request.files),
        data_change=request.data_change,
        parameters={"mode": "Overwrite" if request.mode == "overwrite" else "Append"},
    )
    return Attempt(JSON_LOG, version + 1, entry)


def _check_partitioning(location: str, request: CommitRequest, columns: Sequence[str]) -> None:
    if list(request.partition_by) != list(columns):
        raise InvalidWriteOptionError(
            table=location,
            option="partition_by",
            reason=f"{list(request.partition_by)} differs from the table's partition columns "
            f"{list(columns)}; Delta cannot repartition a table in "
            "place: keep its partition columns, or write the new layout to a new table",
        )


__all__ = [
    "MAX_COMMIT_ROUNDS",
    "Attempt",
    "CommitMode",
    "CommitRequest",
    "DeletedRows",
    "Done",
    "FenceRule",
    "Plan",
    "PlannedOn",
    "checkpoint_due",
    "checkpoint_phase",
    "checkpointed",
    "claim_table",
    "commit_files",
    "run_commit",
]
