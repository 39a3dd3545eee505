"""The Source contract, run against every root source (FileSource on a local directory
and on an S3 prefix, KafkaSource, DeltaTableSource): what the engine relies on to replay
an epoch exactly.

- a slice read twice gives the same rows;
- consecutive slices are contiguous: each record is in exactly one slice;
- a cut with nothing new gives an empty slice;
- micro-batches are a pure function of the bounds, and together read the slice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from etl import DeltaTableSource, FileSource, KafkaSource
from etl.sources.base import SealedTable, SliceRequest, Source
from etl.storage import filesystem

pytestmark = pytest.mark.spark


@dataclass
class World:
    """A source and a way to add records (ids) to what it reads."""

    source: Source
    add: Callable[[Sequence[int]], None]


def _files_in(incoming: str) -> World:
    """JSON files dropped under ``incoming`` (a directory or an object-store prefix)."""
    fs, root = filesystem(incoming)
    fs.create_dir(root)
    count = iter(range(1_000_000))

    def add(ids: Sequence[int]) -> None:
        for chunk in (ids[: len(ids) // 2], ids[len(ids) // 2 :]):
            if chunk:
                with fs.open_output_stream(f"{root}/{next(count):06d}.json") as out:
                    out.write("".join(json.dumps({"id": i}) + "\n" for i in chunk).encode())

    source = FileSource(
        "drops", path=incoming, format="json", schema="id LONG", files_per_micro_batch=1
    )
    return World(source, add)


def _files(tmp_path: Path, request) -> World:
    return _files_in(str(tmp_path / "incoming"))


def _files_on_s3(tmp_path: Path, request) -> World:
    """Spark's Hadoop here has no S3 file system: its tasks read the files through Arrow."""
    return _files_in(f"{request.getfixturevalue('s3_bucket')}/incoming")


def _delta_table(tmp_path: Path, request) -> World:
    location = str(tmp_path / "foreign")

    def add(ids: Sequence[int]) -> None:
        write_deltalake(location, pa.table({"id": pa.array(ids, pa.int64())}), mode="append")

    add([0])  # the table must exist before the source opens it; id 0 is in the first slice
    return World(DeltaTableSource("foreign", path=location), add)


def _kafka(tmp_path: Path, request) -> World:
    topic = request.getfixturevalue("kafka_topic")(partitions=2)
    produce = request.getfixturevalue("kafka_produce")
    bootstrap = request.getfixturevalue("kafka_bootstrap")

    def add(ids: Sequence[int]) -> None:
        produce(topic, [json.dumps({"id": i}).encode() for i in ids], partitions=2)

    source = KafkaSource(
        "events",
        topics=[topic],
        bootstrap_servers=bootstrap,
        schema="id long",
        max_records_per_micro_batch=3,
    )
    return World(source, add)


SOURCES = {
    "files": _files,
    "files_on_s3": pytest.param(_files_on_s3, marks=pytest.mark.s3),
    "delta_table": _delta_table,
    "kafka": pytest.param(_kafka, marks=pytest.mark.kafka),
}


@pytest.fixture(params=list(SOURCES.values()), ids=list(SOURCES))
def world(request, tmp_path: Path) -> Iterator[World]:
    yield request.param(tmp_path, request)


class Slices:
    """Cuts consecutive slices the way the engine does: each request carries the previous
    bounds, and the slices recorded so far (bounds of the slices after an epoch)."""

    def __init__(self, source: Source):
        self.source = source
        self.previous: Mapping[str, object] | None = None
        self.epoch = 0
        self.recorded: list[Mapping[str, object]] = []
        self.history = lambda after: self.recorded[after:]

    def cut(self) -> Mapping[str, object]:
        time.sleep(0.01)  # a barrier strictly after every record added so far
        self.epoch += 1
        bounds = self.source.cut(
            SliceRequest(
                epoch=self.epoch,
                first_epoch=self.epoch,
                barrier_ts=datetime.now(UTC),
                previous_bounds=self.previous,
                recorded=self.history,
            )
        )
        # Recorded in the catalog as JSON: what a replay gets back.
        bounds = json.loads(json.dumps(bounds))
        self.previous = bounds
        self.recorded.append(bounds)
        return bounds


def ids(spark, source: Source, bounds: Mapping[str, object], epoch: int = 1) -> list[int]:
    return sorted(row["id"] for row in source.read(spark, bounds, epoch=epoch).rows.collect())


