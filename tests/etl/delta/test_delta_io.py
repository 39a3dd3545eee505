"""The Delta I/O layer against real Spark, real Parquet files and real Delta logs."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from consistency.models import (
    BEFORE_FIRST_VERSION,
    META_ATTEMPT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    META_ROLLBACK_OF,
    LogCommit,
)
from etl.delta import (
    CommitRequest,
    Fence,
    MergeWrite,
    claim_table,
    commit_files,
    log_commits,
    merge_files,
    read_arrow,
    read_epochs,
    read_pandas,
    read_table,
    remove_staging,
    restore_table,
    table_version,
    write_files,
)
from etl.delta.files import SMALL_OUTPUT_ROWS, string_upper_bound
from etl.delta.layout import filesystem, spark_file_path
from etl.delta.logfile import log_versions
from etl.errors import (
    CommitConflictError,
    DeltaIOError,
    DuplicateMergeKeyError,
    FencedError,
    InvalidWriteOptionError,
    SchemaMismatchError,
    UnclaimedTableError,
    UnsupportedTableFeatureError,
)

pytestmark = pytest.mark.spark


SCHEMA = (
    "id long, name string, amount double, ts timestamp, day date, flag boolean, "
    "price decimal(12,3), tags array<string>, _epoch long"
)


def _row(i: int, epoch: int, name: str | None = "n") -> tuple:
    return (
        i,
        name,
        None if i % 4 == 0 else i * 1.5,
        datetime(2024, 1, 1, 12, 0, 0, i, tzinfo=UTC) if i % 5 else None,
        date(2024, 1, 1 + i % 28),
        i % 2 == 0,
        Decimal(f"{i}.125"),
        [f"t{i}", None] if i % 3 else None,
        epoch,
    )


FENCE = Fence("j", generation=1)


def _commit(location, df, files, txn, *, mode="append", partition_by=(), removes=(), meta=None):
    return commit_files(
        str(location),
        CommitRequest(
            files,
            schema=to_arrow_schema(df.schema, timezone="UTC"),
            mode=mode,
            partition_by=partition_by,
            removes=removes,
            fence=FENCE,
            metadata=meta or {},
        ),
    )


def _append(spark, location, rows, txn, *, partition_by=(), meta=None, files_per_commit=1):
    df = spark.createDataFrame(rows, SCHEMA).repartition(files_per_commit)
    files = write_files(df, str(location), partition_by=partition_by, file_prefix=f"t{txn}")
    return _commit(location, df, files, txn, partition_by=partition_by, meta=meta), files


def _canonical(table: pa.Table) -> list[tuple]:
    """Rows as sortable tuples; timestamps as UTC microseconds (independent of zones)."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type):
            column = pc.cast(column, pa.int64())
        columns.append(column.to_pylist())
    return sorted(zip(*columns, strict=True), key=repr)


def _spark_rows(df) -> list[tuple]:
    return _canonical(df.toArrow())


# Both writers: the driver's (the rows collected as Arrow; Spark estimates a DataFrame made
# from Python rows at any size) and Spark's (collect_rows=0).
WRITERS = pytest.mark.parametrize(
    "collect",
    [{"collect_rows": SMALL_OUTPUT_ROWS, "collect_bytes": sys.maxsize}, {"collect_rows": 0}],
    ids=["driver", "spark"],
)


@WRITERS
def test_round_trip_partitioned_keeps_schema_values_and_layout(spark, tmp_path, collect):
    names = ["a/b c", "x=y", None, "", "007", "ünï"]
    rows = [_row(i, epoch=1 + i % 2, name=names[i % len(names)]) for i in range(1, 25)]
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    files = write_files(
        df,
        str(tmp_path),
        partition_by=["_epoch", "name"],
        file_prefix="e1",
        **collect,
    )
    version = _commit(tmp_path, df, files, 1, partition_by=["_epoch", "name"])

    assert version == 0
    assert sum(f.rows for f in files) == len(rows)
    back = read_table(spark, str(tmp_path))
    assert [(f.name, f.dataType) for f in back.schema.fields] == [
        (f.name, f.dataType) for f in df.schema.fields
    ]
    # Delta stores an empty string partition value as null (protocol: partition values).
    expected = spark.createDataFrame([(*r[:1], r[1] or None, *r[2:]) for r in rows], SCHEMA)
    assert _spark_rows(back) == _spark_rows(expected)

    for file in files:
        path = tmp_path / file.path
        assert path.name.startswith("part-e1-") and path.suffix == ".parquet"
        assert file.size == path.stat().st_size
        schema = pq.read_schema(path)
        assert "_epoch" not in schema.names and "name" not in schema.names
        parquet_schema = pq.ParquetFile(path).schema
        ts = parquet_schema.column(parquet_schema.names.index("ts"))
        assert ts.physical_type == "INT64"
        logical = json.loads(ts.logical_type.to_json())
        assert (logical["timeUnit"], logical["isAdjustedToUTC"]) == ("microseconds", True)
    assert (tmp_path / "_epoch=1" / "name=a%2Fb c").is_dir()
    assert (tmp_path / "_epoch=2" / "name=x%3Dy").is_dir()
    assert (tmp_path / "_epoch=1" / "name=__HIVE_DEFAULT_PARTITION__").is_dir()
    # delta-rs agrees on every value, partition columns included.
    assert _canonical(read_arrow(str(tmp_path))) == _spark_rows(expected)


