"""A DeltaTableSource over a table of another pipeline of the same catalog reads only
what that pipeline sealed; over a foreign table, its latest version (real Spark, Delta
files and SQLite catalog, runners in process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import great_expectations as gx
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from catalog import EpochState, load_catalog
from etl import DeltaTableSource, FileSource, Pipeline, Runner, snapshot
from etl.engine import resolve as resolving
from etl.quality import QualityGate

pytestmark = [pytest.mark.spark, pytest.mark.quality, pytest.mark.slow]

SCHEMA = "id INT, amount DOUBLE"


def team_a(incoming: Path) -> Pipeline:
    """Ingests orders; a block gate keeps an epoch with a negative amount PROCESSED."""
    pipeline = Pipeline("team_a")
    pipeline.ingest(
        "ingest_orders",
        source=FileSource("order_files", path=incoming, format="json", schema=SCHEMA),
        output="orders",
    )
    pipeline.expect(
        QualityGate(
            "orders",
            [gx.expectations.ExpectColumnValuesToBeBetween(column="amount", min_value=0)],
            policy="block",
        )
    )
    return pipeline


def team_b(orders_location: str, foreign_location: str) -> Pipeline:
    pipeline = Pipeline("team_b")
    pipeline.ingest(
        "mirror_orders", source=DeltaTableSource("a_orders", path=orders_location), output="mirror"
    )
    pipeline.ingest(
        "mirror_outside",
        source=DeltaTableSource("outside", path=foreign_location),
        output="outside_mirror",
    )
    return pipeline


def test_a_table_of_another_pipeline_is_read_only_as_far_as_it_is_sealed(tmp_path, spark):
    warehouse = tmp_path / "warehouse"
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    foreign = str(tmp_path / "outside")
    catalog = load_catalog(None, warehouse=warehouse)
    a = Runner(team_a(incoming), catalog=catalog, warehouse=str(warehouse), spark=spark)
    drops = iter(range(1, 100))

    def drop(*rows: tuple[int, float]) -> None:
        name = incoming / f"{next(drops):03d}.json"
        hidden = incoming / f".{name.name}"
        hidden.write_text("".join(json.dumps({"id": i, "amount": x}) + "\n" for i, x in rows))
        os.replace(hidden, name)

    def ids(table: str) -> list[int]:
        reader = snapshot(catalog, [table], "read-committed", spark=spark)
        return sorted(r["id"] for r in reader.table(table).collect())

    def resolve(epoch: int, action) -> None:
        lease = catalog.acquire_lease("ingest_orders", "test", ttl_seconds=60)
        try:
            action(
                catalog,
                resolving.blocked_epoch(catalog, "orders", epoch),
                lease,
                actor="test",
                reason="test",
            )
        finally:
            catalog.release_lease(lease)

    def run_b() -> None:
        result = b.run_once()
        assert result.ok, [f.error for f in result.failures]

    # A's first epoch is blocked: nothing of orders is sealed, its rows are in the table.
    drop((3, -1.0))
    first = a.run_once()
    assert [x.job for x in first.blocked] == ["ingest_orders"]
    (blocked,) = catalog.latest_processed(["orders"]).values()
    assert blocked.state is EpochState.PROCESSED and catalog.latest_written(["orders"]) == {}
    write_deltalake(foreign, pa.table({"id": pa.array([100], pa.int32())}))
    b = Runner(
        team_b(catalog.get_table("orders").location, foreign),
        catalog=catalog,
        warehouse=str(warehouse),
        spark=spark,
    )
    run_b()
    assert ids("mirror") == []  # not the unsealed 3
    assert catalog.latest_slice("a_orders").bounds == {"from_version": None, "to_version": None}
    assert ids("outside_mirror") == [100]  # a foreign table: its latest version

    # A skips the epoch (a RESTORE removes its file): B goes on, having never read it.
    resolve(blocked.epoch, resolving.skip)
    run_b()
    assert ids("mirror") == []

    # A seals an epoch: B reads it. The foreign table's new version is read too.
    drop((1, 5.0), (2, 7.0))
    assert a.run_once().ok
    write_deltalake(foreign, pa.table({"id": pa.array([101], pa.int32())}), mode="append")
    run_b()
    assert ids("mirror") == [1, 2]
    assert ids("outside_mirror") == [100, 101]

    # A's next epoch is blocked again: B takes nothing new (an empty slice at the sealed
    # version), although the table's latest version holds the row.
    drop((5, -2.0))
    assert [x.job for x in a.run_once().blocked] == ["ingest_orders"]
    uncommitted = snapshot(catalog, ["orders"], "read-uncommitted", spark=spark)
    assert sorted(r["id"] for r in uncommitted.table("orders").collect()) == [1, 2, 5]
    run_b()
    assert ids("mirror") == [1, 2]
    bounds = catalog.latest_slice("a_orders").bounds
    assert bounds["to_version"] == bounds["from_version"] is not None

    # Once A's epoch is sealed (accepted), B reads its rows, once.
    (held,) = catalog.latest_processed(["orders"]).values()
    resolve(held.epoch, resolving.accept)
    run_b()
    run_b()
    assert ids("mirror") == [1, 2, 5]
    assert ids("outside_mirror") == [100, 101]
    catalog.close()
