"""Tags through the real ``etl`` command (issue 11): create, list, read with ``--as-of-tag``
(``sql`` and ``snapshot``), a tag keeps its cut from expiring, a tag on an expired epoch is
refused naming the rule, and a deleted tag is a clear error. No Spark: the reads use DuckDB;
the command runs in the test process."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from tests.support.cli_runner import etl_here as etl

pytestmark = pytest.mark.retention


def _history(tmp_path):
    """Table ``facts`` with epochs 1..4 sealed at Delta versions 0..3; one row per epoch."""
    warehouse = tmp_path / "warehouse"
    location = str(warehouse / "facts")
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(4):
        epoch = catalog.open_epoch().id
        write_deltalake(
            location,
            pa.table({"id": [epoch], "_epoch": pa.array([epoch], pa.int64())}),
            mode="append",
        )
        assert DeltaTable(location).version() == version
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version, rows=1)])
    return warehouse, catalog


def test_tag_create_list_read_expire_and_delete(tmp_path):
    warehouse, catalog = _history(tmp_path)
    wh = ("--warehouse", warehouse)

    created = etl("tag", "create", "before-migration", "--epoch", "2", *wh, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "tag before-migration -> epoch 2" in created.stdout
    again = etl("tag", "create", "before-migration", "--epoch", "3", *wh, cwd=tmp_path)
    assert again.returncode == 2 and "before-migration" in again.stderr, again.stderr

    listed = etl("tag", "list", "--format", "json", *wh, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [tag] = json.loads(listed.stdout)
    assert (tag["name"], tag["epoch"], tag["versions"]) == ("before-migration", 2, {"facts": 1})

    query = "SELECT id FROM facts ORDER BY id"
    at_tag = etl(
        "sql", query, "--as-of-tag", "before-migration", "--format", "json", *wh, cwd=tmp_path
    )
    at_epoch = etl("sql", query, "--as-of-epoch", "2", "--format", "json", *wh, cwd=tmp_path)
    assert at_tag.returncode == at_epoch.returncode == 0, at_tag.stderr + at_epoch.stderr
    assert json.loads(at_tag.stdout) == json.loads(at_epoch.stdout) == [{"id": 1}, {"id": 2}]
    cut = etl(
        "snapshot",
        "facts",
        "--as-of-tag",
        "before-migration",
        "--format",
        "json",
        *wh,
        cwd=tmp_path,
    )
    assert cut.returncode == 0, cut.stderr
    described = json.loads(cut.stdout)
    assert described["epoch"] == 2
    assert [(t["table"], t["version"]) for t in described["tables"]] == [("facts", 1)]
    both = etl(
        "sql", query, "--as-of-tag", "before-migration", "--as-of-epoch", "2", *wh, cwd=tmp_path
    )
    assert both.returncode == 2 and "--as-of-tag" in both.stderr, both.stderr

    # retention skips the tagged epoch; the untagged one expires and cannot be tagged
    assert catalog.expire_epochs([1, 2], rule="every epoch for 1h") == [1]
    refused = etl("tag", "create", "old", "--epoch", "1", *wh, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "epoch 1" in refused.stderr and "every epoch for 1h" in refused.stderr
    expired = etl("sql", query, "--as-of-epoch", "1", *wh, cwd=tmp_path)
    assert expired.returncode == 2 and "every epoch for 1h" in expired.stderr, expired.stderr

    deleted = etl("tag", "delete", "before-migration", *wh, cwd=tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    gone = etl("sql", query, "--as-of-tag", "before-migration", *wh, cwd=tmp_path)
    assert gone.returncode == 2 and "before-migration" in gone.stderr, gone.stderr
    listed = etl("tag", "list", "--format", "json", *wh, cwd=tmp_path)
    assert json.loads(listed.stdout) == []
    # the epoch the tag protected may now expire
    assert catalog.expire_epochs([2], rule="every epoch for 1h") == [2]
    catalog.close()
