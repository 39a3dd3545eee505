"""Validating a pipeline file before anything runs (issue 24, item 3): every problem at
once, each naming what is wrong and what to do; no Spark; nothing written to the catalog.

The command-line tests run the real ``etl`` (no JVM starts: each must answer in under
2 s) and compare the catalog before and after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from catalog import Catalog, JobSpec, TableSpec, load_catalog
from etl.leases import make_owner
from etl.validation import validate_file
from tests.support.cli_runner import etl

CHAIN = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("team")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir")), output="lines")
pipeline.sql("count", output="counts", inputs=[{inputs}], mode="overwrite",
             query="{query}")
"""


def chain(
    tmp_path: Path,
    *,
    inputs: str = '"lines"',
    query: str = "SELECT value, count(*) AS n FROM lines GROUP BY value",
    name: str = "pipeline",
) -> Path:
    file = tmp_path / f"{name}.py"
    file.write_text(CHAIN.format(inputs=inputs, query=query))
    return file


@pytest.fixture
def drops(tmp_path: Path) -> Path:
    path = tmp_path / "drops"
    path.mkdir()
    return path


def messages(file: Path, params: dict[str, str], catalog: Catalog | None = None) -> list[str]:
    return [str(p) for p in validate_file(file, params, catalog=catalog).problems]


def test_a_valid_pipeline_has_no_problem(tmp_path, drops):
    validation = validate_file(chain(tmp_path), {"dir": str(drops)})
    assert validation.ok and validation.problems == ()
    assert validation.pipeline is not None and validation.pipeline.name == "team"


def test_every_problem_is_reported_at_once(tmp_path):
    file = chain(
        tmp_path,
        inputs='"lnes"',
        query="SELECT l.value, count(*) AS n FROM lines l JOIN stopwords s ON l.value = s.w",
    )
    found = messages(file, {"dir": str(tmp_path / "missing")})
    assert len(found) == 3, found
    assert any(
        "job 'count': input 'lnes' is neither written by a job of pipeline 'team' nor "
        "registered in the catalog; did you mean 'lines'?" in m
        for m in found
    ), found
    assert any(
        "job 'count': its SQL reads ['lines', 'stopwords']" in m and "add them to inputs" in m
        for m in found
    ), found
    assert any("source 'drops'" in m and "does not exist: create it" in m for m in found), found


def test_param_typo_says_did_you_mean_and_still_reports_the_missing_one(tmp_path):
    found = messages(chain(tmp_path), {"dri": "x"})
    assert found == [
        "param 'dri': unknown param 'dri', did you mean 'dir'? (the file reads: dir)",
        "param 'dir': required: pass --param dir=VALUE",
    ]


def test_every_missing_param_is_reported_and_a_param_read_after_one_is_known(tmp_path):
    file = tmp_path / "two.py"
    file.write_text(
        """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("two")
source = FileSource("drops", path=param("dir"), format=param("fmt", "text"))
pipeline.ingest("ingest", source=source, output=param("table"))
"""
    )
    # 'table' is read after the missing 'dir': it is known, and a typo of it is not.
    assert messages(file, {"table": "t", "tble": "t"}) == [
        "param 'tble': unknown param 'tble', did you mean 'table'? (the file reads: dir, "
        "fmt, table)",
        "param 'dir': required: pass --param dir=VALUE",
    ]
    assert messages(file, {}) == [
        "param 'dir': required: pass --param dir=VALUE",
        "param 'table': required: pass --param table=VALUE",
    ]
    # An empty stand-in the file cannot take (an empty format) leaves what it reads after
    # it unknown: no --param is called unknown then.
    assert messages(file, {"fmt": "", "tble": "t"}) == [
        "param 'dir': required: pass --param dir=VALUE",
    ]


def test_write_modes_writers_sources_and_gates(tmp_path, drops):
    file = tmp_path / "p.py"
    file.write_text(
        """
import great_expectations as gx
from etl import FileSource, Pipeline, param
from etl.quality import QualityGate

pipeline = Pipeline("team")
src = FileSource("drops", path=param("dir"))
pipeline.ingest("a", source=src, output="lines")
pipeline.ingest("b", source=src, output="lines")
pipeline.sql("c", output="out", inputs=["lines"], mode="append", keys=["value"],
             query="SELECT value FROM lines")
pipeline.expect(QualityGate("outt", [gx.expectations.ExpectColumnValuesToNotBeNull(column="value")]))
"""
    )
    found = messages(file, {"dir": str(drops)})
    assert "table 'lines': written by jobs ['a', 'b']" in "\n".join(found), found
    assert any(m.startswith("source 'drops': read by jobs ['a', 'b']") for m in found), found
    assert any(
        "job 'c': keys=['value'] only apply to merge jobs" in m and "use mode='merge'" in m
        for m in found
    ), found
    assert any("gate 'outt'" in m and "did you mean 'out'?" in m for m in found), found


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_input_registered_in_the_catalog_is_known(tmp_path, drops, backend, request):
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    catalog = load_catalog(url, warehouse=tmp_path / "wh")
    file = chain(tmp_path, inputs='"lines", "stopwords"', query="SELECT * FROM lines")
    assert any("input 'stopwords'" in m for m in messages(file, {"dir": str(drops)}, catalog))
    catalog.register_table(TableSpec(name="stopwords", location=str(tmp_path / "sw")))
    assert messages(file, {"dir": str(drops)}, catalog) == []
    typo = chain(tmp_path, inputs='"lines", "stopwrds"', query="SELECT * FROM lines", name="t")
    assert any(
        "input 'stopwrds'" in m and "did you mean 'stopwords'?" in m
        for m in messages(typo, {"dir": str(drops)}, catalog)
    )


