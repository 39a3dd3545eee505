"""Reads planned on our replay of the log: the files of a version, their typed partition
values and statistics, exactly as delta-rs gives them, without delta-rs loading the table
(which reads the newest checkpoint again for every version it is brought to)."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from etl.delta import CommitRequest, Fence, claim_table, commit_files
from etl.delta.files import write_arrow
from etl.delta.log import EPOCH_COLUMN, ActiveFile, active_files
from etl.delta.logfile import log_snapshot
from etl.errors import DeltaIOError
from tests.support.delta_tables import copy_from_checkpoint

FENCE = Fence("j", generation=1)

TYPED = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int32()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("price", pa.decimal128(10, 2)),
        ("ratio", pa.float64()),
        ("flag", pa.bool_()),
        (EPOCH_COLUMN, pa.int64()),
    ]
)


def _typed_rows(epoch: int, n: int = 3, name: str | None = "a") -> pa.Table:
    base = epoch * 10
    return pa.table(
        {
            "id": [base + i for i in range(n)],
            "small": [i for i in range(n)],
            "name": [None if name is None else f"{name}{i}" for i in range(n)],
            "day": [date(2024, 1, 1 + i) for i in range(n)],
            "at": [datetime(2024, 1, 1, 10, i, 30, 123456, tzinfo=UTC) for i in range(n)],
            "local": [datetime(2024, 2, 1, 8, i) for i in range(n)],
            "price": [Decimal(f"{i}.25") for i in range(n)],
            "ratio": [i / 4 for i in range(n)],
            "flag": [i % 2 == 0 for i in range(n)],
            EPOCH_COLUMN: [epoch] * n,
        },
        schema=TYPED,
    )


def _bounds_given(file: ActiveFile) -> ActiveFile:
    """``file`` with the statistics it has: delta-rs gives a column without a bound in this
    file as None when another file of the table has one (readers treat both alike)."""
    return dataclasses.replace(
        file,
        min_values={k: v for k, v in file.min_values.items() if v is not None},
        max_values={k: v for k, v in file.max_values.items() if v is not None},
        null_counts={k: v for k, v in file.null_counts.items() if v is not None},
    )


def _same_files(location: str, version: int | None = None, epochs=None) -> list[ActiveFile]:
    snapshot = log_snapshot(location, version)
    assert snapshot is not None
    ours = sorted(active_files(snapshot, epochs=epochs), key=lambda f: f.path)
    theirs = sorted(
        active_files(DeltaTable(location, version=version), epochs=epochs), key=lambda f: f.path
    )
    assert [_bounds_given(f) for f in ours] == [_bounds_given(f) for f in theirs]
    return ours


@pytest.mark.parametrize(
    "partition_by",
    [[], [EPOCH_COLUMN], ["day", "flag"], ["name"], ["small", EPOCH_COLUMN]],
    ids=["unpartitioned", "epoch", "date-bool", "string-with-nulls", "int-epoch"],
)
def test_the_files_of_a_version_are_typed_as_delta_rs_types_them(tmp_path, partition_by):
    location = str(tmp_path / "t")
    write_deltalake(location, _typed_rows(0), partition_by=partition_by or None)
    claim_table(location, fence=FENCE)
    for epoch in range(1, 14):  # through a checkpoint (at the table's phase)
        rows = _typed_rows(epoch, name=None if epoch == 5 else "a")
        files = write_arrow(rows, location, partition_by=partition_by, file_prefix=f"e{epoch}")
        request = CommitRequest(
            files, schema=TYPED, mode="append", fence=FENCE, partition_by=partition_by
        )
        commit_files(location, request)
    files = _same_files(location)
    assert len(files) >= 14
    assert _same_files(location, version=6)  # an old version, read after a checkpoint
    chosen = _same_files(location, epochs=(4, 5))
    assert {
        f.partition_values.get(EPOCH_COLUMN, f.min_values.get(EPOCH_COLUMN)) for f in chosen
    } == {4, 5}
    # A copy read from its checkpoint on, without the entries before it.
    copy = tmp_path / "copy"
    copy_from_checkpoint(location, copy)
    assert _same_files(str(copy), epochs=(12, 13))


def test_deletion_vectors_come_with_the_files_of_our_replay(tmp_path, spark):
    from tests.etl.delta.test_deletion_vectors import SCHEMA, _merge, _rows, _table
    from tests.etl.delta.test_deletion_vectors import _commit as commit_dv

    location = str(tmp_path / "t")
    base = _table(spark, location)
    updates, merged = _merge(spark, location, base, _rows([10, 20], 2), 2)
    version = commit_dv(location, updates, merged.adds, 2, deletes=merged.deletes)
    files = _same_files(location, version)
    assert any(f.deletion_vector is not None for f in files)
    assert SCHEMA is not None


def test_a_version_whose_entries_are_gone_is_an_error_and_not_a_guess(tmp_path):
    location = str(tmp_path / "t")
    for epoch in range(3):
        files = write_arrow(_typed_rows(epoch), location, file_prefix=f"e{epoch}")
        commit_files(location, CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))
    copy = tmp_path / "copy"
    shutil.copytree(location, copy)
    (copy / "_delta_log" / f"{1:020d}.json").unlink()
    with pytest.raises(DeltaIOError, match="gone"):
        log_snapshot(str(copy), 2)


def test_a_spark_read_of_epochs_does_not_load_the_table_in_delta_rs(tmp_path, spark, monkeypatch):
    from etl.delta import read_epochs, read_table
    from tests.etl.delta.test_append_on_log import without_delta_rs

    location = str(tmp_path / "t")
    for epoch in range(12):
        files = write_arrow(_typed_rows(epoch), location, file_prefix=f"e{epoch}")
        commit_files(location, CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))
    with without_delta_rs(monkeypatch):
        rows = read_epochs(spark, location, version=8, first_epoch=4, last_epoch=5).collect()
        whole = read_table(spark, location, version=3).count()
    assert sorted(r.id for r in rows) == [40, 41, 42, 50, 51, 52] and whole == 12


def test_the_commits_after_a_version_are_read_without_listing_the_log(tmp_path, monkeypatch):
    from etl.delta import log as log_module
    from etl.delta.log import log_commits

    location = str(tmp_path / "t")
    for epoch in range(12):  # through a checkpoint at version 10
        files = write_arrow(_typed_rows(epoch), location, file_prefix=f"e{epoch}")
        commit_files(location, CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))
    listed = log_commits(location)
    assert [c.version for c in listed] == list(range(12))

    def refuse(*_args):
        raise AssertionError("the log was listed")

    monkeypatch.setattr(log_module, "log_versions", refuse)
    for after in (-1, 0, 9, 10):
        assert log_commits(location, after_version=after) == listed[after + 1 :]
    assert log_commits(location, after_version=11) == []
    assert log_commits(str(tmp_path / "nothing"), after_version=3) == []


def test_every_table_of_a_wide_pipeline_keeps_its_replay(tmp_path, monkeypatch):
    """A batch reads and commits a few tables of a pipeline in turn: in a process driving
    200 tables, the next version of each is replayed from the one kept, not from the log's
    checkpoint and listing."""
    from etl.delta import logfile

    first = tmp_path / "t000"
    for epoch in range(2):
        files = write_arrow(_typed_rows(epoch), str(first), file_prefix=f"e{epoch}")
        commit_files(str(first), CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))
    locations = [str(first)]
    for i in range(1, 200):
        shutil.copytree(first, tmp_path / f"t{i:03d}")
        locations.append(str(tmp_path / f"t{i:03d}"))
    for location in locations:
        assert len(log_snapshot(location).adds) == 2

    def refuse(*_args):
        raise AssertionError("the log was listed: the table's replay was not kept")

    monkeypatch.setattr(logfile, "log_versions", refuse)
    for location in locations:
        files = write_arrow(_typed_rows(2), location, file_prefix="e2")
        commit_files(location, CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))
    assert all(len(log_snapshot(location, 2).adds) == 3 for location in locations)


def test_a_read_of_one_epoch_parses_each_file_statistics_once(tmp_path, monkeypatch):
    """An append table gains a file every epoch; the epoch-by-epoch reads of a long run
    parse a file's statistics once to prune it, not at every read; reads of the same
    version and epochs (a fan-out's jobs) choose the files once."""
    import json

    from etl.delta import log

    location = str(tmp_path / "t")
    write_deltalake(location, _typed_rows(0))
    claim_table(location, fence=FENCE)

    def append(epoch: int) -> None:
        files = write_arrow(_typed_rows(epoch), location, file_prefix=f"e{epoch}")
        commit_files(location, CommitRequest(files, schema=TYPED, mode="append", fence=FENCE))

    for epoch in range(1, 9):
        append(epoch)
    parsed, loads = [], json.loads
    monkeypatch.setattr(log.json, "loads", lambda text: parsed.append(text) or loads(text))
    for epoch in range(1, 9):
        (file,) = _same_files(location, epochs=(epoch, epoch))
        assert file.min_values[EPOCH_COLUMN] == epoch
    append(9)  # a new version: its reads look at ten files
    parsed.clear()
    for epoch in range(1, 10):
        (file,) = _same_files(location, epochs=(epoch, epoch))
        assert file.max_values[EPOCH_COLUMN] == epoch
    ours = [p for p in parsed if '"numRecords"' in p]  # delta-rs' side parses nothing here
    # the new file's bounds once, and the statistics of the one file each read returns
    assert len(ours) <= 1 + 9, len(ours)
    parsed.clear()
    for epoch in range(1, 10):
        (file,) = active_files(log_snapshot(location), epochs=(epoch, epoch))
    assert parsed == []
