"""Commits planned on our replay of the log and written by our JSON writer.

A delta-rs commit and bringing delta-rs' table forward both cost more the more active files
a table has, and an append table gains one every epoch until compaction. A commit is
therefore planned on :func:`etl.delta.logfile.log_snapshot` and written as JSON actions,
unless a writer feature of the table asks more of it than its actions
(:func:`etl.delta.log.takes_plain_commits`): then delta-rs commits it, as before.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from datetime import datetime
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from etl.delta import CommitRequest, Fence, claim_table, commit_files, logfile, read_arrow
from etl.delta import commit as commit_module
from etl.delta.actions import column_types
from etl.delta.files import write_arrow
from etl.delta.layout import filesystem
from etl.delta.log import takes_plain_commits
from etl.delta.logfile import LogSnapshot, log_snapshot, read_actions
from etl.errors import (
    CommitConflictError,
    FencedError,
    InvalidWriteOptionError,
    SchemaMismatchError,
    UnclaimedTableError,
)
from tests.support.delta_tables import copy_from_checkpoint

SCHEMA = pa.schema([("id", pa.int64()), ("_epoch", pa.int64())])
FENCE = Fence("j", generation=1)


def _rows(ids, epoch: int = 1, schema: pa.Schema = SCHEMA) -> pa.Table:
    columns = {"id": list(ids), "_epoch": [epoch] * len(ids)}
    for extra in schema.names[2:]:
        columns[extra] = [f"{extra}{i}" for i in ids]
    return pa.table(columns, schema=schema)


def _append(location: str, ids, *, fence: Fence = FENCE, schema: pa.Schema = SCHEMA, **options):
    files = write_arrow(_rows(ids, schema=schema), location, file_prefix=f"p{min(ids)}")
    request = CommitRequest(
        files, schema=schema, mode="append", fence=fence, metadata={"epoch": 1}, **options
    )
    return commit_files(location, request)


def _commit_info(location: str, version: int) -> dict:
    actions = read_actions(*filesystem(location), version)
    return next(a["commitInfo"] for a in actions if "commitInfo" in a)


def _ids(location: str) -> list[int]:
    return sorted(read_arrow(location, columns=["id"]).column("id").to_pylist())


@contextlib.contextmanager
def without_delta_rs(monkeypatch):
    """Inside: delta-rs refuses to load, bring forward or commit to any table."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("delta-rs was asked to load or commit the table")

    with monkeypatch.context() as refused:
        for name in (
            "__init__",
            "update_incremental",
            "load_as_version",
            "create_write_transaction",
        ):
            refused.setattr(DeltaTable, name, refuse)
        yield


def test_an_append_to_a_table_of_many_files_neither_loads_nor_commits_through_delta_rs(
    tmp_path, monkeypatch
):
    location = str(tmp_path / "t")
    for i in range(12):
        assert _append(location, range(i * 10, i * 10 + 2)) == i
    with without_delta_rs(monkeypatch):
        assert _append(location, [500, 501]) == 12  # not a checkpoint's version
    info = _commit_info(location, 12)
    assert info["clientVersion"] == "delta-barrier" and info["operation"] == "WRITE"
    # Any Delta reader sees the rows and the fence, as for an entry delta-rs wrote.
    table = DeltaTable(location)
    assert table.version() == 12
    assert table.transaction_version(FENCE.app_id) == FENCE.generation
    assert len(table.file_uris()) == 13 and table.history(1)[0]["epoch"] == 1
    assert _ids(location) == sorted(
        [*(i for k in range(12) for i in (k * 10, k * 10 + 1)), 500, 501]
    )


def test_appends_on_the_log_are_still_fenced(tmp_path):
    location = str(tmp_path / "t")
    _append(location, [1])
    owner = Fence("j", generation=2)
    assert claim_table(location, fence=owner) == 1
    # The claim is an entry of ours too, which every Delta reader takes as delta-rs' own.
    assert _commit_info(location, 1)["clientVersion"] == "delta-barrier"
    assert DeltaTable(location).transaction_version(owner.app_id) == owner.generation
    assert claim_table(location, fence=owner) == 1  # claimed already: nothing more
    with pytest.raises(FencedError):
        _append(location, [2])  # the old generation
    with pytest.raises(UnclaimedTableError):
        _append(location, [3], fence=Fence("j", generation=3))  # never claimed it
    assert _append(location, [4], fence=owner) == 2
    assert _ids(location) == [1, 4]


