"""A table no job of the pipeline file writes any more (here the quarantine table of a
gate that was removed) would hold the pipeline's COMMIT back for ever: ``etl run`` and
``etl status`` report it with the command that retires it, and once retired COMMIT goes on
(issue 12, "Pipelines in the catalog"). Through the real ``etl`` command, run in the test
process (on the session's SparkSession)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli_runner import etl_here as etl
from tests.support.pipeline_files import BLOCK_GATED_INGEST, INGEST


def _drop(directory: Path, name: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}.tmp"
    hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(hidden, directory / name)


def _status(warehouse: Path, cwd: Path) -> dict:
    result = etl("status", "--format", "json", "--warehouse", warehouse, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.spark
def test_a_table_no_job_writes_is_reported_until_retired(tmp_path, spark):
    warehouse, drops, shop = tmp_path / "wh", tmp_path / "drops", tmp_path / "shop.py"
    run = ("run", shop, "--once", "--format", "json", "--warehouse", warehouse)
    run += ("--param", f"dir={drops}")
    shop.write_text(BLOCK_GATED_INGEST)
    _drop(drops, "a.json", [{"id": 1, "amount": 1.0}])
    first = etl(*run, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["undeclared_tables"] == []
    (pipeline,) = _status(warehouse, tmp_path)["pipelines"]
    assert pipeline["last_commit"] == 1

    shop.write_text(INGEST)  # the gate, and with it its quarantine table, is gone
    _drop(drops, "b.json", [{"id": 2, "amount": 2.0}])
    second = etl(*run, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["undeclared_tables"] == ["orders_quarantine"]
    assert "etl retire table orders_quarantine" in second.stderr
    report = _status(warehouse, tmp_path)
    (pipeline,) = report["pipelines"]
    assert pipeline["last_commit"] == 1  # held back: the quarantine table never seals 2
    tables = {t["table"]: t for t in report["tables"]}
    assert tables["orders_quarantine"]["orphaned"] == "etl retire table orders_quarantine"
    assert tables["orders"]["orphaned"] is None
    shown = etl("status", "--warehouse", warehouse, cwd=tmp_path, COLUMNS="200")
    assert "etl retire table orders_quarantine" in shown.stdout, shown.stdout

    retired = etl("retire", "table", "orders_quarantine", "--warehouse", warehouse, cwd=tmp_path)
    assert retired.returncode == 0, retired.stderr
    _drop(drops, "c.json", [{"id": 3, "amount": 3.0}])
    third = etl(*run, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["undeclared_tables"] == []
    (pipeline,) = _status(warehouse, tmp_path)["pipelines"]
    assert pipeline["last_commit"] == 3  # COMMIT goes on without the retired table
    sql = etl(
        "sql",
        "SELECT id FROM orders ORDER BY id",
        "--format",
        "json",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
    )
    assert [r["id"] for r in json.loads(sql.stdout)] == [1, 2, 3], sql.stderr
