"""``etl resolve`` when a side output of the blocked job has no Delta table yet (a run
stopped between registering a gate's quarantine table and the audit that creates it): a
clear usage error that says what to do, and nothing is recorded or sealed."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from catalog import EpochState, JobSpec, TableSpec, load_catalog
from tests.support.cli_runner import etl_here as etl


@pytest.mark.parametrize("action", ["--accept", "--skip"])
def test_resolve_names_a_side_output_not_created_yet(tmp_path, action):
    warehouse = tmp_path / "wh"
    orders = str(warehouse / "orders")
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("orders", orders, kind="root", pipeline="shop"))
    catalog.register_table(
        TableSpec("orders_quarantine", str(warehouse / "q"), kind="quarantine", pipeline="shop")
    )
    catalog.register_job(
        JobSpec(
            "ingest",
            output="orders",
            source="drops",
            side_outputs=("orders_quarantine",),
            pipeline="shop",
        )
    )
    epoch = catalog.open_epoch(pipeline="shop").id
    write_deltalake(orders, pa.table({"id": [None], "_epoch": pa.array([epoch], pa.int64())}))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    catalog.record_processed(
        "orders", epoch, delta_version=0, job="ingest", attempt=1, generation=lease.generation
    )
    catalog.release_lease(lease)

    done = etl("resolve", "orders", str(epoch), action, "--warehouse", warehouse, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "orders_quarantine" in done.stderr and "etl run" in done.stderr, done.stderr
    assert "please report" not in done.stderr
    state = catalog.table_epoch("orders", epoch)
    assert (state.state, state.attempt) == (EpochState.PROCESSED, 1)
    assert catalog.resolutions("orders") == []
    assert DeltaTable(orders).version() == 0  # nothing restored or claimed
    assert catalog.latest_commit(pipeline="shop") is None
    catalog.close()