def test_a_new_nullable_column_evolves_the_schema_in_the_same_entry(tmp_path):
    location = str(tmp_path / "t")
    _append(location, [1, 2])
    wider = SCHEMA.append(pa.field("note", pa.string()))
    version = _append(location, [3], schema=wider)
    actions = read_actions(*filesystem(location), version)
    assert [k for a in actions for k in a] == ["commitInfo", "metaData", "add", "txn"]
    assert _commit_info(location, version)["clientVersion"] == "delta-barrier"
    table = DeltaTable(location)
    assert table.schema().to_arrow().names == ["id", "_epoch", "note"]
    rows = table.to_pyarrow_table().sort_by("id").to_pylist()
    assert [r["note"] for r in rows] == [None, None, "note3"]
    # The evolved metadata keeps the table's identity.
    assert table.metadata().id == DeltaTable(location, version=0).metadata().id


def test_rows_that_do_not_fit_the_table_are_refused_and_nothing_is_written(tmp_path):
    location = str(tmp_path / "t")
    _append(location, [1])
    narrower = pa.schema([("id", pa.int64())])
    files = write_arrow(pa.table({"id": [2]}, schema=narrower), location, file_prefix="n")
    with pytest.raises(SchemaMismatchError):
        commit_files(location, CommitRequest(files, schema=narrower, mode="append", fence=FENCE))
    with pytest.raises(InvalidWriteOptionError) as refused:
        _append(location, [3], partition_by=["_epoch"])
    assert refused.value.option == "partition_by"
    assert DeltaTable(location).version() == 0 and _ids(location) == [1]


def test_a_table_whose_writer_features_ask_more_than_adds_is_committed_by_delta_rs(tmp_path):
    location = str(tmp_path / "t")
    _append(location, [1])
    DeltaTable(location).alter.add_constraint({"id_positive": "id > 0"})  # writer version 3
    snapshot = log_snapshot(location)
    assert snapshot is not None and not takes_plain_commits(snapshot, removes_rows=False)
    version = _append(location, [2])
    assert _commit_info(location, version)["clientVersion"].startswith("delta-rs")
    assert _ids(location) == [1, 2]
    newer = Fence(FENCE.job, FENCE.generation + 1)
    assert claim_table(location, fence=newer) == version + 1
    assert _commit_info(location, version + 1)["clientVersion"].startswith("delta-rs")
    with pytest.raises(FencedError):
        _append(location, [3])


def test_a_protocol_changed_while_the_append_was_planned_is_a_conflict(tmp_path, monkeypatch):
    """The path is chosen on one snapshot; every round plans on a new one. A table that
    started to need more than add actions meanwhile is not appended to as plain JSON."""
    location = str(tmp_path / "t")
    _append(location, [1])
    real = commit_module.log_snapshot
    calls = []

    def then_constrained(where):
        snapshot = real(where)
        if not calls:
            DeltaTable(where).alter.add_constraint({"id_positive": "id > 0"})
        calls.append(where)
        return snapshot

    monkeypatch.setattr(commit_module, "log_snapshot", then_constrained)
    with pytest.raises(CommitConflictError, match="protocol"):
        _append(location, [2])
    assert len(calls) == 2 and DeltaTable(location).version() == 1  # only the constraint