def test_a_slice_read_twice_gives_the_same_rows(spark, world):
    world.add([1, 2, 3, 4, 5])
    bounds = Slices(world.source).cut()
    first = ids(spark, world.source, bounds)
    assert set(first) >= {1, 2, 3, 4, 5}
    world.add([6, 7])  # arrives after the cut: not in the recorded slice
    assert ids(spark, world.source, bounds) == first


def test_consecutive_slices_hold_every_record_once(spark, world):
    slices = Slices(world.source)
    world.add([1, 2, 3])
    first = ids(spark, world.source, slices.cut())
    world.add([4, 5, 6, 7])
    second = ids(spark, world.source, slices.cut(), epoch=2)
    assert set(first) >= {1, 2, 3} and not set(first) & {4, 5, 6, 7}
    assert second == [4, 5, 6, 7]


def test_a_cut_with_nothing_new_is_empty(spark, world):
    slices = Slices(world.source)
    world.add([1, 2])
    slices.cut()
    assert ids(spark, world.source, slices.cut(), epoch=2) == []


def test_micro_batches_are_deterministic_and_read_the_slice(spark, world):
    slices = Slices(world.source)
    world.add([1, 2, 3, 4, 5, 6, 7, 8])
    bounds = slices.cut()
    parts = world.source.micro_batches(bounds)
    assert [dict(p) for p in parts] == [dict(p) for p in world.source.micro_batches(bounds)]
    pieces = [ids(spark, world.source, part) for part in parts]
    assert sorted(i for piece in pieces for i in piece) == ids(spark, world.source, bounds)


def test_a_slice_size_is_known_and_never_understated_or_unknown(spark, world, tmp_path):
    """slice_bytes decides whether a batch runs with the small-batch settings: a size
    below what the slice holds would run a large slice on one shuffle partition."""
    slices = Slices(world.source)
    world.add(list(range(1, 200)))
    bounds = slices.cut()
    size = world.source.slice_bytes(bounds)
    if size is None:
        return  # unknown: the batch keeps Spark's defaults
    rows = world.source.read(spark, bounds, epoch=1).rows
    written = tmp_path / "as-json"
    rows.coalesce(1).write.json(str(written))
    assert size >= sum(f.stat().st_size for f in written.glob("part-*")) * 0.5


def test_a_file_slice_size_is_the_size_of_its_files_and_unknown_once_one_is_gone(tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "a.json").write_text('{"id": 1}\n')
    (incoming / "b.json").write_text('{"id": 22}\n{"id": 3}\n')
    source = FileSource("drops", path=incoming, format="json", schema="id LONG")
    assert source.slice_bytes({"files": ["a.json", "b.json"]}) == 10 + 21
    assert source.slice_bytes({"files": []}) == 0
    (incoming / "a.json").unlink()
    assert source.slice_bytes({"files": ["a.json", "b.json"]}) is None


def test_a_delta_table_of_the_catalog_is_cut_at_its_sealed_version_never_beyond(spark, tmp_path):
    """``SliceRequest.sealed`` (the engine's: a table of the catalog is at the source's
    location) caps the slice; without it the table's latest version is read."""
    world = _delta_table(tmp_path, None)
    world.add([1])  # version 1; the engine says only version 0 is sealed
    source = world.source
    assert source.table_location == source.path

    def cut(previous, sealed):
        request = SliceRequest(
            epoch=1,
            first_epoch=1,
            barrier_ts=datetime.now(UTC),
            previous_bounds=previous,
            sealed=None if sealed is False else SealedTable("a_words", sealed),
        )
        return source.cut(request)

    nothing = cut(None, None)
    assert nothing == {"from_version": None, "to_version": None}
    empty = source.read(spark, nothing, epoch=1).rows
    assert empty.count() == 0 and empty.columns == ["id"]
    first = cut(None, 0)
    assert first == {"from_version": None, "to_version": 0} and ids(spark, source, first) == [0]
    assert cut(first, 0) == {"from_version": 0, "to_version": 0}  # nothing new sealed
    assert ids(spark, source, cut(first, 0)) == []
    assert cut({"from_version": 0, "to_version": 1}, 0)["to_version"] == 1  # never backwards
    assert ids(spark, source, cut(first, 1)) == [1]
    assert cut(first, False) == {"from_version": 0, "to_version": 1}  # a foreign table
