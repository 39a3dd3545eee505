"""``etl validate`` refuses what ``etl run`` would refuse at registration (issue 24, items 1
and 3): a job or source name another pipeline owns, an input table of another pipeline.
A file that validates must not then be refused by the run, on SQLite and PostgreSQL; no
JVM starts and the catalog stays as it was."""

from __future__ import annotations

import pytest

from catalog import JobSpec, TableSpec, load_catalog
from tests.support.cli_runner import etl

TEAM_B = """
from etl import FileSource, Pipeline

pipeline = Pipeline("team_b")
pipeline.ingest("ingest", source=FileSource("files", path={drops!r}), output="b_lines")
"""

TEAM_C = """
from etl import Pipeline

pipeline = Pipeline("team_c")
pipeline.sql("copy", output="c_lines", inputs=["a_lines"], query="SELECT * FROM a_lines")
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_validate_refuses_names_and_inputs_of_another_pipeline(tmp_path, backend, request):
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    warehouse = tmp_path / "wh"
    catalog = load_catalog(url, warehouse=warehouse)
    catalog.register_pipeline(
        "team_a",
        [TableSpec(name="a_lines", location=str(warehouse / "a_lines"), kind="root")],
        [JobSpec(name="ingest", output="a_lines", source="files")],
    )
    before = [(t.name, t.pipeline) for t in catalog.list_tables(include_retired=True)]
    drops = tmp_path / "drops"
    drops.mkdir()
    where = ["--warehouse", warehouse, *(["--catalog", url] if url else [])]
    env = {"JAVA_HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}

    team_b = tmp_path / "team_b.py"
    team_b.write_text(TEAM_B.format(drops=str(drops)))
    collision = etl("validate", team_b, *where, cwd=tmp_path, **env)
    assert collision.returncode == 2, collision.stderr
    assert "job 'ingest' (owned by pipeline 'team_a')" in collision.stderr, collision.stderr
    assert "source 'files' (owned by pipeline 'team_a')" in collision.stderr
    assert "pipeline 'team_b'" in collision.stderr

    team_c = tmp_path / "team_c.py"
    team_c.write_text(TEAM_C)
    foreign = etl("validate", team_c, *where, "--format", "json", cwd=tmp_path, **env)
    assert foreign.returncode == 2, foreign.stderr
    assert '"ok": false' in foreign.stdout and "DeltaTableSource('a_lines'" in foreign.stdout

    # The negative: the same file without another pipeline's names is valid.
    team_b.write_text(TEAM_B.format(drops=str(drops)).replace('"ingest"', '"ingest_b"'))
    team_b.write_text(team_b.read_text().replace('"files"', '"files_b"'))
    valid = etl("validate", team_b, *where, cwd=tmp_path, **env)
    assert valid.returncode == 0, valid.stderr
    assert [(t.name, t.pipeline) for t in catalog.list_tables(include_retired=True)] == before