@pytest.mark.parametrize(
    ("protocol", "schema_metadata", "plain"),
    [
        ({"minReaderVersion": 1, "minWriterVersion": 2}, {}, True),
        ({"minReaderVersion": 1, "minWriterVersion": 2}, {"delta.invariants": "x > 0"}, False),
        ({"minReaderVersion": 1, "minWriterVersion": 3}, {}, False),
        ({"minReaderVersion": 1, "minWriterVersion": 4}, {}, False),
        (
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors", "timestampNtz"],
                "writerFeatures": ["deletionVectors", "timestampNtz", "appendOnly"],
            },
            {},
            True,
        ),
        (
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors", "rowTracking", "domainMetadata"],
            },
            {},
            False,
        ),
        (
            {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["identityColumns"],
            },
            {},
            False,
        ),
    ],
)
def test_which_tables_take_plain_commits(protocol, schema_metadata, plain):
    field = {"name": "x", "type": "long", "nullable": True, "metadata": schema_metadata}
    metadata = {"schemaString": json.dumps({"type": "struct", "fields": [field]})}
    snapshot = LogSnapshot("/t", 3, protocol, metadata)
    assert takes_plain_commits(snapshot, removes_rows=False) is plain
    assert takes_plain_commits(snapshot, removes_rows=True) is plain
    append_only = LogSnapshot(
        "/t", 3, protocol, {**metadata, "configuration": {"delta.appendOnly": "true"}}
    )
    assert takes_plain_commits(append_only, removes_rows=False) is plain
    assert takes_plain_commits(append_only, removes_rows=True) is False


def _same_as_delta_rs(location: str) -> None:
    snapshot = log_snapshot(location)
    table = DeltaTable(location)
    assert snapshot is not None and snapshot.version == table.version()
    protocol = table.protocol()
    assert snapshot.protocol["minReaderVersion"] == protocol.min_reader_version
    assert snapshot.protocol["minWriterVersion"] == protocol.min_writer_version
    assert set(snapshot.protocol.get("writerFeatures") or ()) == set(protocol.writer_features or ())
    metadata = table.metadata()
    assert snapshot.metadata["id"] == metadata.id
    assert snapshot.partition_columns == list(metadata.partition_columns)
    assert snapshot.configuration == dict(metadata.configuration)
    assert column_types(snapshot.schema_json) == column_types(table.schema().to_json())


def test_the_snapshot_is_delta_rs_own_view_through_checkpoints_and_other_writers(tmp_path):
    location = str(tmp_path / "t")
    write_deltalake(
        location,
        _rows([0], epoch=0),
        partition_by=["_epoch"],
        configuration={"delta.appendOnly": "true"},
    )
    _same_as_delta_rs(location)
    assert claim_table(location, fence=FENCE) == 1
    for epoch in range(2, 13):  # one of our checkpoints among them
        files = write_arrow(
            _rows([epoch], epoch), location, partition_by=["_epoch"], file_prefix="e"
        )
        commit_files(
            location,
            CommitRequest(
                files, schema=SCHEMA, mode="append", fence=FENCE, partition_by=["_epoch"]
            ),
        )
    _same_as_delta_rs(location)
    write_deltalake(location, _rows([100], epoch=1), mode="append")  # another writer
    _same_as_delta_rs(location)
    # A copy at another place has no replay kept: it is read from the checkpoint on.
    copy = str(tmp_path / "copy")
    copy_from_checkpoint(location, tmp_path / "copy")
    _same_as_delta_rs(copy)
    assert _append(copy, [200], partition_by=["_epoch"]) == 14
    assert _commit_info(copy, 14)["clientVersion"] == "delta-barrier"
    assert sorted(read_arrow(copy, columns=["id"]).column("id").to_pylist()) == [
        0,
        *range(2, 13),
        100,
        200,
    ]


def test_a_table_deleted_and_created_again_is_planned_on_afresh(tmp_path):
    location = str(tmp_path / "t")
    for i in range(3):
        _append(location, [i])
    shutil.rmtree(location)
    write_deltalake(location, _rows([7]))  # another table, no fence of ours
    with pytest.raises(UnclaimedTableError):
        _append(location, [8])
    assert _ids(location) == [7]


