"""A snapshot reads each table at its same-rows version (the newest version a compaction
reached from the cut's without changing a row), found from the Delta log: on local disk
read as files (no pyarrow), on an object store through its file system. Both read the
same rows in every engine the command line uses."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from etl.reader import QueryRows, snapshot
from etl.storage import storage_options


@pytest.fixture(params=["local", "s3"])
def location(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "numbers")
    return f"{request.getfixturevalue('s3_bucket')}/numbers"


def test_a_compacted_table_is_read_at_its_same_rows_version(location, tmp_path):
    catalog = load_catalog(None, warehouse=tmp_path / "wh")
    catalog.register_table(TableSpec("numbers", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="numbers", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    options = storage_options(location)
    for n in (1, 2, 3):  # versions 0 to 2, sealed at 2
        write_deltalake(location, pa.table({"n": [n]}), mode="append", storage_options=options)
    catalog.seal("ingest", lease.generation, [SealRequest("numbers", epoch, 2, rows=3)])
    table = DeltaTable(location, storage_options=options)
    table.optimize.compact()  # version 3: the same rows in one file (dataChange false)
    write_deltalake(location, pa.table({"n": [4]}), mode="append", storage_options=options)
    query = "SELECT n FROM numbers ORDER BY n"
    with snapshot(catalog, query) as snap:
        assert snap.versions == {"numbers": 2}
        assert snap.read_version("numbers") == 3  # never 4, which adds a row
        rows = snap.query_rows(query)
        assert rows == QueryRows(("n",), ((1,), (2,), (3,)))
        assert rows == QueryRows.from_arrow(snap.query(query))
    catalog.close()
