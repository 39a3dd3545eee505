"""Merge-on-read with deletion vectors against real Spark, Parquet files and Delta logs:
our reads, DuckDB, Polars and delta-rs agree; the DVs are what hides the old rows."""

from __future__ import annotations

import importlib.metadata
import os
import threading

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from etl.delta import (
    Fence,
    active_files,
    logfile,
    merge_files,
    open_table,
    read_arrow,
    read_table,
    restore_table,
    write_files,
)
from etl.delta.dv import read_rows
from etl.delta.layout import filesystem
from etl.delta.logfile import commit_actions, same_rows_version
from etl.delta.maintenance import (
    commit_rewrite,
    delete_paths,
    plan_compaction,
    referenced_files,
    rewrite_small_files,
    stored_files,
)
from etl.errors import CommitConflictError
from tests.support.delta_tables import commit_frame_files

pytestmark = pytest.mark.spark

SCHEMA = "id long, v string, part string, _epoch long"
FENCE = Fence("dv", generation=1)


def _rows(ids, epoch: int, part=lambda i: "ab"[i % 2]) -> list[tuple]:
    return [(i, f"v{i}-{epoch}", part(i), epoch) for i in ids]


def _commit(location, df, files, epoch, *, partition_by=(), create=False, **options) -> int:
    return commit_frame_files(
        location,
        df,
        files,
        fence=FENCE,
        epoch=epoch,
        partition_by=partition_by,
        deletion_vectors=create,
        **options,
    )


def _table(spark, location, *, ids=range(300), partition_by=(), files=3) -> int:
    df = spark.createDataFrame(_rows(ids, 1), SCHEMA).repartition(files, "id")
    written = write_files(
        df, location, partition_by=partition_by, file_prefix="base", collect_rows=0
    )
    assert len(written) >= files
    return _commit(location, df, written, 1, partition_by=partition_by, create=True)


def _merge(spark, location, version, rows, epoch, *, partition_by=()):
    updates = spark.createDataFrame(rows, SCHEMA)
    merged = merge_files(
        spark,
        location,
        version=version,
        updates=updates,
        keys=["id"],
        partition_by=partition_by,
        file_prefix=f"m{epoch}",
        rewrite_all_bytes=0,
    )
    return updates, merged


def _merge_commit(spark, location, version, rows, epoch, *, partition_by=()):
    updates, merged = _merge(spark, location, version, rows, epoch, partition_by=partition_by)
    assert not merged.removes and merged.deletes
    return _commit(
        location, updates, merged.adds, epoch, partition_by=partition_by, deletes=merged.deletes
    )


def _state(table: pa.Table) -> list[tuple]:
    columns = [table.column(c).to_pylist() for c in ("id", "v", "part", "_epoch")]
    return sorted(zip(*columns, strict=True))


def _ours(spark, location, version=None) -> list[tuple]:
    return _state(read_table(spark, location, version=version).toArrow())


def _delta_extension() -> str:
    (extension,) = [
        f
        for f in importlib.metadata.files("duckdb-ext-delta")
        if f.name == "delta.duckdb_extension"
    ]
    return str(extension.locate())


def _others(location: str) -> dict[str, list[tuple]]:
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{_delta_extension()}'")
    duck = connection.execute(f"SELECT * FROM delta_scan('file://{location}')")
    return {
        "duckdb": _state(duck.fetch_arrow_table()),
        "polars": _state(pl.read_delta(location).to_arrow()),
        "delta-rs": _state(pa.table(DeltaTable(location).scan().read_all())),
        "read_arrow": _state(read_arrow(location)),
    }