@contextlib.contextmanager
def log_lookups(monkeypatch):
    """Inside: how often the log's entries are looked up (a stat each on disk, a HEAD each
    on an object store) or read (a GET each), and how often the log is listed."""
    looked_up = {"entry": 0, "read": 0, "listing": 0}

    def counted(name, kind):
        original = getattr(logfile, name)

        def count(*args, **kwargs):
            looked_up[kind] += 1
            return original(*args, **kwargs)

        return count

    with monkeypatch.context() as counting:
        counting.setattr(logfile, "entry_stamp", counted("entry_stamp", "entry"))
        counting.setattr(logfile, "entry_written", counted("entry_written", "entry"))
        counting.setattr(logfile, "read_actions", counted("read_actions", "read"))
        counting.setattr(logfile, "log_versions", counted("log_versions", "listing"))
        yield looked_up


def test_appends_one_after_another_read_no_entry_and_look_up_three(tmp_path, monkeypatch):
    location = str(tmp_path / "t")
    for i in range(3):
        _append(location, [i])
    for i in range(3, 5):
        with log_lookups(monkeypatch) as looked_up:
            assert _append(location, [i]) == i
        # Planned once on the replay kept of the entry written last (unchanged; the next
        # is absent), fenced on it, and that replay carried to the entry written now.
        assert looked_up == {"entry": 3, "read": 0, "listing": 0}
    assert _ids(location) == [0, 1, 2, 3, 4]


def test_a_table_deleted_and_created_again_drops_the_old_tables_replays(tmp_path, monkeypatch):
    location = str(tmp_path / "t")
    for i in range(3):
        _append(location, [i])
    shutil.rmtree(location)
    write_deltalake(location, _rows([7]))
    assert log_snapshot(location).version == 0  # the old table's replays no longer match
    with log_lookups(monkeypatch) as looked_up:
        assert log_snapshot(location).version == 0
    assert looked_up == {"entry": 2, "read": 0, "listing": 0}  # its kept replay, the next entry
    assert [unquote(p) for p in log_snapshot(location).adds] == [
        a["add"]["path"] for a in read_actions(*filesystem(location), 0) if "add" in a
    ]


def test_an_overwrite_and_a_copy_on_write_remove_are_written_on_the_log(tmp_path, monkeypatch):
    location = str(tmp_path / "t")
    for i in range(3):
        _append(location, [i])
    with without_delta_rs(monkeypatch):
        files = write_arrow(_rows([10, 11]), location, file_prefix="over")
        request = CommitRequest(files, schema=SCHEMA, mode="overwrite", fence=FENCE)
        assert commit_files(location, request) == 3
        replacement = write_arrow(_rows([12]), location, file_prefix="cow")
        request = CommitRequest(
            replacement, schema=SCHEMA, mode="append", fence=FENCE, removes=files
        )
        assert commit_files(location, request) == 4
    assert _commit_info(location, 3)["operationParameters"] == {"mode": "Overwrite"}
    assert _ids(location) == [12]
    assert [DeltaTable(location, version=v).to_pyarrow_table().num_rows for v in (2, 3)] == [3, 2]
    # A file to remove that another commit removed meanwhile is a conflict, not a loss.
    late = write_arrow(_rows([13]), location, file_prefix="late")
    with pytest.raises(CommitConflictError):
        commit_files(
            location,
            CommitRequest(late, schema=SCHEMA, mode="append", fence=FENCE, removes=files),
        )
    assert DeltaTable(location).version() == 4


def test_an_append_only_table_takes_appends_on_the_log_and_refuses_removing_rows(tmp_path):
    location = str(tmp_path / "t")
    write_deltalake(location, _rows([0]), configuration={"delta.appendOnly": "true"})
    claim_table(location, fence=FENCE)
    version = _append(location, [1])
    assert _commit_info(location, version)["clientVersion"] == "delta-barrier"
    files = write_arrow(_rows([2]), location, file_prefix="over")
    with pytest.raises(Exception, match="(?i)append"):
        commit_files(location, CommitRequest(files, schema=SCHEMA, mode="overwrite", fence=FENCE))
    assert _ids(location) == [0, 1]