@WRITERS
def test_file_statistics_follow_the_delta_protocol(spark, tmp_path, collect):
    long_name = "z" * 40
    rows = [
        (1, "apple", 2.5, datetime(2024, 5, 1, 0, 0, 0, 123456, tzinfo=UTC), Decimal("12.345")),
        (2, long_name, None, datetime(2024, 5, 2, 3, 4, 5, 654321, tzinfo=UTC), Decimal("-1.5")),
        (3, None, float("nan"), None, None),
    ]
    schema = "id long, name string, score double, ts timestamp, price decimal(12,3)"
    df = spark.createDataFrame(rows, schema).withColumn("tags", F.array(F.col("name")))
    (file,) = write_files(df.coalesce(1), str(tmp_path), file_prefix="s", **collect)
    stats = json.loads(file.stats, parse_float=Decimal)

    assert stats["numRecords"] == 3 == file.rows
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 3
    assert stats["nullCount"] == {"id": 0, "name": 1, "score": 1, "ts": 1, "price": 1}
    assert stats["minValues"]["ts"] == "2024-05-01T00:00:00.123456Z"
    assert stats["maxValues"]["ts"] == "2024-05-02T03:04:05.654321Z"
    assert stats["minValues"]["price"] == Decimal("-1.5")
    assert stats["maxValues"]["price"] == Decimal("12.345")
    # NaN has no place in an order: no bounds for that column; nested columns: no stats.
    assert "score" not in stats["minValues"] and "score" not in stats["maxValues"]
    assert "tags" not in stats["nullCount"]
    # Strings: a 32-char prefix for the minimum, a valid upper bound for the maximum.
    assert stats["minValues"]["name"] == "apple"
    high = stats["maxValues"]["name"]
    assert len(high) <= 32 and high > long_name and high.startswith("z" * 31)

    _commit(tmp_path, df, [file], 1)
    actions = pa.table(DeltaTable(str(tmp_path)).get_add_actions(flatten=True)).to_pylist()
    assert actions[0]["min.id"] == 1 and actions[0]["max.id"] == 3
    assert actions[0]["num_records"] == 3


def test_string_upper_bound_is_above_every_string_with_the_prefix():
    assert string_upper_bound("a" * 40) == "a" * 31 + "b"
    assert string_upper_bound("a" * 31 + "\U0010ffff" + "x") == "a" * 30 + "b"
    assert string_upper_bound("a" * 31 + "\ud7ff" + "x") == "a" * 31 + "\ue000"
    assert string_upper_bound("\U0010ffff" * 40) is None


def test_a_claimed_table_refuses_every_older_generation(spark, tmp_path):
    location = str(tmp_path)
    df = spark.createDataFrame([_row(i, epoch=1) for i in range(1, 4)], SCHEMA)
    files = write_files(df, location, file_prefix="a")
    assert _commit(tmp_path, df, files, 1) == 0
    assert claim_table(location, fence=Fence("j", generation=1)) == 0  # already ours: no commit
    assert claim_table(location, fence=Fence("j", generation=2)) == 1

    late = write_files(df, location, file_prefix="late")
    with pytest.raises(FencedError) as refused:
        _commit(tmp_path, df, late, 2)
    assert (refused.value.table, refused.value.job) == (location, "j")
    assert (refused.value.generation, refused.value.fenced_at) == (1, 2)
    with pytest.raises(FencedError):
        restore_table(location, to_version=0, planned_at=1, fence=FENCE, metadata={})
    with pytest.raises(FencedError):
        claim_table(location, fence=FENCE)
    # Another job's fence is its own: it does not stop this one (once it claimed the table).
    other = Fence("k", generation=1)
    assert claim_table(location, fence=other) == 2
    assert (
        commit_files(
            location,
            CommitRequest(
                [],
                schema=to_arrow_schema(df.schema, timezone="UTC"),
                mode="append",
                fence=other,
                metadata={},
            ),
        )
        == 3
    )
    assert table_version(location) == 3 and read_table(spark, location).count() == 3
    # The fence survives a RESTORE by the new owner.
    assert (
        restore_table(location, to_version=0, planned_at=3, fence=Fence("j", 2), metadata={}) == 4
    )
    with pytest.raises(FencedError):
        _commit(tmp_path, df, late, 4)


