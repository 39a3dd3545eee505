"""A Kafka root job without a transform, in append mode: the source's Spark tasks write the
rows' and the rejects' Parquet files themselves (``Source.read_direct``) and the driver
commits their descriptors. It must write exactly what the DataFrame path writes (rows,
rejects, Delta schema, partitions, micro-batch commits), and never commit the files of a
failed task."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from catalog import load_catalog
from etl import Pipeline, Runner
from etl.delta import log_commits
from etl.retention.maintain import maintain
from etl.sources.base import DirectSlice, DirectWrite, WrittenSlice
from etl.sources.kafka import KafkaSource
from tests.support.spark_work import PLANNING_CALLS, SparkCounters, py4j_calls

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SCHEMA = "id long not null, region string, amount double, at timestamp"
RECORDS = 40
MICRO_BATCH = 7
BAD = {
    3: b"{not json",
    8: b"\xff\xfe not utf-8",
    11: None,  # a tombstone
    14: b'{"id": "14"}',  # wrong type
    19: b'{"region": "eu"}',  # a NOT NULL field missing
    25: b"[1, 2]",  # not an object
}


class SpiedSource(KafkaSource):
    """A Kafka source that remembers what its direct writes returned; ``break_rejects``
    (a path under a regular file) makes the next one's tasks fail writing the rejects,
    after they wrote the rows' files."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.written: list[WrittenSlice] = []
        self.break_rejects: str | None = None

    def read_direct(self, spark, bounds, *, epoch) -> DirectSlice:
        direct = super().read_direct(spark, bounds, epoch=epoch)
        real = direct.write

        def write(target: DirectWrite) -> WrittenSlice:
            if self.break_rejects is not None:
                assert target.rejects is not None
                broken = replace(target.rejects, location=self.break_rejects)
                self.break_rejects = None
                target = replace(target, rejects=broken)
            written = real(target)
            self.written.append(written)
            return written

        return replace(direct, write=write)


def _values() -> list[bytes | None]:
    regions = ["eu", "us", None]
    return [
        BAD[i]
        if i in BAD
        else json.dumps(
            {
                "id": i,
                "region": regions[i % 3],
                "amount": i / 4,
                "at": f"2026-03-0{1 + i % 5}T10:00:0{i % 10}.123456Z",
            }
        ).encode()
        for i in range(RECORDS)
    ]


def _runner(
    root: Path, spark, bootstrap: str, topic: str, *, identity: bool, source: SpiedSource
) -> Runner:
    pipeline = Pipeline("orders")
    pipeline.ingest(
        "ingest_orders",
        source=source,
        output="orders",
        rejects="orders_rejects",
        partition_by=["region"],
        transform=(lambda ctx: ctx["orders_src"]) if identity else None,
    )
    warehouse = root / "warehouse"
    runner = Runner(
        pipeline,
        catalog=load_catalog(None, warehouse=warehouse),
        warehouse=str(warehouse),
        spark=spark,
    )
    runner.register()
    return runner


def _source(bootstrap: str, topic: str) -> SpiedSource:
    return SpiedSource(
        "orders_src",
        topics=[topic],
        bootstrap_servers=bootstrap,
        schema=SCHEMA,
        include={"topic", "partition", "offset", "key"},
        max_records_per_micro_batch=MICRO_BATCH,
    )


def _table(runner: Runner, name: str) -> DeltaTable:
    return DeltaTable(runner.catalog.get_table(name).location)


def _paths(table: DeltaTable) -> set[str]:
    return set(pa.table(table.get_add_actions()).column("path").to_pylist())


def _data_files(root: Path) -> set[str]:
    """The data files under a table directory, committed or not."""
    found = {str(p.relative_to(root)) for p in root.rglob("*.parquet")}
    return {path for path in found if not path.startswith("_delta_log/")}


def _rows(table: DeltaTable) -> list[tuple]:
    rows = table.to_pyarrow_table().to_pylist()
    return sorted(tuple(sorted(r.items())) for r in rows)


def _commits(runner: Runner, name: str) -> list[tuple]:
    location = runner.catalog.get_table(name).location
    return [(c.epoch, c.part, c.final) for c in log_commits(location) if c.epoch is not None]


@pytest.fixture
def topic(kafka_topic, kafka_produce) -> str:
    name = kafka_topic(2)
    keys = [f"k{i}".encode() for i in range(RECORDS)]  # a tombstone needs a key
    kafka_produce(name, _values(), partitions=2, keys=keys)
    return name


