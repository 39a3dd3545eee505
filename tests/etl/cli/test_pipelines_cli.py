"""Two pipelines in one warehouse, through the real ``etl`` command, on SQLite and
PostgreSQL (issue 24, items 1, 2 and 6): names another pipeline owns are refused before
anything is written, a table of another pipeline is read through a DeltaTableSource, a
repeatable-read read across pipelines is aligned by barrier time, ``--pipeline`` filters,
and ``etl retire pipeline`` removes a pipeline.

One warehouse per backend (a module fixture); the tests assert on it in order, the last
one retires a pipeline. The command runs in the test process (on the session's
SparkSession): what is tested is what it does to a shared warehouse, not its process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from catalog import load_catalog
from tests.support.cli_runner import etl_here

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TEAM_A = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("team_a")
pipeline.ingest(
    "ingest", source=FileSource("files", path=param("dir"), column="word"), output="a_words"
)
"""

TEAM_B_COLLIDING = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("team_b")
pipeline.ingest(
    "ingest", source=FileSource("files", path=param("dir"), column="word"), output="b_words"
)
"""

TEAM_B = """
from etl import FileSource, Pipeline, param
from etl.sources.delta_table import DeltaTableSource

pipeline = Pipeline("team_b")
pipeline.ingest(
    "ingest_b", source=FileSource("files_b", path=param("dir"), column="word"), output="b_words"
)
feed = DeltaTableSource("a_feed", path=param("a_table"))
pipeline.ingest("mirror", source=feed, output="a_mirror")
"""

TEAM_C_READS_A = """
from etl import Pipeline