def test_a_kafka_topic_that_does_not_exist(tmp_path, kafka_bootstrap):
    file = tmp_path / "k.py"
    file.write_text(
        f"""
from etl import KafkaSource, Pipeline

pipeline = Pipeline("k")
pipeline.ingest("ingest", source=KafkaSource("events", topics=["no_such_topic_24"],
                bootstrap_servers={kafka_bootstrap!r}, value_format="string"), output="ev")
"""
    )
    started = time.monotonic()
    found = messages(file, {})
    assert time.monotonic() - started < 10
    assert len(found) == 1 and "source 'events'" in found[0], found
    assert "['no_such_topic_24'] do not exist" in found[0], found


def test_an_unreachable_kafka_broker_is_reported_within_seconds(tmp_path):
    file = tmp_path / "k.py"
    file.write_text(
        """
from etl import KafkaSource, Pipeline

pipeline = Pipeline("k")
pipeline.ingest("ingest", source=KafkaSource("events", topics=["t"],
                bootstrap_servers="127.0.0.1:1", value_format="string"), output="ev")
"""
    )
    started = time.monotonic()
    found = messages(file, {})
    assert time.monotonic() - started < 6
    assert len(found) == 1 and "Kafka at 127.0.0.1:1" in found[0], found


# -- through the command line: exit codes, the words, time, nothing written -----------


def catalog_state(catalog: Catalog) -> tuple:
    return (
        [t.name for t in catalog.list_tables(include_retired=True)],
        [e.id for e in catalog.epochs()],
    )


def etl_without_java(*args, cwd: Path):
    """The command, in an environment without Java: a refusal that answers at all answers
    before any JVM starts (which is what makes it fast; no time is asserted)."""
    return etl(*args, cwd=cwd, JAVA_HOME="/nonexistent", PATH="/usr/bin:/bin")


@pytest.mark.slow
def test_cli_refusals_are_fast_and_write_nothing(tmp_path, drops):
    warehouse = tmp_path / "wh"
    file = chain(tmp_path, inputs='"lnes"')
    # No catalog yet: a refused run creates none.
    result = etl_without_java(
        "run", file, "--once", "--warehouse", warehouse, "--param", f"dir={drops}", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert "input 'lnes'" in result.stderr and "did you mean 'lines'?" in result.stderr
    assert not warehouse.exists()

    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec(name="other", location=str(warehouse / "other")))
    catalog.open_epoch()
    before = catalog_state(catalog)
    cases = {
        "bad input": (
            chain(tmp_path, inputs='"lnes"', name="bad_input"),
            [f"dir={drops}"],
            "input 'lnes'",
        ),
        "undeclared SQL table": (
            chain(tmp_path, query="SELECT * FROM lines JOIN other USING (value)", name="sql"),
            [f"dir={drops}"],
            "its SQL reads ['other'], which is not among its inputs ['lines']",
        ),
        "missing directory": (chain(tmp_path), [f"dir={tmp_path / 'nope'}"], "does not exist"),
        "param typo": (chain(tmp_path), ["dri=x"], "unknown param 'dri', did you mean 'dir'?"),
    }
    for case, (file, params, words) in cases.items():
        args = [a for p in params for a in ("--param", p)]
        for command in (["validate"], ["run", "--once"]):
            result = etl_without_java(
                command[0], file, *command[1:], "--warehouse", warehouse, *args, cwd=tmp_path
            )
            assert result.returncode == 2, (case, command, result.stderr)
            assert words in result.stderr, (case, command, result.stderr)
            assert catalog_state(catalog) == before, (case, command)
    ok = etl_without_java(
        "validate",
        chain(tmp_path),
        "--warehouse",
        warehouse,
        "--param",
        f"dir={drops}",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert ok.returncode == 0 and '"ok": true' in ok.stdout, ok.stderr


def test_cli_busy_pipeline_is_refused_before_spark_starts(tmp_path, drops):
    warehouse = tmp_path / "wh"
    file = chain(tmp_path)
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec(name="lines", location=str(warehouse / "lines"), kind="root"))
    catalog.register_job(JobSpec(name="ingest", output="lines", source="drops"))
    catalog.acquire_lease("ingest", make_owner(), ttl_seconds=300)  # this live process
    before = catalog_state(catalog)
    result = etl_without_java(
        "run", file, "--once", "--warehouse", warehouse, "--param", f"dir={drops}", cwd=tmp_path
    )
    assert result.returncode == 3, result.stderr
    assert f"{os.getpid()}" in result.stderr and "ingest" in result.stderr
    assert catalog_state(catalog) == before


def test_cli_refusals_on_postgresql_leave_the_catalog_as_it_was(tmp_path, drops, postgres_url):
    catalog = load_catalog(postgres_url)
    catalog.register_table(TableSpec(name="lines", location=str(tmp_path / "lines"), kind="root"))
    catalog.register_job(JobSpec(name="ingest", output="lines", source="drops"))
    catalog.open_epoch()
    before = catalog_state(catalog)
    where = ("--catalog", postgres_url, "--param", f"dir={drops}")
    bad = etl_without_java("run", chain(tmp_path, inputs='"lnes"'), "--once", *where, cwd=tmp_path)
    assert bad.returncode == 2 and "did you mean 'lines'?" in bad.stderr, bad.stderr
    assert catalog_state(catalog) == before
    catalog.acquire_lease("ingest", make_owner(), ttl_seconds=300)
    busy = etl_without_java("run", chain(tmp_path), "--once", *where, cwd=tmp_path)
    assert busy.returncode == 3 and "ingest" in busy.stderr, busy.stderr
    assert catalog_state(catalog) == before