def test_a_merge_deletes_updated_rows_by_deletion_vectors_and_every_reader_agrees(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location)
    table = open_table(location)
    assert "deletionVectors" in table.protocol().reader_features
    assert table.protocol().min_reader_version == 3
    assert table.metadata().configuration["delta.enableDeletionVectors"] == "true"
    physical = {f.path for f in active_files(table)}

    version = _merge_commit(
        spark, location, base, _rows([5, 150, 299], 2) + _rows([1000], 2), epoch=2
    )
    expected = {r[0]: r for r in _rows(range(300), 1)}
    expected.update({r[0]: r for r in _rows([5, 150, 299, 1000], 2)})
    assert _ours(spark, location) == sorted(expected.values())
    for name, rows in _others(location).items():
        assert rows == sorted(expected.values()), name

    # The old files are still there, unchanged, with deletion vectors on them: read
    # without the DVs, the replaced rows are back (so the reads above can fail).
    files = active_files(open_table(location))
    assert physical <= {f.path for f in files}
    deleted = [f for f in files if f.deletion_vector is not None]
    assert sum(f.deletion_vector.cardinality for f in deleted) == 3
    raw = (
        pa.concat_tables([pq.read_table(f"{location}/{f.path}", columns=["id"]) for f in files])
        .column("id")
        .to_pylist()
    )
    assert sorted(i for i in raw if i in (5, 150, 299)) == [5, 5, 150, 150, 299, 299]
    fs, root = filesystem(location)
    for f in deleted:
        ids = pq.read_table(f"{location}/{f.path}", columns=["id"]).column("id").to_pylist()
        assert {ids[r] for r in read_rows(fs, root, f.deletion_vector)} <= {5, 150, 299}
    # delta-rs' own view of the deletion vectors is ours.
    selection = {
        os.path.basename(b["filepath"]): b["selection_vector"]
        for b in pa.table(DeltaTable(location).deletion_vectors().read_all()).to_pylist()
    }
    for f in deleted:
        mask = selection[os.path.basename(f.path)]
        assert [i for i, keep in enumerate(mask) if not keep] == read_rows(
            fs, root, f.deletion_vector
        )
    assert version == base + 1


def test_successive_merges_union_deletion_vectors_and_every_version_reads_its_rows(spark, tmp_path):
    location = str(tmp_path / "t")
    versions = [_table(spark, location, partition_by=["part"])]
    expected = [{r[0]: r for r in _rows(range(300), 1)}]
    batches = [
        _rows([2, 3, 4], 2) + _rows([500], 2),
        _rows([4, 6, 8, 3], 3),  # 3 and 4 again: their epoch-2 rows in new files
        _rows([2, 500, 7], 4, part=lambda i: "c"),  # moves partitions
    ]
    for epoch, rows in enumerate(batches, start=2):
        versions.append(
            _merge_commit(spark, location, versions[-1], rows, epoch, partition_by=["part"])
        )
        expected.append({**expected[-1], **{r[0]: r for r in rows}})
    for version, state in zip(versions, expected, strict=True):
        assert _ours(spark, location, version) == sorted(state.values()), version
        assert _state(pa.table(DeltaTable(location, version=version).scan().read_all())) == sorted(
            state.values()
        )
    # Each base file's DV deletes exactly its rows of the updated keys, from every merge
    # (a later merge's DV is the union with the earlier one); the rows of 3 and 4 the
    # first merge wrote are deleted in the file that merge added.
    fs, root = filesystem(location)
    deleted: list[int] = []
    for f in active_files(open_table(location)):
        ids = pq.read_table(f"{location}/{f.path}", columns=["id"]).column("id").to_pylist()
        gone = [ids[r] for r in read_rows(fs, root, f.deletion_vector)] if f.deletion_vector else []
        if f.path.split("/")[-1].startswith("part-base"):
            assert sorted(gone) == sorted(set(ids) & {2, 3, 4, 6, 8, 7}), f.path
        deleted += gone
    assert sorted(deleted) == [2, 2, 3, 3, 4, 4, 6, 7, 8, 500]
    for name, rows in _others(location).items():
        assert rows == sorted(expected[-1].values()), name


