"""Every notebook in notebooks/ runs top to bottom on the demo's warehouse."""

from __future__ import annotations

import sys

import nbformat
import pytest

from tests.support.notebooks import NOTEBOOKS, run_notebook

pytestmark = pytest.mark.slow


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ has no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_saved_without_outputs(path):
    cells = nbformat.read(path, as_version=4).cells
    assert [c for c in cells if c.cell_type == "code" and (c.outputs or c.execution_count)] == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, demo_run, monkeypatch):
    assert demo_run.returncode == 0, demo_run.explain()
    monkeypatch.setenv("ETL_WAREHOUSE", str(demo_run.warehouse))
    monkeypatch.delenv("ETL_CATALOG_URL", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    run_notebook(path)