def test_a_path_is_spelled_in_the_log_as_delta_rs_spells_it(tmp_path):
    """Readers such as DuckDB match a remove to its add by the path's spelling: an entry
    our writer adds must spell every path as delta-rs, which may remove it later, does."""
    from deltalake.transaction import AddAction

    from etl.delta.layout import log_path

    location = str(tmp_path / "t")
    write_deltalake(location, _rows([0]))
    printable = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "/")
    path = f"name={printable}/part é ü {printable}.parquet"
    table = DeltaTable(location)
    table.create_write_transaction(
        [AddAction(path, 1, {}, 0, True, None)], mode="append", schema=table.schema()
    )
    written = [a["add"]["path"] for a in read_actions(*filesystem(location), 1) if "add" in a]
    assert written == [log_path(path)]


@pytest.mark.parametrize("how", ["added column", "replaced schema"])
def test_a_schema_change_to_timestamp_ntz_brings_the_protocol_it_needs(tmp_path, how):
    """A TIMESTAMP_NTZ column needs the timestampNtz table feature: a schema change that
    brings one without it leaves a table other readers refuse."""
    location = str(tmp_path / "t")
    _append(location, [1])
    assert DeltaTable(location).protocol().min_writer_version == 2  # legacy
    wider = SCHEMA.append(pa.field("at", pa.timestamp("us")))
    rows = pa.table({"id": [2], "_epoch": [1], "at": [datetime(2024, 1, 1, 8)]}, schema=wider)
    files = write_arrow(rows, location, file_prefix="ntz")
    request = CommitRequest(
        files,
        schema=wider,
        mode="overwrite" if how == "replaced schema" else "append",
        replace_schema=how == "replaced schema",
        fence=FENCE,
    )
    version = commit_files(location, request)
    protocol = DeltaTable(location).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert set(protocol.reader_features) == {"timestampNtz"}
    assert set(protocol.writer_features) == {"appendOnly", "invariants", "timestampNtz"}
    table = DeltaTable(location).to_pyarrow_table().sort_by("id")
    assert table.column("at").to_pylist()[-1] == datetime(2024, 1, 1, 8)
    # The upgraded table still takes plain commits, and Spark-less readers read it.
    assert _commit_info(location, version)["clientVersion"] == "delta-barrier"
    rows = pa.table({"id": [3], "_epoch": [2], "at": [None]}, schema=wider)
    files = write_arrow(rows, location, file_prefix="next")
    next_version = commit_files(
        location, CommitRequest(files, schema=wider, mode="append", fence=FENCE)
    )
    assert _commit_info(location, next_version)["clientVersion"] == "delta-barrier"
    assert 3 in DeltaTable(location).to_pyarrow_table().column("id").to_pylist()


@pytest.mark.parametrize(
    ("protocol", "field_type", "upgraded"),
    [
        ({"minReaderVersion": 1, "minWriterVersion": 2}, "long", None),
        (
            {"minReaderVersion": 1, "minWriterVersion": 2},
            "timestamp_ntz",
            (["timestampNtz"], ["appendOnly", "invariants", "timestampNtz"]),
        ),
        (
            {"minReaderVersion": 1, "minWriterVersion": 4},
            {"type": "array", "elementType": "timestamp_ntz", "containsNull": True},
            (
                ["timestampNtz"],
                [
                    "appendOnly",
                    "changeDataFeed",
                    "checkConstraints",
                    "generatedColumns",
                    "invariants",
                    "timestampNtz",
                ],
            ),
        ),
        (
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            },
            {"type": "struct", "fields": [{"name": "n", "type": "timestamp_ntz"}]},
            (["deletionVectors", "timestampNtz"], ["deletionVectors", "timestampNtz"]),
        ),
        (
            {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["timestampNtz"],
                "writerFeatures": ["timestampNtz"],
            },
            "timestamp_ntz",
            None,
        ),
    ],
    ids=["no-ntz", "legacy", "legacy-4-nested", "features", "has-it"],
)
def test_the_protocol_a_schema_needs(protocol, field_type, upgraded):
    from etl.delta.actions import protocol_for_schema

    schema = {"type": "struct", "fields": [{"name": "x", "type": field_type, "metadata": {}}]}
    action = protocol_for_schema(protocol, json.dumps(schema))
    if upgraded is None:
        assert action is None
        return
    assert action == {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": upgraded[0],
            "writerFeatures": upgraded[1],
        }
    }
