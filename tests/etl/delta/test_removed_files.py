"""A cut whose files another tool removed (a VACUUM with zero retention) fails with an
error that says what happened and what still reads, on every read path (issue 27)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from etl.delta.read import missing_files
from etl.errors import FilesRemovedError
from etl.reader import snapshot


def _overwritten(tmp_path: Path, epochs: int):
    """Table ``facts`` overwritten by each of ``epochs`` epochs (epoch e at version e-1)."""
    warehouse = tmp_path / "warehouse"
    location = str(warehouse / "facts")
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(epochs):
        epoch = catalog.open_epoch().id
        write_deltalake(location, pa.table({"id": [epoch]}), mode="overwrite")
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    return catalog, location


def _says_what_happened(error: FilesRemovedError, *, still: str) -> None:
    assert (error.table, error.version, error.epoch) == ("facts", 0, 1)
    assert "removed outside Delta Barrier's retention" in str(error)
    assert "VACUUM" in str(error) and still in str(error), str(error)


def test_a_foreign_vacuum_is_named_on_every_path_without_spark(tmp_path):
    catalog, location = _overwritten(tmp_path, 3)
    assert missing_files(location, 0) == []
    DeltaTable(location).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert missing_files(location, 0) and not missing_files(location, 2)
    latest = "the latest repeatable-read cut (epoch 3)"
    with snapshot(catalog, ["facts"], as_of_epoch=1) as snap:
        for read in (
            lambda: snap.arrow("facts"),
            lambda: snap.polars("facts"),
            lambda: snap.pandas("facts"),
            snap.duckdb,
            lambda: snap.query("SELECT * FROM facts"),
        ):
            with pytest.raises(FilesRemovedError) as raised:
                read()
            _says_what_happened(raised.value, still=latest)
    # the latest cut still reads, on every path
    with snapshot(catalog, ["facts"]) as snap:
        assert snap.arrow("facts")["id"].to_pylist() == [3]
        assert snap.duckdb().sql("SELECT id FROM facts").fetchall() == [(3,)]
    catalog.close()


def test_the_nearest_intact_cut_is_named(tmp_path):
    catalog, location = _overwritten(tmp_path, 4)
    for path in set(_files(location, 0)) - set(_files(location, 1)):
        Path(path).unlink()  # only version 0's own file goes
    with snapshot(catalog, ["facts"], as_of_epoch=1) as snap, pytest.raises(FilesRemovedError):
        snap.arrow("facts")
    with pytest.raises(FilesRemovedError) as raised:
        snapshot(catalog, ["facts"], as_of_epoch=1).query("SELECT count(*) FROM facts")
    _says_what_happened(raised.value, still="epoch 2, the nearest intact cut after it")
    assert "the latest repeatable-read cut (epoch 4)" in str(raised.value)
    catalog.close()


@pytest.mark.spark
def test_a_foreign_vacuum_is_named_on_the_spark_path(tmp_path, spark):
    catalog, location = _overwritten(tmp_path, 2)
    DeltaTable(location).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with snapshot(catalog, ["facts"], as_of_epoch=1, spark=spark) as snap:
        with pytest.raises(FilesRemovedError) as raised:
            snap.sql("SELECT * FROM facts").collect()
        _says_what_happened(raised.value, still="the latest repeatable-read cut (epoch 2)")
        with pytest.raises(FilesRemovedError):
            snap.query("SELECT * FROM facts", engine="spark")
    catalog.close()


def _files(location: str, version: int) -> list[str]:
    return [
        str(Path(uri.removeprefix("file://")))
        for uri in DeltaTable(location, version=version).file_uris()
    ]


def test_a_foreign_vacuum_is_named_on_a_table_with_deletion_vectors(tmp_path):
    """A merge job's table has the deletionVectors feature (the default strategy): its
    Arrow read goes through delta-rs' scan, which fails with ArrowInvalid, not OSError."""
    warehouse = tmp_path / "warehouse"
    location = str(warehouse / "facts")
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(3):
        epoch = catalog.open_epoch().id
        write_deltalake(
            location,
            pa.table({"id": [epoch]}),
            mode="overwrite",
            configuration={"delta.enableDeletionVectors": "true"},
        )
        if version == 0:
            # delta-rs adds the variantType feature, which this runtime refuses to read.
            first = Path(location) / "_delta_log" / f"{0:020d}.json"
            actions = [json.loads(line) for line in first.read_text().splitlines()]
            for action in actions:
                for features in action.get("protocol", {}).values():
                    if isinstance(features, list) and "variantType" in features:
                        features.remove("variantType")
            first.write_text("".join(json.dumps(a) + "\n" for a in actions))
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    assert "deletionVectors" in (DeltaTable(location).protocol().reader_features or [])
    DeltaTable(location).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with snapshot(catalog, ["facts"], as_of_epoch=1) as snap:
        for read in (lambda: snap.arrow("facts"), lambda: snap.polars("facts")):
            with pytest.raises(FilesRemovedError) as raised:
                read()
            _says_what_happened(raised.value, still="the latest repeatable-read cut (epoch 3)")
    with snapshot(catalog, ["facts"]) as snap:
        assert snap.arrow("facts")["id"].to_pylist() == [3]
    catalog.close()
