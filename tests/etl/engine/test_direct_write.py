"""The engine's side of a source's direct write (``Source.read_direct``): a root job that
copies its slice as it is (no transform, append mode) asks the source to write each
micro-batch's files, and commits exactly those, rejects first, micro-batch by
micro-batch, with the usual crash points and numbering; any other root writes its frames.

The source here writes from the driver with ``write_arrow``: it stands for a source's
tasks (the Kafka source's are tested in tests/etl/sources/test_kafka_direct_write.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from catalog import load_catalog
from etl import Pipeline, Runner, snapshot
from etl.delta import EPOCH_COLUMN, log_commits
from etl.delta.files import write_arrow
from etl.sources.base import (
    DirectSlice,
    DirectWrite,
    SliceData,
    SliceRequest,
    Source,
    TableTarget,
    WrittenSlice,
    WrittenTable,
)

pytestmark = [pytest.mark.spark, pytest.mark.recovery]


class SimulatedCrash(BaseException):
    """Raised at a fault point: unwinds past every `except Exception`, like a kill."""


@contextmanager
def crash_at(point: str, *, nth: int = 1) -> Iterator[None]:
    """Within the block, the nth time the engine reaches fault point ``point`` it crashes."""
    import etl.engine.batch
    import etl.engine.commit

    reached = {"count": 0}

    def maybe_crash(name: str, *, job: str, epoch: int) -> None:
        if name == point:
            reached["count"] += 1
            if reached["count"] == nth:
                raise SimulatedCrash(f"{point} #{nth} ({job}, epoch {epoch})")

    with pytest.MonkeyPatch.context() as patch:
        for module in (etl.engine.batch, etl.engine.commit):
            patch.setattr(module, "maybe_crash", maybe_crash)
        yield


class DirectSource(Source):
    """Rows handed in per epoch by the test, recorded in the bounds (a replay reads the
    same); ``None`` is a record that cannot be decoded (a reject). Micro-batches of two
    records. Its slices can be written directly; every target it was asked to write is
    kept in ``targets``."""

    produces_rejects = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.pending: list[list[object] | None] = []
        self.targets: list[DirectWrite] = []
        self.written: list[WrittenSlice] = []

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        taken, self.pending = self.pending, []
        return {"records": taken}

    def micro_batches(self, bounds: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        records = list(bounds["records"])  # type: ignore[call-overload]
        return tuple({"records": records[i : i + 2]} for i in range(0, max(len(records), 1), 2))

    def read(self, spark, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        records = list(bounds["records"])  # type: ignore[call-overload]
        rows = spark.createDataFrame(
            [tuple(r) for r in records if r is not None], "k string, v long"
        )
        rejects = spark.createDataFrame(
            [(str(i),) for i, r in enumerate(records) if r is None], "record string"
        )
        return SliceData(rows=rows, rejects=rejects)

    def read_direct(self, spark, bounds: Mapping[str, object], *, epoch: int) -> DirectSlice:
        data = self.read(spark, bounds, epoch=epoch)
        rows, rejects = data.rows, data.rejects
        assert rejects is not None

        def write(target: DirectWrite) -> WrittenSlice:
            self.targets.append(target)
            assert target.rejects is not None
            written = WrittenSlice(
                rows=_write(rows.toArrow(), target.rows, target),
                rejects=_write(rejects.toArrow(), target.rejects, target),
            )
            self.written.append(written)
            return written

        return DirectSlice(rows=rows.schema, rejects=rejects.schema, write=write)


def _write(rows: pa.Table, table: TableTarget, target: DirectWrite) -> WrittenTable:
    stamped = rows.append_column(
        EPOCH_COLUMN, pa.repeat(pa.scalar(target.epoch, pa.int64()), rows.num_rows)
    ).cast(table.schema)
    files = write_arrow(
        stamped, table.location, partition_by=table.partition_by, file_prefix=target.file_prefix
    )
    return WrittenTable(table.schema, tuple(files))


def _runner(tmp_path: Path, spark, source: DirectSource, *, mode: str = "append", transform=None):
    pipeline = Pipeline("direct")
    pipeline.job(
        "ingest",
        output="facts",
        source=source,
        mode=mode,  # type: ignore[arg-type]
        keys=("k",) if mode == "merge" else (),
        partition_by=("k",),
        rejects="rejects",
    )(transform)
    warehouse = tmp_path / "warehouse"
    runner = Runner(
        pipeline,
        catalog=load_catalog(None, warehouse=warehouse),
        warehouse=str(warehouse),
        spark=spark,
    )
    runner.register()
    return runner


def _table(runner: Runner, name: str) -> DeltaTable:
    return DeltaTable(runner.catalog.get_table(name).location)


def _paths(runner: Runner, name: str) -> set[str]:
    return set(pa.table(_table(runner, name).get_add_actions()).column("path").to_pylist())


def _rows(runner: Runner, name: str, columns: Sequence[str]) -> list[tuple]:
    reader = snapshot(runner.catalog, [name], "read-committed", spark=runner.spark)
    return sorted(tuple(r) for r in reader.table(name).select(*columns).collect())


def _commits(runner: Runner, name: str) -> list[tuple]:
    location = runner.catalog.get_table(name).location
    return [(c.epoch, c.attempt, c.part, c.final) for c in log_commits(location) if c.epoch]


RECORDS: list[list[object] | None] = [["a", 1], None, ["b", 2], ["c", 3], None]


def test_a_copying_root_commits_the_files_its_source_wrote_part_by_part(tmp_path, spark):
    source = DirectSource("feed")
    runner = _runner(tmp_path, spark, source)
    source.pending = list(RECORDS)

    result = runner.run_once()

    assert result.ok, result.failures
    assert [t.file_prefix for t in source.targets] == ["1-1-0", "1-1-1", "1-1-2"]
    assert {t.epoch for t in source.targets} == {1}
    target = source.targets[0]
    assert target.rows.partition_by == ("k",) and target.rejects is not None
    assert target.rejects.partition_by == ()  # a side output is not partitioned
    assert target.rows.schema.names == ["k", "v", EPOCH_COLUMN]
    assert target.rejects.schema.names == ["record", EPOCH_COLUMN]
    assert _paths(runner, "facts") == {f.path for w in source.written for f in w.rows.files}
    assert _paths(runner, "rejects") == {
        f.path
        for w in source.written
        for f in w.rejects.files  # type: ignore[union-attr]
    }
    assert _rows(runner, "facts", ["k", "v", EPOCH_COLUMN]) == [
        ("a", 1, 1),
        ("b", 2, 1),
        ("c", 3, 1),
    ]
    assert _rows(runner, "rejects", ["record", EPOCH_COLUMN]) == [("0", 1), ("1", 1)]
    # A micro-batch without rows (or rejects) commits none to their table: it exists.
    assert _commits(runner, "facts") == [(1, 1, 0, False), (1, 1, 1, False)]
    assert _commits(runner, "rejects") == [(1, 1, 0, False), (1, 1, 2, True)]
    (batch,) = result.batches
    assert (batch.rows, batch.rejected) == (3, 2)


@pytest.mark.parametrize("other", ["transform", "merge"])
def test_a_root_that_transforms_or_merges_writes_its_frames(tmp_path, spark, other):
    source = DirectSource("feed")
    if other == "transform":
        runner = _runner(tmp_path, spark, source, transform=lambda ctx: ctx["feed"])
    else:
        runner = _runner(tmp_path, spark, source, mode="merge")
    source.pending = list(RECORDS)

    assert runner.run_once().ok

    assert source.targets == []
    assert _rows(runner, "facts", ["k", "v"]) == [("a", 1), ("b", 2), ("c", 3)]
    assert len(_rows(runner, "rejects", ["record"])) == 2


@pytest.mark.parametrize(
    ("point", "nth"),
    [("between_micro_batches", 1), ("after_commit", 1), ("before_commit", 4)],
)
def test_a_crash_during_direct_writes_is_replayed_once(tmp_path, spark, point, nth):
    """Crashes after a micro-batch, after the first rejects' commit (before its rows'),
    and before the last micro-batch's commit (of its rejects: the fourth commit)."""
    source = DirectSource("feed")
    runner = _runner(tmp_path, spark, source)
    source.pending = list(RECORDS)
    with crash_at(point, nth=nth), pytest.raises(SimulatedCrash):
        runner.run_once()

    result = runner.run_once()

    assert result.ok, result.failures
    assert _rows(runner, "facts", ["k", "v"]) == [("a", 1), ("b", 2), ("c", 3)]
    assert _rows(runner, "rejects", ["record"]) == [("0",), ("1",)]
    assert "1-2-2" in [t.file_prefix for t in source.targets]  # the replay wrote directly
