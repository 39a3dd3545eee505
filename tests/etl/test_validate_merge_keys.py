"""A merge SQL job's keys must be among its result's columns (issue 24, item 3: write modes
and keys make sense), found at validation, before Spark starts, when the SQL names every
result column; a ``*`` or an unnamed expression leaves it to the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from etl.validation import validate_file

MERGE = """
from etl import FileSource, Pipeline

pipeline = Pipeline("team")
pipeline.ingest("ingest", source=FileSource("drops", path={drops!r}), output="lines")
pipeline.sql("count", output="counts", inputs=["lines"], mode="merge", keys={keys!r},
             query={query!r})
"""


@pytest.mark.parametrize(
    ("keys", "query", "problem"),
    [
        (["nope"], "SELECT value, count(*) AS n FROM lines GROUP BY value", True),
        (["VALUE"], "SELECT value, count(*) AS n FROM lines GROUP BY value", False),
        (["n"], "SELECT l.value AS v, count(*) AS n FROM lines l GROUP BY l.value", False),
        (["nope"], "SELECT * FROM lines", False),
        (["nope"], "SELECT value, count(*) FROM lines GROUP BY value", False),
    ],
)
def test_merge_keys_not_in_the_sql_result_are_a_problem(tmp_path: Path, keys, query, problem):
    file = tmp_path / "pipeline.py"
    file.write_text(MERGE.format(drops=str(tmp_path), keys=keys, query=query))
    found = [str(p) for p in validate_file(file, {}).problems]
    if problem:
        assert found == [
            "job 'count': merges on keys ['nope'], which its SQL's result does not have "
            "(its columns: value, n): select them, or fix keys=[...]"
        ]
    else:
        assert found == []