def test_a_table_created_by_another_runner_is_never_committed_on_top_of(spark, tmp_path):
    """Issue 22: a superseded runner (generation 1) creates the table after the new owner
    (generation 2) found nothing to claim. The new owner's commit, planned on no table, is
    refused (recovery must claim the table first), whether it finds the table existing or
    loses the race to create it; and once it claimed the table, the old runner is fenced."""
    location = str(tmp_path)
    schema_df = spark.createDataFrame([_row(i, epoch=1) for i in range(1, 4)], SCHEMA)
    schema = to_arrow_schema(schema_df.schema, timezone="UTC")
    zombie, owner = Fence("j", generation=1), Fence("j", generation=2)
    assert claim_table(location, fence=owner) is None  # nothing to claim yet
    created = write_files(schema_df, location, file_prefix="zombie")
    assert (
        commit_files(
            location,
            CommitRequest(created, schema=schema, mode="append", fence=zombie, metadata={}),
        )
        == 0
    )
    replay = write_files(schema_df, location, file_prefix="owner")
    with pytest.raises(UnclaimedTableError) as refused:
        commit_files(
            location, CommitRequest(replay, schema=schema, mode="append", fence=owner, metadata={})
        )
    assert (refused.value.generation, refused.value.recorded) == (2, 1)
    assert table_version(location) == 0 and read_table(spark, location).count() == 3
    # The same when the table has no claim at all (created outside any fence).
    with pytest.raises(UnclaimedTableError):
        restore_table(location, to_version=None, planned_at=0, fence=owner, metadata={})
    # Recovery claims it; from then on the owner commits and the zombie is fenced.
    assert claim_table(location, fence=owner) == 1
    assert (
        commit_files(
            location, CommitRequest(replay, schema=schema, mode="append", fence=owner, metadata={})
        )
        == 2
    )
    with pytest.raises(FencedError):
        commit_files(
            location, CommitRequest([], schema=schema, mode="append", fence=zombie, metadata={})
        )


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["delta-rs", "own-log-writer"])
def test_losing_the_race_to_create_a_table_is_a_conflict_not_an_append(
    spark, tmp_path, deletion_vectors
):
    """Two writers create the same table at once (the zombie's create wins): the loser's
    files never land on top of the winner's, on delta-rs' create and on our own log
    writer's (a merge job's deletion-vector table) alike."""
    import threading

    location = str(tmp_path)
    df = spark.createDataFrame([_row(i, epoch=1) for i in range(1, 4)], SCHEMA)
    schema = to_arrow_schema(df.schema, timezone="UTC")
    files = {g: write_files(df, location, file_prefix=f"g{g}") for g in (1, 2)}
    start = threading.Barrier(2)
    outcome: dict[int, object] = {}

    def create(generation: int) -> None:
        start.wait()
        try:
            outcome[generation] = commit_files(
                location,
                CommitRequest(
                    files[generation],
                    schema=schema,
                    mode="append",
                    fence=Fence("j", generation),
                    metadata={},
                    deletion_vectors=deletion_vectors,
                ),
            )
        except Exception as exc:  # noqa: BLE001 - the loser's error is the assertion
            outcome[generation] = exc

    threads = [threading.Thread(target=create, args=(g,)) for g in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [g for g, o in outcome.items() if o == 0]
    assert len(winners) == 1, outcome
    (loser,) = {1, 2} - set(winners)
    assert isinstance(outcome[loser], (UnclaimedTableError, FencedError)), outcome
    assert table_version(location) == 0 and read_table(spark, location).count() == 3


def test_a_restore_applies_only_to_the_version_it_was_planned_from(spark, tmp_path):
    location = str(tmp_path)
    _append(spark, tmp_path, [_row(1, 1)], 1)
    _append(spark, tmp_path, [_row(2, 2)], 2)
    _append(spark, tmp_path, [_row(3, 3)], 3)
    with pytest.raises(CommitConflictError):
        restore_table(location, to_version=0, planned_at=1, fence=FENCE, metadata={})
    assert table_version(location) == 2
    assert restore_table(location, to_version=0, planned_at=2, fence=FENCE, metadata={}) == 3
    assert [r.id for r in read_table(spark, location).collect()] == [1]


def test_a_merge_commit_planned_on_files_another_commit_removed_is_refused(spark, tmp_path):
    location = str(tmp_path)
    _, files = _append(spark, tmp_path, [_row(1, 1)], 1)
    df = spark.createDataFrame([_row(1, 2)], SCHEMA)
    first = write_files(df, location, file_prefix="m1")
    _commit(tmp_path, df, first, 2, removes=[f.path for f in files])
    second = write_files(df, location, file_prefix="m2")
    with pytest.raises(CommitConflictError):
        _commit(tmp_path, df, second, 3, removes=[f.path for f in files])
    assert [r.id for r in read_table(spark, location).collect()] == [1]


def test_overwrite_removes_every_current_file(spark, tmp_path):
    _append(spark, tmp_path, [_row(i, 1) for i in range(1, 6)], 1, files_per_commit=2)
    _append(spark, tmp_path, [_row(i, 2) for i in range(6, 9)], 2)
    df = spark.createDataFrame([_row(i, 3) for i in (100, 101)], SCHEMA)
    files = write_files(df, str(tmp_path), file_prefix="o")

    version = _commit(tmp_path, df, files, 3, mode="overwrite")

    assert version == 2
    assert sorted(r.id for r in read_table(spark, str(tmp_path)).collect()) == [100, 101]
    assert {f.rsplit("/", 1)[1] for f in DeltaTable(str(tmp_path)).file_uris()} == {
        os.path.basename(f.path) for f in files
    }
    assert read_table(spark, str(tmp_path), version=1).count() == 8
    with pytest.raises(InvalidWriteOptionError):
        _commit(tmp_path, df, files, 4, mode="overwrite", removes=[files[0]])


def test_merge_rewrites_only_files_holding_updated_keys(spark, tmp_path):
    location = str(tmp_path)
    base = [_row(i, 1, name=f"p{i % 3}") for i in range(1, 13)]
    # Two files per partition: keys spread over six files in three partitions.
    df = spark.createDataFrame(base, SCHEMA).repartition(2, "id")
    files = write_files(df, location, partition_by=["name"], file_prefix="m0", collect_rows=0)
    assert len(files) == 6
    _commit(tmp_path, df, files, 1, partition_by=["name"])
    file_of = {
        r.id: r.f
        for r in read_table(spark, location).select("id", F.input_file_name().alias("f")).collect()
    }

    updates = spark.createDataFrame(
        [
            _row(2, 2, name="p2"),  # update in place
            (*_row(7, 2, name="p0")[:2], 99.0, *_row(7, 2)[3:]),  # moves from p1 to p0
            _row(100, 2, name="p1"),  # insert
            (None, "p1", 1.0, None, None, None, None, None, 2),  # null key: an insert
        ],
        SCHEMA,
    )
    merged = merge_files(
        spark,
        location,
        version=0,
        updates=updates,
        keys=["id"],
        partition_by=["name"],
        file_prefix="m1",
        rewrite_all_bytes=0,
    )
    adds, removed = merged.adds, merged.removes
    assert merged.upserted == 4 and sum(f.rows for f in adds) > 4
    # Exactly the files holding keys 2 and 7 are replaced.
    assert {str(tmp_path / p) for p in removed} == {
        spark_file_path(file_of[2]),
        spark_file_path(file_of[7]),
    }
    assert len(set(removed)) == len(removed) == 2
    version = _commit(tmp_path, updates, adds, 2, partition_by=["name"], removes=removed)

    after = {r.id: r for r in read_table(spark, location, version=version).collect()}
    kept_ids = {i for i in range(1, 13)} - {2, 7}
    assert set(after) == kept_ids | {2, 7, 100, None}
    assert after[7].name == "p0" and after[7].amount == 99.0 and after[7]._epoch == 2
    assert after[2]._epoch == 2 and after[100]._epoch == 2
    assert all(after[i]._epoch == 1 for i in kept_ids)
    assert read_table(spark, location, version=version).count() == len(after)
    untouched = {f.path for f in files} - set(removed)
    current = {os.path.relpath(u, location) for u in DeltaTable(location).file_uris()}
    assert untouched <= current and not set(removed) & current

    # A second merge of the same removes against a stale plan is refused.
    with pytest.raises(CommitConflictError):
        _commit(tmp_path, updates, [], 3, partition_by=["name"], removes=removed)
    duplicated = updates.unionAll(updates.where("id = 2"))
    with pytest.raises(DuplicateMergeKeyError) as err:
        merge_files(
            spark,
            location,
            version=version,
            updates=duplicated,
            keys=["id"],
            partition_by=["name"],
            file_prefix="m2",
            rewrite_all_bytes=0,
        )
    assert err.value.example == {"id": 2}


def _merge_table(spark, location):
    """Six files in three partitions, keys 1..12 and a row with a null key."""
    base = [_row(i, 1, name=f"p{i % 3}") for i in range(1, 13)] + [_row(0, 1, name="p0")]
    base[-1] = (None, *base[-1][1:])
    df = spark.createDataFrame(base, SCHEMA).repartition(2, "id")
    files = write_files(df, location, partition_by=["name"], file_prefix="m0", collect_rows=0)
    assert len(files) == 6
    return df, files


def _merge(spark, location, updates, prefix, **options):
    return merge_files(
        spark,
        location,
        version=0,
        updates=updates,
        keys=["id"],
        partition_by=["name"],
        file_prefix=prefix,
        **options,
    )


def test_a_merge_into_a_small_table_rewrites_every_file_in_one_pass(spark, tmp_path):
    location = str(tmp_path)
    df, files = _merge_table(spark, location)
    _commit(tmp_path, df, files, 1, partition_by=["name"])
    on_disk = sorted(p for p in tmp_path.rglob("*.parquet"))
    updates = spark.createDataFrame(
        [
            _row(2, 2, name="p2"),
            (*_row(7, 2, name="p0")[:2], 99.0, *_row(7, 2)[3:]),  # moves from p1 to p0
            _row(100, 2, name="p1"),
            (None, "p1", 1.0, None, None, None, None, None, 2),  # null key: an insert
            (None, "p2", 2.0, None, None, None, None, None, 2),  # so is this one
        ],
        SCHEMA,
    )

    # Two updates of one key: refused before anything is written.
    with pytest.raises(DuplicateMergeKeyError) as err:
        _merge(spark, location, updates.unionAll(updates.where("id = 7")), "dup")
    assert err.value.example == {"id": 7}
    assert sorted(tmp_path.rglob("*.parquet")) == on_disk
    # No updates: nothing to write or remove.
    assert _merge(spark, location, updates.limit(0), "none") == MergeWrite([], [], 0)

    merged = _merge(spark, location, updates, "m1")
    assert merged.upserted == 5
    assert sorted(merged.removes) == sorted(f.path for f in files)
    assert len(merged.adds) == 3  # one per partition
    assert sum(f.rows for f in merged.adds) == 13 + 3
    version = _commit(
        tmp_path, updates, merged.adds, 2, partition_by=["name"], removes=merged.removes
    )
    after = read_table(spark, location, version=version).collect()
    by_id = {r.id: r for r in after if r.id is not None}
    assert sorted(by_id) == [*range(1, 13), 100]
    assert by_id[7].name == "p0" and by_id[7].amount == 99.0 and by_id[7]._epoch == 2
    assert by_id[2]._epoch == 2 and by_id[100]._epoch == 2
    assert all(by_id[i]._epoch == 1 for i in set(range(1, 13)) - {2, 7})
    # The table's null-key row stays; the null-key updates are inserted beside it.
    assert sorted((r.name, r._epoch) for r in after if r.id is None) == [
        ("p0", 1),
        ("p1", 2),
        ("p2", 2),
    ]


def test_a_merge_whose_result_is_too_big_to_collect_rewrites_only_touched_files(spark, tmp_path):
    location = str(tmp_path)
    df, files = _merge_table(spark, location)
    _commit(tmp_path, df, files, 1, partition_by=["name"])
    holders = {
        r.id: spark_file_path(r.f)
        for r in read_table(spark, location).select("id", F.input_file_name().alias("f")).collect()
    }
    updates = spark.createDataFrame(
        [
            _row(2, 2, name="p2"),
            (None, "p1", 1.0, None, None, None, None, None, 2),
            (None, "p2", 2.0, None, None, None, None, None, 2),
        ],
        SCHEMA,
    )
    with pytest.raises(DuplicateMergeKeyError) as err:
        _merge(spark, location, updates.unionAll(updates.where("id = 2")), "dup", collect_rows=14)
    assert err.value.example == {"id": 2}

    # The table's 13 rows could be collected, the result's 15 cannot.
    merged = _merge(spark, location, updates, "m1", collect_rows=14)
    assert merged.upserted == 3
    assert [str(tmp_path / p) for p in merged.removes] == [holders[2]]
    version = _commit(
        tmp_path, updates, merged.adds, 2, partition_by=["name"], removes=merged.removes
    )
    after = read_table(spark, location, version=version).collect()
    assert len(after) == 13 + 2
    assert [r._epoch for r in after if r.id == 2] == [2]


def test_write_files_collects_at_most_collect_rows_rows(spark, tmp_path):
    rows = [_row(i, 1) for i in range(1, 7)]
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    big = sys.maxsize
    collected = write_files(
        df, str(tmp_path / "a"), file_prefix="a", collect_rows=6, collect_bytes=big
    )
    by_spark = write_files(
        df, str(tmp_path / "b"), file_prefix="b", collect_rows=5, collect_bytes=big
    )
    # Rows that would fit, but Spark estimates them above collect_bytes: not even tried.
    estimated_big = write_files(df, str(tmp_path / "c"), file_prefix="c", collect_rows=6)
    # One file from the driver, one per task from Spark.
    assert (len(collected), len(by_spark), len(estimated_big)) == (1, 3, 3)
    for name, files in (("a", collected), ("b", by_spark), ("c", estimated_big)):
        _commit(tmp_path / name, df, files, 1)
        assert _spark_rows(read_table(spark, str(tmp_path / name))) == _spark_rows(df)


def test_read_epochs_opens_only_files_whose_epochs_overlap(spark, tmp_path):
    flat = tmp_path / "flat"
    for epoch in (1, 2, 3):
        _append(spark, flat, [_row(i, epoch) for i in range(epoch * 10, epoch * 10 + 4)], epoch)

    two = read_epochs(spark, str(flat), version=2, first_epoch=2, last_epoch=2)
    assert len(two.inputFiles()) == 1 and "part-t2-" in two.inputFiles()[0]
    assert {r._epoch for r in two.collect()} == {2} and two.count() == 4
    two_three = read_epochs(spark, str(flat), version=2, first_epoch=2, last_epoch=3)
    assert len(two_three.inputFiles()) == 2 and two_three.count() == 8
    assert read_epochs(spark, str(flat), version=0, first_epoch=2, last_epoch=3).count() == 0
    arrow = read_arrow(str(flat), version=2, columns=["id", "_epoch"], filter_epochs=(3, 3))
    assert arrow.column_names == ["id", "_epoch"] and set(arrow.column("_epoch").to_pylist()) == {3}

    parted = tmp_path / "parted"
    _append(spark, parted, [_row(i, 1 + i % 3) for i in range(9)], 1, partition_by=["_epoch"])
    three = read_epochs(spark, str(parted), version=0, first_epoch=3, last_epoch=3)
    assert [("_epoch=3" in f) for f in three.inputFiles()] == [True]
    assert sorted(r.id for r in three.collect()) == [2, 5, 8]
    assert read_pandas(str(parted), filter_epochs=(3, 3))["id"].sort_values().tolist() == [2, 5, 8]


def test_read_epochs_keeps_only_the_epochs_of_files_that_hold_others(spark, tmp_path):
    """The epochs' filter is left out only where the log shows every row of every file
    read inside the range: a file that also holds other epochs, or rows without one,
    still gives only the range's rows."""
    location = tmp_path / "mixed"
    _append(spark, location, [_row(1, 1), _row(2, 2), _row(3, 3)], 1)  # one file, 3 epochs
    _append(spark, location, [_row(4, 2), _row(5, None)], 2)  # a row without an epoch
    _append(spark, location, [_row(6, 2)], 3)  # epoch 2 only

    def ids(version: int, first: int, last: int) -> list[int]:
        frame = read_epochs(
            spark, str(location), version=version, first_epoch=first, last_epoch=last
        )
        return sorted(r.id for r in frame.collect())

    assert ids(0, 2, 2) == [2]
    assert ids(1, 2, 3) == [2, 3, 4]
    assert ids(2, 2, 2) == [2, 4, 6]
    assert ids(2, 1, 3) == [1, 2, 3, 4, 6]


LOG_SCHEMA = pa.schema([("id", pa.int64()), ("_epoch", pa.int64())])


def test_epoch_pruning_keeps_files_without_statistics_and_drops_the_others(tmp_path):
    """read_epochs' file pruning (in Arrow, before a Python object per file): a file whose
    min/max of _epoch miss the range is left out; one without statistics is kept."""
    from deltalake.transaction import AddAction

    from etl.delta.log import active_files

    def stats(low, high):
        return json.dumps(
            {"numRecords": 1, "minValues": {"_epoch": low}, "maxValues": {"_epoch": high}}
        )

    write_deltalake(str(tmp_path), pa.table({"id": [0], "_epoch": [1]}, schema=LOG_SCHEMA))
    table = DeltaTable(str(tmp_path))
    adds = {"e2-4.parquet": stats(2, 4), "e6.parquet": stats(6, 6), "none.parquet": None}
    table.create_write_transaction(
        [
            AddAction(path, 10, {}, 0, True, text)  # files need not exist to be listed
            for path, text in adds.items()
        ],
        mode="append",
        schema=table.schema(),
    )
    table = DeltaTable(str(tmp_path))

    def kept(first, last):
        return sorted(
            f.path
            for f in active_files(table, epochs=(first, last))
            if not f.path.startswith("part")
        )

    assert kept(3, 3) == ["e2-4.parquet", "none.parquet"]
    assert kept(5, 5) == ["none.parquet"]
    assert kept(4, 6) == ["e2-4.parquet", "e6.parquet", "none.parquet"]
    assert len(active_files(table, epochs=(1, 1))) == 2  # the first file and "none"
    assert len(active_files(table)) == 4


def test_restore_and_log_commits_for_recovery(spark, tmp_path):
    location = str(tmp_path)
    meta1 = {META_EPOCH: 1, META_FIRST_EPOCH: 1, META_JOB: "j", META_ATTEMPT: 1, META_FINAL: True}
    _append(spark, tmp_path, [_row(i, 1) for i in range(3)], 1, meta=meta1)
    meta2 = {META_EPOCH: 2, META_FIRST_EPOCH: 2, META_JOB: "j", META_ATTEMPT: 1, META_BATCH: 0}
    _append(
        spark, tmp_path, [_row(i, 2) for i in range(3, 5)], 2, meta={**meta2, META_FINAL: False}
    )

    restored = restore_table(
        location, to_version=0, planned_at=1, fence=FENCE, metadata={META_ROLLBACK_OF: "2"}
    )

    assert restored == 2
    assert sorted(r.id for r in read_table(spark, location).collect()) == [0, 1, 2]
    assert log_commits(location, after_version=0) == [
        LogCommit(version=1, operation="WRITE", epoch=2, first_epoch=2, job="j", attempt=1, part=0),
        LogCommit(version=2, operation="RESTORE", job="j", restored_to=0),
    ]
    first = log_commits(location, after_version=None)[0]
    assert (first.version, first.epoch, first.job, first.final) == (0, 1, "j", True)
    df = spark.createDataFrame([_row(9, 2)], SCHEMA)
    files = write_files(df, location, file_prefix="r")
    assert _commit(tmp_path, df, files, 3, meta={META_EPOCH: 2, META_ATTEMPT: 2}) == 3

    assert restore_table(location, to_version=3, planned_at=3, fence=FENCE, metadata={}) == 3
    emptied = restore_table(
        location, to_version=None, planned_at=3, fence=FENCE, metadata={META_ROLLBACK_OF: "1,2"}
    )
    assert emptied == 4
    assert log_commits(location, after_version=3) == [
        LogCommit(version=4, operation="WRITE", job="j", restored_to=BEFORE_FIRST_VERSION)
    ]
    empty = read_table(spark, location)
    assert empty.count() == 0 and empty.schema.fieldNames() == df.schema.fieldNames()
    with pytest.raises(DeltaIOError):
        restore_table(location, to_version=9, planned_at=4, fence=FENCE, metadata={})


def test_schema_mismatch_names_table_and_columns(spark, tmp_path):
    _append(spark, tmp_path, [_row(1, 1)], 1)
    other = spark.createDataFrame([(1, "x")], "id int, label string")
    files = write_files(other, str(tmp_path), file_prefix="x")

    with pytest.raises(SchemaMismatchError) as err:
        _commit(tmp_path, other, files, 2)

    assert err.value.table == str(tmp_path)
    assert err.value.expected["id"] == "long" and err.value.got["id"] == "integer"
    assert "label" in str(err.value) and "amount" in str(err.value)
    assert table_version(str(tmp_path)) == 0
    # Nullability alone is no mismatch.
    strict = spark.createDataFrame([_row(2, 1)], SCHEMA.replace("id long", "id long not null"))
    files = write_files(strict, str(tmp_path), file_prefix="y")
    assert _commit(tmp_path, strict, files, 3) == 1


def test_tables_with_unsupported_features_are_refused(spark, tmp_path):
    schema = pa.schema([("id", pa.int64())])
    # Deletion vectors are supported (tests/etl/delta/test_deletion_vectors.py); delta-rs'
    # DV table also carries the variantType reader feature, which is not.
    dv = DeltaTable.create(
        str(tmp_path / "dv"), schema, configuration={"delta.enableDeletionVectors": "true"}
    )
    mapped = DeltaTable.create(
        str(tmp_path / "cm"), schema, configuration={"delta.columnMapping.mode": "name"}
    )
    df = spark.createDataFrame([(1,)], "id long")
    for table, feature in ((dv, "variantType"), (mapped, "columnMapping")):
        location = table.table_uri.removeprefix("file://").rstrip("/")
        for read in (
            lambda loc=location: read_table(spark, loc),
            lambda loc=location: read_arrow(loc),
            lambda loc=location: commit_files(
                loc, CommitRequest([], schema=schema, mode="append", fence=FENCE, metadata={})
            ),
        ):
            with pytest.raises(UnsupportedTableFeatureError) as err:
                read()
            assert err.value.table == location
            assert any(f.startswith(feature) for f in err.value.features)
    # The timestampNtz reader feature is supported.
    ntz = tmp_path / "ntz"
    write_deltalake(
        str(ntz), pa.table({"t": pa.array([datetime(2024, 1, 1, 5)], pa.timestamp("us"))})
    )
    assert DeltaTable(str(ntz)).protocol().reader_features == ["timestampNtz"]
    assert read_table(spark, str(ntz)).collect()[0].t == datetime(2024, 1, 1, 5)
    assert df.count() == 1


def test_empty_versions_and_missing_tables(spark, tmp_path):
    assert table_version(str(tmp_path / "nothing")) is None
    assert log_commits(str(tmp_path / "nothing"), after_version=None) == []
    with pytest.raises(DeltaIOError):
        read_table(spark, str(tmp_path / "nothing"))
    df = spark.createDataFrame([], SCHEMA)
    assert write_files(df, str(tmp_path / "t"), file_prefix="e") == []
    assert _commit(tmp_path / "t", df, [], 1, partition_by=["_epoch"]) == 0

    empty = read_table(spark, str(tmp_path / "t"))
    assert empty.count() == 0
    assert [(f.name, f.dataType) for f in empty.schema.fields] == [
        (f.name, f.dataType) for f in df.schema.fields
    ]
    assert (
        read_epochs(spark, str(tmp_path / "t"), version=0, first_epoch=1, last_epoch=9).count() == 0
    )
    assert read_arrow(str(tmp_path / "t")).num_rows == 0
    with pytest.raises(DeltaIOError):
        read_table(spark, str(tmp_path / "t"), version=5)


def _log_files(location: Path) -> tuple[list[int], list[int]]:
    """(versions with a JSON commit, versions with a checkpoint) in the table's log."""
    commits, checkpoints = log_versions(*filesystem(str(location)))
    return commits, sorted(checkpoints)


def _empty_commit(location: Path, fence: Fence, *, mode="append") -> int:
    return commit_files(
        str(location), CommitRequest([], schema=LOG_SCHEMA, mode=mode, fence=fence, metadata={})
    )


def test_every_commit_path_checkpoints_at_the_interval_and_only_there(tmp_path):
    """Opening a table replays the commits after its newest checkpoint: a job commits once
    per epoch, so every commit path (delta-rs' append, overwrite, claim and restore; our
    own log writer's is in test_deletion_vectors) checkpoints every CHECKPOINT_INTERVAL
    versions, at the table's phase, and delta-rs' own hook (every 100) does not add any."""
    from etl.delta.commit import checkpoint_due
    from etl.delta.logfile import CHECKPOINT_INTERVAL

    location = tmp_path
    first, second = Fence("j", generation=1), Fence("j", generation=2)
    due = [v for v in range(4 * CHECKPOINT_INTERVAL) if checkpoint_due(str(location), v)][:3]
    assert [b - a for a, b in itertools.pairwise(due)] == [CHECKPOINT_INTERVAL] * 2
    version = _empty_commit(location, first)
    assert version == 0
    while version < due[0] - 1:
        version = _empty_commit(location, first)
    assert (version := claim_table(str(location), fence=second)) == due[0]
    while version < due[1] - 1:
        version = _empty_commit(location, second)
    assert (
        restore_table(str(location), to_version=1, planned_at=version, fence=second, metadata={})
        == due[1]
    )
    version = due[1]
    while version < due[2] - 1:
        version = _empty_commit(location, second)
    assert _empty_commit(location, second, mode="overwrite") == due[2]

    commits, checkpoints = _log_files(location)
    assert checkpoints == due
    assert commits == list(range(due[2] + 1))
    assert DeltaTable(str(location)).version() == due[2]
    assert DeltaTable(str(location), version=1).version() == 1


def test_tables_committing_in_step_spread_their_checkpoints_over_the_versions(tmp_path):
    """A pipeline's jobs commit in step, once an epoch each: with one phase for every
    table, a wide pipeline would write all its checkpoints in the same epoch, every tenth
    one. Each table still checkpoints once every CHECKPOINT_INTERVAL versions."""
    from etl.delta.commit import checkpoint_due
    from etl.delta.logfile import CHECKPOINT_INTERVAL

    locations = [tmp_path / f"branch_{i:03d}" for i in range(12)]
    for _ in range(CHECKPOINT_INTERVAL + 1):
        for location in locations:
            _empty_commit(location, FENCE)
    taken = {}
    for location in locations:
        _, checkpoints = _log_files(location)
        assert len(checkpoints) == 1 and checkpoint_due(str(location), checkpoints[0])
        taken[location.name] = checkpoints[0]
    assert len(set(taken.values())) >= 5, taken


def test_commits_never_delete_log_entries_whatever_the_tables_log_retention(tmp_path):
    """Only ``etl maintain`` deletes log entries, keeping every version a kept cut needs:
    delta-rs' post-commit hook would delete those older than the table's
    logRetentionDuration on any commit, and a recorded version would stop being readable."""
    write_deltalake(
        str(tmp_path),
        pa.table({"id": [1], "_epoch": [1]}, schema=LOG_SCHEMA),
        configuration={"delta.logRetentionDuration": "interval 1 second"},
    )
    claim_table(str(tmp_path), fence=FENCE)
    while _empty_commit(tmp_path, FENCE) < 12:
        pass
    DeltaTable(str(tmp_path)).create_checkpoint()  # delta-rs cleans up below a checkpoint
    time.sleep(1.5)
    assert _empty_commit(tmp_path, FENCE) == 13

    commits, _ = _log_files(tmp_path)
    assert commits == list(range(14))
    assert DeltaTable(str(tmp_path), version=1).to_pyarrow_table().num_rows == 1


def test_files_outside_the_hive_layout_take_partition_values_from_the_log(spark, tmp_path):
    rows = [(i, i % 2, f"v{i}") for i in range(6)]
    df = spark.createDataFrame(rows, "id long, p int, v string").coalesce(1)
    files = write_files(df, str(tmp_path), partition_by=["p"], file_prefix="h")
    moved = []
    for i, file in enumerate(files):
        target = f"elsewhere/f{i}.parquet"
        (tmp_path / "elsewhere").mkdir(exist_ok=True)
        shutil.move(tmp_path / file.path, tmp_path / target)
        moved.append(type(file)(**{**file.__dict__, "path": target}))
    _commit(tmp_path, df, moved, 1, partition_by=["p"])

    back = read_table(spark, str(tmp_path))
    assert back.schema.simpleString() == "struct<id:bigint,p:int,v:string>"
    assert sorted(tuple(r) for r in back.collect()) == sorted(rows)

    # A merge finds the files that hold its keys there too.
    updates = spark.createDataFrame([(1, 1, "new")], "id long, p int, v string")
    merged = merge_files(
        spark,
        str(tmp_path),
        version=0,
        updates=updates,
        keys=["id"],
        partition_by=["p"],
        file_prefix="h2",
        rewrite_all_bytes=0,  # find the touched files, not rewrite them all
    )
    adds, removed = merged.adds, merged.removes
    (holder,) = [f.path for f in moved if f.partition_values == {"p": "1"}]
    assert removed == [holder]
    _commit(tmp_path, df, adds, 2, partition_by=["p"], removes=removed)
    expected = sorted([r for r in rows if r[0] != 1] + [(1, 1, "new")])
    assert sorted(tuple(r) for r in read_table(spark, str(tmp_path)).collect()) == expected


def test_write_options_are_checked(spark, tmp_path):
    df = spark.createDataFrame([(1, 1.5)], "id long, x double")
    with pytest.raises(InvalidWriteOptionError, match="file_prefix"):
        write_files(df, str(tmp_path), file_prefix="a/b")
    with pytest.raises(InvalidWriteOptionError, match="type double"):
        write_files(df, str(tmp_path), partition_by=["x"], file_prefix="a")
    with pytest.raises(InvalidWriteOptionError, match="not in the rows"):
        write_files(df, str(tmp_path), partition_by=["nope"], file_prefix="a")
    assert not any(Path(tmp_path).iterdir())


def test_a_failed_write_leaves_no_file_and_stale_staging_is_removed(spark, tmp_path):
    explode = F.udf(lambda x: x // 0 if x == 3 else x, "long")
    with pytest.raises(Exception, match="ZeroDivisionError"):
        write_files(
            spark.range(5).select(explode("id").alias("id")), str(tmp_path), file_prefix="f"
        )
    assert list(tmp_path.iterdir()) == []

    # What a process killed in the middle of a write leaves behind.
    stale = tmp_path / "_delta_barrier_staging-f-0123" / "p=1"
    stale.mkdir(parents=True)
    (stale / "part-00000.parquet").write_bytes(b"half a file")
    (tmp_path / "_delta_log").mkdir()
    assert remove_staging(str(tmp_path)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["_delta_log"]
