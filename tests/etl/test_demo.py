"""``make demo`` (``python -m examples.shop.demo``): it runs clean, repeatable-read never sees detail
and totals disagree, and every malformed message ends up in the rejects table."""

from __future__ import annotations

import re

import pytest
from deltalake import DeltaTable

from examples.shop.demo import MARKER, DemoError, commit_line, main, prepare_warehouse

ROW = re.compile(
    r"│ (read-uncommitted|read-committed|repeatable-read)\s*│\s*(\d+)\s*│\s*(\d+|-)\s*│"
    r"\s*(\d+)\s*│\s*(\d+)\s*│"
)


def tallies(stdout: str) -> dict[str, tuple[int, int, int]]:
    """level -> (snapshots, disagreeing snapshots, rows off), from the printed table."""
    return {m[1]: (int(m[2]), int(m[4]), int(m[5])) for m in ROW.finditer(stdout)}


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.spark
def test_the_demo_runs_clean_and_repeatable_read_never_disagrees(demo_run):
    assert demo_run.returncode == 0, demo_run.explain()
    seen = tallies(demo_run.stdout)
    assert set(seen) == {"read-uncommitted", "read-committed", "repeatable-read"}, demo_run.stdout
    snapshots, disagreeing, rows_off = seen["repeatable-read"]
    assert snapshots > 0, "the checker never read at repeatable-read"
    assert (disagreeing, rows_off) == (0, 0), demo_run.stdout
    assert "demo ok" in demo_run.stdout


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.spark
def test_every_malformed_message_is_a_reject(demo_run):
    assert demo_run.returncode == 0, demo_run.explain()
    malformed = int(re.search(r"(\d+) malformed messages in", demo_run.stdout)[1])
    assert malformed > 0
    rejects = DeltaTable(str(demo_run.warehouse / "orders_rejects")).to_pyarrow_table()
    assert rejects.num_rows == malformed
    assert set(rejects.column("reason").to_pylist()) == {"decode", "schema"}


def test_a_previous_demo_warehouse_is_replaced(tmp_path):
    warehouse = tmp_path / "warehouse"
    assert prepare_warehouse(warehouse) == "new warehouse"
    (warehouse / "orders").mkdir()
    assert prepare_warehouse(warehouse) == "replaced the previous demo's warehouse"
    assert sorted(p.name for p in warehouse.iterdir()) == [MARKER]


def test_a_directory_the_demo_did_not_make_is_never_deleted(tmp_path, capsys):
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "data.csv").write_text("1,2\n")
    with pytest.raises(DemoError, match="refusing to delete"):
        prepare_warehouse(precious)
    assert main(["--seconds", "1", "--warehouse", str(precious)]) == 2
    said = capsys.readouterr()
    assert "refusing to delete" in said.err and "refusing" not in said.out
    assert (precious / "data.csv").read_text() == "1,2\n"


def test_a_demo_warehouse_holding_other_tables_needs_replace(tmp_path):
    warehouse = tmp_path / "demo-warehouse"
    prepare_warehouse(warehouse)
    (warehouse / "orders").mkdir()
    (warehouse / "word_counts").mkdir()  # e.g. the README's tour, run into it
    with pytest.raises(DemoError, match="holds more than a previous demo .*word_counts.*--replace"):
        prepare_warehouse(warehouse)
    assert (warehouse / "word_counts").is_dir()
    assert prepare_warehouse(warehouse, replace=True) == "replaced the previous demo's warehouse"
    assert sorted(p.name for p in warehouse.iterdir()) == [MARKER]


def test_a_commit_after_coalesced_epochs_says_so():
    assert commit_line(2, 1) == "  epoch 2 committed"
    assert "epochs 2..5 coalesced into it" in commit_line(6, 1)
    assert "epoch 2 coalesced into it" in commit_line(3, 1)
    assert "caught up in one batch" in commit_line(6, 1)