def test_a_root_without_transform_commits_the_files_its_source_tasks_wrote(
    tmp_path, spark, kafka_bootstrap, topic
):
    source = _source(kafka_bootstrap, topic)
    runner = _runner(tmp_path, spark, kafka_bootstrap, topic, identity=False, source=source)

    result = runner.run_once()

    assert result.ok, result.failures
    parts = -(-RECORDS // MICRO_BATCH)
    assert len(source.written) == parts  # one direct write per micro-batch
    for name, pick in (("orders", "rows"), ("orders_rejects", "rejects")):
        committed = _paths(_table(runner, name))
        direct = {f.path for w in source.written for f in getattr(w, pick).files}
        assert committed == direct, name
    orders = _table(runner, "orders").to_pyarrow_table()
    assert sorted(orders.column("id").to_pylist()) == [i for i in range(RECORDS) if i not in BAD]
    assert set(orders.column("_epoch").to_pylist()) == {1}
    rejects = _table(runner, "orders_rejects").to_pyarrow_table().to_pylist()
    assert sorted(r["value"] for r in rejects if r["value"] is not None) == sorted(
        v for v in BAD.values() if v is not None
    )
    assert all(r["reason"] and r["detail"] and r["topic"] == topic for r in rejects)
    assert all(r["_epoch"] == 1 and r["key"] is not None for r in rejects)
    assert [c[1:] for c in _commits(runner, "orders")] == [
        (p, p == parts - 1) for p in range(parts)
    ]


def test_a_direct_batch_plans_no_frame_and_runs_one_spark_job(
    tmp_path, spark, kafka_bootstrap, topic, kafka_produce
):
    """The direct path asks Spark for its write's job only: ``read``'s frames (the tagged
    records, checkpointed, split into rows and rejects) and the engine's ``_epoch`` column
    are planned for nothing when the tasks write the files (before: 2 mapInArrow, a
    localCheckpoint and 5 analysed frames a micro-batch)."""
    source = SpiedSource(
        "orders_src", topics=[topic], bootstrap_servers=kafka_bootstrap, schema=SCHEMA
    )
    runner = _runner(tmp_path, spark, kafka_bootstrap, topic, identity=False, source=source)
    assert runner.run_once().ok  # creates the tables; the columns are learnt once
    counters = SparkCounters(spark)
    for epoch in range(2):
        kafka_produce(topic, [_values()[i] or b"x" for i in range(RECORDS)], partitions=2)
        jobs_before, _ = counters.latest()
        with py4j_calls() as calls:
            result = runner.run_once()
        jobs_after, _ = counters.latest()

        assert result.ok, result.failures
        assert len(source.written) == 2 + epoch  # the direct path, one micro-batch
        assert {name: calls[name] for name in PLANNING_CALLS if calls[name]} == {}
        assert (calls["mapInArrow"], calls["localCheckpoint"]) == (1, 0)
        assert jobs_after - jobs_before == 1


def test_the_direct_path_writes_what_the_dataframe_path_writes(
    tmp_path, spark, kafka_bootstrap, topic
):
    direct_source, frame_source = _source(kafka_bootstrap, topic), _source(kafka_bootstrap, topic)
    direct = _runner(
        tmp_path / "direct", spark, kafka_bootstrap, topic, identity=False, source=direct_source
    )
    frames = _runner(
        tmp_path / "frames", spark, kafka_bootstrap, topic, identity=True, source=frame_source
    )

    direct_result, frames_result = direct.run_once(), frames.run_once()

    assert direct_result.ok and frames_result.ok, frames_result.failures
    assert direct_source.written and not frame_source.written  # each took its own path
    assert [(b.rows, b.rejected) for b in direct_result.batches] == [
        (b.rows, b.rejected) for b in frames_result.batches
    ]
    for name in ("orders", "orders_rejects"):
        ours, theirs = _table(direct, name), _table(frames, name)
        assert ours.schema().to_json() == theirs.schema().to_json(), name
        assert ours.metadata().partition_columns == theirs.metadata().partition_columns
        assert _rows(ours) == _rows(theirs), name
        assert _commits(direct, name) == _commits(frames, name), name
    assert _table(direct, "orders").metadata().partition_columns == ["region"]
    assert len(_rows(_table(direct, "orders"))) + len(_rows(_table(direct, "orders_rejects"))) == (
        RECORDS
    )
    directories = {path.split("/")[0] for path in _paths(_table(direct, "orders"))}
    assert directories == {"region=eu", "region=us", "region=__HIVE_DEFAULT_PARTITION__"}


def test_a_table_written_by_both_paths_has_one_schema(
    tmp_path, spark, kafka_bootstrap, topic, kafka_produce
):
    frames = _runner(
        tmp_path,
        spark,
        kafka_bootstrap,
        topic,
        identity=True,
        source=_source(kafka_bootstrap, topic),
    )
    assert frames.run_once().ok
    schemas = {n: _table(frames, n).schema().to_json() for n in ("orders", "orders_rejects")}
    kafka_produce(topic, [_values()[i] or b"x" for i in range(RECORDS)], partitions=2)
    source = _source(kafka_bootstrap, topic)
    direct = _runner(tmp_path, spark, kafka_bootstrap, topic, identity=False, source=source)

    assert direct.run_once().ok

    assert source.written  # the second epoch took the direct path
    for name, schema in schemas.items():
        assert _table(direct, name).schema().to_json() == schema, name
        assert {r["_epoch"] for r in _table(direct, name).to_pyarrow_table().to_pylist()} == {1, 2}


def test_the_files_of_a_failed_direct_write_are_never_committed(
    tmp_path, spark, kafka_bootstrap, topic
):
    source = _source(kafka_bootstrap, topic)
    runner = _runner(tmp_path, spark, kafka_bootstrap, topic, identity=False, source=source)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the tasks expect a directory")
    source.break_rejects = str(blocker / "rejects")
    orders_dir = Path(runner.catalog.get_table("orders").location)

    failed = runner.run_once()

    assert not failed.ok and not source.written
    orphans = _data_files(orders_dir)
    assert orphans  # the tasks wrote rows' files before the rejects failed them

    assert runner.run_once().ok

    committed = _paths(_table(runner, "orders"))
    assert committed and not committed & orphans
    ids = _table(runner, "orders").to_pyarrow_table().column("id").to_pylist()
    assert sorted(ids) == [i for i in range(RECORDS) if i not in BAD]  # once each
    report = maintain(runner.catalog, orphan_age=timedelta(0), compaction=False)
    # Both tables a direct write writes into are swept for orphans.
    assert {"orders", "orders_rejects"} <= {entry.table for entry in report.tables}
    left = _data_files(orders_dir)
    assert left == committed