def test_a_lost_race_for_the_version_re_plans_and_a_landed_commit_is_not_repeated(
    spark, tmp_path, monkeypatch
):
    location = str(tmp_path / "t")
    base = _table(spark, location)
    updates, merged = _merge(spark, location, base, _rows([10, 20], 2), 2)
    real = logfile.commit_actions
    calls = []

    def racing(where, version, actions):
        if not any(
            "commitInfo" in a and a["commitInfo"].get("operation") == "MERGE" for a in actions
        ):
            return real(where, version, actions)  # the other writer's append
        calls.append(version)
        if len(calls) == 1:
            # Another writer takes this version first (an append of its own).
            other = spark.createDataFrame(_rows([7000], 9), SCHEMA)
            files = write_files(other, location, file_prefix="other")
            assert _commit(location, other, files, 9) == version
        return real(where, version, actions)

    import etl.delta.logwriter as logwriter

    monkeypatch.setattr(logwriter, "commit_actions", racing)
    version = _commit(location, updates, merged.adds, 2, deletes=merged.deletes)
    assert calls == [base + 1, base + 2] and version == base + 2
    expected = {r[0]: r for r in _rows(range(300), 1) + _rows([7000], 9) + _rows([10, 20], 2)}
    assert _ours(spark, location) == sorted(expected.values())

    # An I/O error after the entry was written: the commit id shows it landed, once.
    updates, merged = _merge(spark, location, version, _rows([30], 3), 3)

    def lands_then_fails(where, version, actions):
        real(where, version, actions)
        raise OSError("connection reset after the write")

    monkeypatch.setattr(logwriter, "commit_actions", lands_then_fails)
    assert _commit(location, updates, merged.adds, 3, deletes=merged.deletes) == version + 1
    assert open_table(location).version() == version + 1
    expected.update({r[0]: r for r in _rows([30], 3)})
    assert _ours(spark, location) == sorted(expected.values())


def test_two_merges_planned_on_one_version_touching_one_file_conflict(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location, files=1)
    first_updates, first = _merge(spark, location, base, _rows([1], 2), 2)
    second_updates, second = _merge(spark, location, base, _rows([2], 3), 3)
    _commit(location, first_updates, first.adds, 2, deletes=first.deletes)
    with pytest.raises(CommitConflictError):
        _commit(location, second_updates, second.adds, 3, deletes=second.deletes)
    # Re-planned on the new version, it lands, and both updates are there.
    _merge_commit(spark, location, base + 1, _rows([2], 3), 3)
    expected = {r[0]: r for r in _rows(range(300), 1) + _rows([1], 2) + _rows([2], 3)}
    assert _ours(spark, location) == sorted(expected.values())


def test_commit_actions_is_put_if_absent(tmp_path):
    location = str(tmp_path)
    commit_actions(location, 0, [{"commitInfo": {"n": 1}}])
    with pytest.raises(FileExistsError):
        commit_actions(location, 0, [{"commitInfo": {"n": 2}}])
    assert logfile.read_actions(filesystem(location)[0], location, 0) == [{"commitInfo": {"n": 1}}]
    assert sorted(os.listdir(f"{location}/_delta_log")) == ["00000000000000000000.json"]


