"""``etl snapshot --format duckdb`` over a table whose job never committed (issue 27, item
2): the script could not ATTACH a Delta table that does not exist, so the command refuses
(exit 2, naming the table), instead of printing a script that fails in DuckDB."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from deltalake import write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from tests.support.cli_runner import etl_here as etl


def test_a_table_never_written_is_refused_and_the_others_script_runs(tmp_path):
    warehouse = tmp_path / "wh"
    catalog = load_catalog(None, warehouse=warehouse)
    written = str(warehouse / "written")
    catalog.register_table(TableSpec("written", written, kind="root"))
    catalog.register_job(JobSpec("ingest", output="written", source="feed"))
    catalog.register_table(TableSpec("never", str(warehouse / "never")))
    catalog.register_job(JobSpec("derive", output="never", inputs=("written",)))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    write_deltalake(written, pa.table({"id": [1, 2]}))
    catalog.seal("ingest", lease.generation, [SealRequest("written", epoch, 0, rows=2)])
    catalog.close()
    where = ("--warehouse", warehouse, "--consistency", "read-committed", "--format", "duckdb")

    refused = etl("snapshot", "written", "never", *where, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "no Delta table yet for 'never'" in refused.stderr and refused.stdout == ""

    script = etl("snapshot", "written", *where, cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    con = duckdb.connect()
    con.execute(script.stdout)
    assert con.sql("SELECT count(*) FROM written").fetchone() == (2,)
