"""Issue 25: table states are carried forward between uses instead of re-reading the log.

Every open of a Delta table replays its log from the newest checkpoint: on an object store
one request per JSON entry. :func:`etl.delta.log.loaded_table` keeps the loaded states and
brings them forward by the log entries after them. The kept states must never be stale
where the latest version is asked for (a fenced writer is still refused, a reader sees
another writer's commit), and never outlive the table they were loaded from.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from etl.delta import CommitRequest, Fence, commit_files, read_arrow, table_version
from etl.delta.files import write_arrow
from etl.errors import FencedError
from tests.support.delta_tables import copy_from_checkpoint

SCHEMA = pa.schema([("id", pa.int64()), ("_epoch", pa.int64())])


def _rows(ids: range, epoch: int = 1) -> pa.Table:
    return pa.table({"id": list(ids), "_epoch": [epoch] * len(ids)}, schema=SCHEMA)


def _commit(location: str, ids: range, fence: Fence, prefix: str) -> int:
    files = write_arrow(_rows(ids), location, file_prefix=prefix)
    return commit_files(
        location, CommitRequest(files, schema=SCHEMA, mode="append", fence=fence, metadata={})
    )


def _ids(location: str, version: int | None = None) -> list[int]:
    return sorted(read_arrow(location, version=version, columns=["id"]).column("id").to_pylist())


def test_a_fenced_writer_whose_state_is_kept_is_refused_after_another_process_claims(tmp_path):
    """The old generation's state of the table is kept at its last commit; the new owner
    claims the table from another process (here: delta-rs directly, which shares no state
    with this one). The old generation's next commit must see the claim: FencedError, and
    the table keeps exactly the owner's version. (A kept state not brought up to date
    would pass the fence check and lose the race for the next version forever.)"""
    location = str(tmp_path / "t")
    zombie = Fence("j", generation=1)
    assert _commit(location, range(3), zombie, "a") == 0
    assert _commit(location, range(3, 6), zombie, "b") == 1
    assert _ids(location) == list(range(6))  # read through the kept state

    claimed = DeltaTable(location)
    claimed.create_write_transaction(
        [],
        mode="append",
        schema=claimed.schema(),
        commit_properties=CommitProperties(app_transactions=[Fence("j", 2).transaction()]),
    )
    assert table_version(location) == 2

    with pytest.raises(FencedError) as refused:
        _commit(location, range(6, 9), zombie, "late")
    assert (refused.value.generation, refused.value.fenced_at) == (1, 2)
    assert table_version(location) == 2 and _ids(location) == list(range(6))


def test_a_reader_of_the_latest_version_sees_another_writers_commit(tmp_path):
    location = str(tmp_path / "t")
    fence = Fence("j", generation=1)
    _commit(location, range(3), fence, "a")
    assert _ids(location) == [0, 1, 2]
    write_deltalake(location, _rows(range(10, 12)), mode="append")  # another writer
    assert _ids(location) == [0, 1, 2, 10, 11]
    assert _ids(location, version=0) == [0, 1, 2]  # an older version from a newer state
    assert _ids(location) == [0, 1, 2, 10, 11]


def test_a_table_deleted_and_created_again_at_the_same_place_is_read_afresh(tmp_path):
    """The kept state of the first table is at the same version as the new table's latest:
    bringing it forward would find no newer entry and read the first table's rows."""
    location = str(tmp_path / "t")
    fence = Fence("j", generation=1)
    for i in range(3):
        _commit(location, range(i, i + 1), fence, f"first{i}")
    assert _ids(location) == [0, 1, 2]
    shutil.rmtree(location)
    for i in range(3):
        _commit(location, range(100 + i, 101 + i), fence, f"second{i}")
    assert _ids(location) == [100, 101, 102]


@pytest.mark.spark
@pytest.mark.s3
def test_log_reads_per_epoch_on_s3_do_not_grow_with_the_tables_logs(
    tmp_path: Path, spark, s3_bucket, s3_requests, monkeypatch
):
    """The word-count chain on an S3 warehouse, one file per epoch, no checkpoint (so that
    only carrying the states forward keeps the log reads flat): the GETs of log entries in
    its last epoch are no more than in its second. Re-opening every table from its log
    made them grow by about 30 per epoch (bench/RESULTS-issue25.md)."""
    from catalog import load_catalog
    from etl import Runner
    from etl.delta import commit as commit_module
    from examples.wordcount.pipeline import build
    from tests.support.s3_requests import LOG_GET

    monkeypatch.setattr(commit_module, "CHECKPOINT_INTERVAL", 1000)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    warehouse = f"{s3_bucket}/warehouse"
    catalog = load_catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}", warehouse=warehouse)
    runner = Runner(build(str(incoming)), catalog=catalog, warehouse=warehouse, spark=spark)
    runner.register()
    gets = []
    for epoch in range(1, 8):
        (incoming / f"w{epoch}.txt").write_text(f"a\nb\nw{epoch}\n")
        assert runner.run_once().ok
        gets.append(s3_requests.take()[LOG_GET])
    catalog.close()
    assert gets[-1] <= gets[1], gets


def test_the_fence_is_read_from_a_checkpoint_when_the_entries_before_it_are_gone(
    tmp_path, monkeypatch
):
    """The fence's generation comes from our own replay of the log (delta-rs scans the log
    for it on every call): the claim, recorded before the checkpoint, must be read from the
    checkpoint's ``txn`` actions once the entries before it are cleaned up."""
    from etl.delta import claim_table
    from etl.delta import commit as commit_module
    from etl.errors import UnclaimedTableError

    monkeypatch.setattr(commit_module, "CHECKPOINT_INTERVAL", 2)
    kept = str(tmp_path / "kept")
    zombie, owner = Fence("j", generation=1), Fence("j", generation=2)
    assert _commit(kept, range(3), zombie, "a") == 0
    assert claim_table(kept, fence=owner) == 1
    assert _commit(kept, range(3, 6), owner, "b") == 2  # checkpointed
    # A copy at another place: no replay of it is kept; the entries before its checkpoint
    # are cleaned up (as `etl maintain` does).
    location = str(tmp_path / "copy")
    assert copy_from_checkpoint(kept, tmp_path / "copy") == 2

    with pytest.raises(FencedError):
        _commit(location, range(6, 9), zombie, "late")
    with pytest.raises(UnclaimedTableError):
        _commit(location, range(6, 9), Fence("k", generation=1), "other")
    assert _commit(location, range(6, 9), owner, "c") == 3
    assert _ids(location) == list(range(9))