pipeline = Pipeline("team_c")
query = "SELECT upper(word) AS word FROM a_words"
pipeline.sql("upper", output="c_upper", inputs=["a_words"], query=query)
"""


@dataclass(frozen=True)
class Warehouse:
    root: Path
    where: tuple[str, ...]
    """--warehouse and, on PostgreSQL, --catalog."""
    catalog_url: str
    runs: dict[str, object]
    """What each step's command returned (CompletedProcess), by step."""

    def etl(self, *args: str | Path):
        return etl_here(*args, *self.where, cwd=self.root)

    def json(self, *args: str | Path):
        result = self.etl(*args, "--format", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def two_teams(request, tmp_path_factory, spark) -> Iterator[Warehouse]:
    """team_a runs (1.txt), team_b is refused (its job and source names are team_a's), team_c
    is refused (it reads team_a's table as an input), team_b renamed runs (its own files,
    and team_a's table through a DeltaTableSource), then team_a runs again (2.txt)."""
    root = tmp_path_factory.mktemp(f"two_teams_{request.param}")
    warehouse = root / "wh"
    where: tuple[str, ...] = ("--warehouse", str(warehouse))
    catalog_url = f"sqlite:///{warehouse / '_catalog.sqlite'}"
    schema = None
    if request.param == "postgres":
        import sqlalchemy as sa

        server = request.getfixturevalue("postgres_server")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(server)
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        catalog_url = f"{server}?options=-csearch_path%3D{schema}"
        where = (*where, "--catalog", catalog_url)
    files_a, files_b = root / "dA", root / "dB"
    _write(files_a / "1.txt", "apple\npear\n")
    _write(files_b / "1.txt", "fig\n")
    for name, text in (
        ("team_a", TEAM_A),
        ("team_b_colliding", TEAM_B_COLLIDING),
        ("team_b", TEAM_B),
        ("team_c", TEAM_C_READS_A),
    ):
        _write(root / f"{name}.py", text)
    context = Warehouse(root=root, where=where, catalog_url=catalog_url, runs={})
    run = ("run", "--once")
    context.runs["a1"] = context.etl(*run, root / "team_a.py", "--param", f"dir={files_a}")
    context.runs["b_colliding"] = context.etl(
        *run, root / "team_b_colliding.py", "--param", f"dir={files_b}"
    )
    context.runs["c"] = context.etl(*run, root / "team_c.py")
    context.runs["b"] = context.etl(
        *run,
        root / "team_b.py",
        "--param",
        f"dir={files_b}",
        "--param",
        f"a_table={warehouse / 'a_words'}",
    )
    _write(files_a / "2.txt", "kiwi\n")
    context.runs["a2"] = context.etl(*run, root / "team_a.py", "--param", f"dir={files_a}")
    yield context
    if schema is not None:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _rows(context: Warehouse, query: str, *args: str) -> list[dict]:
    result = context.etl("sql", query, "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_names_another_pipeline_owns_are_refused_and_nothing_is_lost(two_teams):
    for step in ("a1", "b", "a2"):
        assert two_teams.runs[step].returncode == 0, two_teams.runs[step].stderr
    refused = two_teams.runs["b_colliding"]
    assert refused.returncode == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    for words in ("'team_a'", "'team_b'", "job 'ingest'", "source 'files'", "Rename"):
        assert words in message, message
    # Nothing of team_b's refused run was registered, and team_a lost no row.
    catalog = load_catalog(two_teams.catalog_url, create=False)
    try:
        assert [p.name for p in catalog.list_pipelines()] == ["default", "team_a", "team_b"]
        assert {j.name: j.pipeline for j in catalog.list_jobs()} == {
            "ingest": "team_a",
            "ingest_b": "team_b",
            "mirror": "team_b",
        }
    finally:
        catalog.close()
    words = _rows(two_teams, "SELECT word FROM a_words ORDER BY word", "--consistency", "rc")
    assert [r["word"] for r in words] == ["apple", "kiwi", "pear"]
    assert [r["word"] for r in _rows(two_teams, "SELECT word FROM b_words")] == ["fig"]
    status = two_teams.json("status")
    assert {p["pipeline"] for p in status["pipelines"]} == {"team_a", "team_b"}
    for table in status["tables"]:
        assert table["orphaned"] is None and table["stale_job"] is None, table


def test_a_table_of_another_pipeline_is_read_through_a_delta_table_source(two_teams):
    refused = two_teams.runs["c"]
    assert refused.returncode == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    assert "'a_words' of pipeline 'team_a'" in message and "DeltaTableSource" in message
    assert "c_upper" not in [t["table"] for t in two_teams.json("status")["tables"]]
    mirrored = _rows(two_teams, "SELECT word FROM a_mirror ORDER BY word")
    assert [r["word"] for r in mirrored] == ["apple", "pear"]  # a_words when team_b ran


def test_a_read_across_pipelines_is_aligned_by_barrier_time(two_teams):
    a_epochs = [e["epoch"] for e in two_teams.json("epochs", "--pipeline", "team_a")]
    b_epochs = [e["epoch"] for e in two_teams.json("epochs", "--pipeline", "team_b")]
    assert len(a_epochs) == 2 and len(b_epochs) == 1
    assert a_epochs[0] < b_epochs[0] < a_epochs[1]  # one sequence, disjoint per pipeline
    cut = two_teams.json("snapshot", "a_words", "b_words")
    assert cut["level"] == "repeatable-read" and cut["epoch"] is None
    by_pipeline = {p["pipeline"]: p for p in cut["pipelines"]}
    # team_b's latest cut is older than team_a's: team_a is read at its cut before it
    # (epoch 1), not at its latest (epoch 3) and not "wait for the lagging jobs".
    assert by_pipeline["team_a"]["epoch"] == a_epochs[0]
    assert by_pipeline["team_b"]["epoch"] == b_epochs[0]
    assert cut["aligned_at"] == by_pipeline["team_b"]["barrier_ts"]
    assert by_pipeline["team_a"]["barrier_ts"] <= cut["aligned_at"]
    assert {t["table"]: t["epoch"] for t in cut["tables"]} == {
        "a_words": a_epochs[0],
        "b_words": b_epochs[0],
    }
    query = "SELECT count(*) AS n FROM a_words a CROSS JOIN b_words b"
    result = two_teams.etl("sql", query, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": 2}]  # kiwi (team_a's epoch 3) is after the cut
    assert f"team_a:epoch={a_epochs[0]}" in result.stderr
    assert f"team_b:epoch={b_epochs[0]}" in result.stderr
    # An epoch belongs to one pipeline; a time aligns them.
    by_epoch = two_teams.etl("snapshot", "a_words", "b_words", "--as-of-epoch", str(a_epochs[0]))
    assert by_epoch.returncode == 2 and "--as-of-time" in by_epoch.stderr
    # One pipeline alone reads as before: its newest cut, one epoch.
    alone = two_teams.json("snapshot", "a_words")
    assert alone["epoch"] == a_epochs[1] and "pipelines" not in alone


def test_pipeline_filters(two_teams):
    status = two_teams.json("status", "--pipeline", "team_b")
    assert [p["pipeline"] for p in status["pipelines"]] == ["team_b"]
    assert sorted(t["table"] for t in status["tables"]) == ["a_mirror", "b_words"]
    graph = two_teams.json("lineage")
    owners = {n["name"]: (n["kind"], n["pipeline"]) for n in graph["nodes"]}
    assert owners["ingest"] == ("job", "team_a") and owners["files"] == ("source", "team_a")
    assert owners["a_mirror"] == ("table", "team_b") and owners["a_feed"] == ("source", "team_b")
    only_a = two_teams.json("lineage", "--pipeline", "team_a")
    assert {n["pipeline"] for n in only_a["nodes"]} == {"team_a"}
    assert two_teams.json("tag", "create", "a_latest", "--pipeline", "team_a")["pipeline"] == (
        "team_a"
    )
    assert [t["name"] for t in two_teams.json("tag", "list", "--pipeline", "team_a")] == [
        "a_latest"
    ]
    assert two_teams.json("tag", "list", "--pipeline", "team_b") == []
    unknown = two_teams.etl("status", "--pipeline", "team_z")
    assert unknown.returncode == 2 and "team_z" in unknown.stderr
    wrong = two_teams.etl("epochs", "b_words", "--pipeline", "team_a")
    assert wrong.returncode == 2 and "belongs to pipeline 'team_b'" in wrong.stderr


def test_retire_pipeline(two_teams):
    catalog = load_catalog(two_teams.catalog_url, create=False)
    try:
        lease = catalog.acquire_lease("ingest_b", "a-live-run", ttl_seconds=120)
        busy = two_teams.etl("retire", "pipeline", "team_b", "--drop-tables")
        assert busy.returncode == 2, busy.stderr
        assert "ingest_b" in busy.stderr and "a-live-run" in busy.stderr
        assert (two_teams.root / "wh" / "b_words").exists()
        catalog.release_lease(lease)
    finally:
        catalog.close()
    retired = two_teams.json("retire", "pipeline", "team_b", "--drop-tables")
    assert retired["jobs"] == ["ingest_b", "mirror"]
    assert retired["sources"] == ["a_feed", "files_b"]
    assert sorted(retired["tables"]) == ["a_mirror", "b_words"]
    assert not (two_teams.root / "wh" / "b_words").exists()
    status = two_teams.json("status")
    assert [p["pipeline"] for p in status["pipelines"]] == ["team_a"]
    assert sorted(t["table"] for t in status["tables"]) == ["a_words"]
    words = _rows(two_teams, "SELECT word FROM a_words ORDER BY word")
    assert [r["word"] for r in words] == ["apple", "kiwi", "pear"]
    gone = two_teams.etl("retire", "pipeline", "team_b")
    assert gone.returncode == 2 and "team_b" in gone.stderr
    # Without --drop-tables the files stay; their commits name epochs that are gone, so a
    # run registering a table there again is refused (before Spark), never misled by them.
    kept = two_teams.json("retire", "pipeline", "team_a")
    assert kept["tables"] == ["a_words"] and kept["dropped"] == []
    assert (two_teams.root / "wh" / "a_words" / "_delta_log").is_dir()
    again = two_teams.etl(
        "run", "--once", two_teams.root / "team_a.py", "--param", f"dir={two_teams.root / 'dA'}"
    )
    assert again.returncode == 2, again.stderr
    assert "holds a Delta table" in " ".join(again.stderr.split())
    assert two_teams.json("status")["pipelines"] == []