def test_concurrent_merges_into_different_files_both_land(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location, ids=range(300), files=3)
    by_file: dict[str, list[int]] = {}
    for f in active_files(open_table(location)):
        ids = pq.read_table(f"{location}/{f.path}", columns=["id"]).column("id").to_pylist()
        by_file[f.path] = ids
    a, b = list(by_file.values())[:2]
    planned = [_merge(spark, location, base, _rows([ids[0]], e), e) for e, ids in ((2, a), (3, b))]
    results: list[int | BaseException] = []

    def run(updates, merged, epoch):
        try:
            results.append(_commit(location, updates, merged.adds, epoch, deletes=merged.deletes))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            results.append(exc)

    threads = [
        threading.Thread(target=run, args=(u, m, e))
        for e, (u, m) in zip((2, 3), planned, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [base + 1, base + 2]
    expected = {r[0]: r for r in _rows(range(300), 1) + _rows([a[0]], 2) + _rows([b[0]], 3)}
    assert _ours(spark, location) == sorted(expected.values())


def test_restore_to_before_a_deletion_vector_merge_gives_that_versions_rows(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location)
    (one, *_) = _live(location)
    a = pq.read_table(f"{location}/{one.path}", columns=["id"]).column("id").to_pylist()
    # Both merges delete rows of one base file: its DV changes between the two versions
    # (delta-rs' own RESTORE would re-add the file without any DV: duplicate keys).
    merged = _merge_commit(spark, location, base, _rows([a[0], a[1]], 2), 2)
    again = _merge_commit(spark, location, merged, _rows([a[0], a[2]], 3), 3)
    before = _ours(spark, location, merged)
    restored = restore_table(
        location, to_version=merged, planned_at=again, fence=FENCE, metadata={}
    )
    assert _ours(spark, location) == before
    assert _state(pa.table(DeltaTable(location).scan().read_all())) == before
    restored = restore_table(
        location, to_version=base, planned_at=restored, fence=FENCE, metadata={}
    )
    assert _ours(spark, location) == _ours(spark, location, base)
    assert _state(pa.table(DeltaTable(location).scan().read_all())) == _ours(spark, location, base)


def _live(location: str) -> list:
    return active_files(open_table(location))


def test_compaction_purges_deletion_vectors_and_keeps_the_rows(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location, files=3)
    (victim, *_) = sorted(_live(location), key=lambda f: f.path)
    ids = pq.read_table(f"{location}/{victim.path}", columns=["id"]).column("id").to_pylist()
    heavy = ids[: len(ids) // 3 + 1]  # over DV_PURGE_SHARE of the file
    merged = _merge_commit(spark, location, base, _rows(heavy, 2), 2)
    before = _ours(spark, location)
    plan = plan_compaction(location, small_file_bytes=0)
    assert [[f.path for f in group] for group in plan.groups] == [[victim.path]]
    rewrite = rewrite_small_files(location, plan)
    compacted = commit_rewrite(rewrite, fence=FENCE)
    assert compacted == merged + 1
    files = _live(location)
    assert victim.path not in {f.path for f in files}
    assert sum(f.rows for f in files) == len(before)  # the deleted rows are gone for good
    assert _ours(spark, location) == before
    for name, rows in _others(location).items():
        assert rows == before, name
    assert same_rows_version(location, merged) == compacted
    # Compaction that planned on a DV a merge has replaced since: refused, nothing lost.
    stale = plan_compaction(location, small_file_bytes=1 << 30, min_files=1)
    again = _merge_commit(spark, location, compacted, _rows([ids[-1]], 3), 3)
    with pytest.raises(CommitConflictError):
        commit_rewrite(rewrite_small_files(location, stale), fence=FENCE)
    assert open_table(location).version() == again


def test_vacuum_keeps_the_deletion_vector_files_kept_versions_need(spark, tmp_path):
    location = str(tmp_path / "t")
    base = _table(spark, location, files=2)
    (one, *_) = _live(location)
    a = pq.read_table(f"{location}/{one.path}", columns=["id"]).column("id").to_pylist()
    # Both merges touch one base file (and the second the first's new file).
    first = _merge_commit(spark, location, base, _rows([a[0], a[1]], 2), 2)
    second = _merge_commit(spark, location, first, _rows([a[0], a[2]], 3), 3)
    dv_files = {p.name for p in (tmp_path / "t").glob("deletion_vector_*.bin")}
    assert len(dv_files) == 2
    assert dv_files <= {f.path for f in stored_files(location)}
    expected = {v: _ours(spark, location, v) for v in (base, first, second)}

    # Keeping the first merge's version: its DV file is needed, as is the latest's.
    refs = referenced_files(location, {first}, keep_from=second)
    assert dv_files <= refs.needed
    # Keeping only the latest: the first merge's DV file is replaced (the union is in the
    # second), known and not needed, so vacuum deletes it; the second's stays.
    refs = referenced_files(location, set(), keep_from=second)
    current = {f.deletion_vector.relative_path() for f in _live(location) if f.deletion_vector}
    assert current <= refs.needed and len(current) == 1
    (stale,) = dv_files - current
    # (Removed before the oldest kept version: vacuum deletes it as an orphan, by age.)
    assert stale not in refs.needed
    # Replayed from an older kept version, it is known (referenced, then replaced) and
    # not needed by any kept version: vacuum deletes it like a removed data file.
    replayed = referenced_files(location, {base}, keep_from=second)
    assert stale in replayed.known and stale not in replayed.needed
    assert current <= replayed.needed
    doomed = [f.path for f in stored_files(location) if f.path not in refs.needed]
    assert stale in doomed and not current & set(doomed)
    delete_paths(location, doomed)
    assert _ours(spark, location) == expected[second]
    assert _state(pa.table(DeltaTable(location).scan().read_all())) == expected[second]
    # Without the kept DV file the deleted rows would come back: reads fail instead.
    os.rename(f"{location}/{next(iter(current))}", f"{location}/moved.bin")
    with pytest.raises(Exception):  # noqa: B017 - any reader error; never stale rows
        _ours(spark, location)


def test_the_log_replay_kept_per_table_follows_new_versions_and_a_recreated_table(spark, tmp_path):
    import shutil

    location = str(tmp_path / "t")
    version = _table(spark, location)
    version = _merge_commit(spark, location, version, _rows([1, 2], 2), 2)
    first = {f.path: f.deletion_vector for f in active_files(open_table(location))}
    assert any(first.values())
    # A later version replays only the commits after the kept one: same as from scratch.
    version = _merge_commit(spark, location, version, _rows([3, 250], 3), 3)
    later = {f.path: f.deletion_vector for f in active_files(open_table(location))}
    assert later != first
    assert _ours(spark, location) == sorted(
        {
            **{r[0]: r for r in _rows(range(300), 1)},
            **{r[0]: r for r in _rows([1, 2], 2)},
            **{r[0]: r for r in _rows([3, 250], 3)},
        }.values()
    )
    # Deleted and created again at the same place, at a version past the kept replay:
    # nothing of the old table's files may survive in the new one's.
    shutil.rmtree(location)
    version = _table(spark, location, ids=range(1000, 1010), files=1)
    for epoch in range(2, 5):
        version = _merge_commit(spark, location, version, _rows([1000 + epoch], epoch), epoch)
    assert version >= 3
    recreated = active_files(open_table(location))
    assert not set(later) & {f.path for f in recreated}
    assert sorted(r[0] for r in _ours(spark, location)) == list(range(1000, 1010))


def test_own_log_commits_write_checkpoints_at_the_interval(spark, tmp_path, monkeypatch):
    import etl.delta.commit as commit_module

    monkeypatch.setattr(commit_module, "CHECKPOINT_INTERVAL", 2)
    location = str(tmp_path / "t")
    version = _table(spark, location)
    for epoch in range(2, 5):
        version = _merge_commit(spark, location, version, _rows([epoch], epoch), epoch)
    checkpoints = sorted(
        p.name for p in (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")
    )
    due = [v for v in range(version + 1) if commit_module.checkpoint_due(location, v)]
    assert len(due) == version // 2
    assert checkpoints == [f"{v:020d}.checkpoint.parquet" for v in due]
    # Read from the checkpoint on: the deletion vectors are in it.
    assert sorted(r[0] for r in _ours(spark, location)) == list(range(300))
