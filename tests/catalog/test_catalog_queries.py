"""The latest-state lookups stay index descents however long the history grows."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from catalog import EpochState, TableEpoch, load_catalog
from catalog.schema import epochs_table, table_epochs_table, tables_table

TABLES = 10
EPOCHS = 500


def populate(catalog) -> None:
    """TABLES tables x EPOCHS WRITTEN epochs, inserted directly; table_k lags k epochs."""
    now = datetime.now(UTC)
    with catalog._engine.begin() as conn:
        conn.execute(
            epochs_table.insert(),
            [{"id": e, "barrier_ts": now, "created_at": now} for e in range(1, EPOCHS + 1)],
        )
        conn.execute(
            tables_table.insert(),
            [
                {
                    "name": f"table_{k}",
                    "location": f"/w/table_{k}",
                    "kind": "root",
                    "partition_by": "[]",
                    "first_epoch": 1,
                    "created_at": now,
                }
                for k in range(TABLES)
            ],
        )
        conn.execute(
            table_epochs_table.insert(),
            [
                {
                    "table_name": f"table_{k}",
                    "epoch": e,
                    "state": EpochState.WRITTEN.value,
                    "delta_version": e,
                    "attempt": 1,
                    "updated_at": now,
                }
                for k in range(TABLES)
                for e in range(1, EPOCHS - k + 1)
            ],
        )
        if catalog.backend == "postgresql":
            conn.exec_driver_sql("ANALYZE")


def plans(catalog, names: list[str]) -> dict[str, str]:
    """The query plan text of each prepared latest-state statement."""
    found = {}
    with catalog._engine.connect() as conn:
        for query, statement in catalog._latest_statements.items():
            compiled = statement.compile(conn)
            params = compiled.construct_params(
                {
                    "names": names if catalog.backend == "postgresql" else json.dumps(names),
                    "at_or_before": EPOCHS // 2,
                }
            )
            if catalog.backend == "postgresql":
                rows = conn.exec_driver_sql("EXPLAIN " + str(compiled), params)
            else:
                rows = conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + str(compiled),
                    tuple(params[name] for name in compiled.positiontup),
                )
            found[query] = "\n".join(str(row[-1]) for row in rows)
    return found


def test_latest_lookups_answer_from_a_long_history(catalog_url):
    catalog = load_catalog(catalog_url)
    populate(catalog)
    names = [f"table_{k}" for k in range(TABLES)]
    latest = catalog.latest_written(names)
    assert {t: s.epoch for t, s in latest.items()} == {
        f"table_{k}": EPOCHS - k for k in range(TABLES)
    }
    assert catalog.latest_written(names, at_or_before=EPOCHS - 5)["table_3"].epoch == EPOCHS - 5
    assert catalog.latest_written(names, at_or_before=EPOCHS - 5)["table_9"].epoch == EPOCHS - 9
    assert catalog.latest_processed(names)["table_0"].epoch == EPOCHS
    catalog.close()


def test_latest_lookups_never_scan_the_history(catalog_url):
    catalog = load_catalog(catalog_url)
    populate(catalog)
    for query, plan in plans(catalog, ["table_0", "table_1"]).items():
        if catalog.backend == "postgresql":
            assert "Seq Scan on table_epochs" not in plan, (query, plan)
            if query != "validation":
                # max(epoch) is one backward index descent (PostgreSQL picks the index
                # from its statistics: ix_table_epochs_state or the primary key).
                assert "Scan Backward using" in plan, (query, plan)
                assert "Index Scan using table_epochs_pkey" in plan, (query, plan)
        else:
            assert "SCAN table_epochs" not in plan and "SCAN x" not in plan, (query, plan)
            assert "SCAN validations" not in plan, (query, plan)
            if query != "validation":
                assert "USING COVERING INDEX ix_table_epochs_state" in plan, (query, plan)
                assert "SEARCH table_epochs USING PRIMARY KEY" in plan, (query, plan)
    catalog.close()


@pytest.mark.parametrize("missing", [[], ["ghost"]])
def test_latest_lookups_of_unknown_tables_are_empty(catalog, missing):
    assert catalog.latest_written(missing) == {}
    assert catalog.latest_processed(missing) == {}


def test_epoch_state_rows_are_in_table_epoch_field_order():
    # SqlCatalog builds TableEpoch values positionally from table_epochs rows.
    columns = [column.name for column in table_epochs_table.columns]
    assert columns == ["table_name", *[field.name for field in fields(TableEpoch)][1:]]
