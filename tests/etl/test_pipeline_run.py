"""``etl run`` as a task object (:class:`etl.pipeline_run.PipelineRun`): what it decides
before Spark starts, without the command around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog import JobSpec, TableSpec, load_catalog
from etl.errors import PipelineBusyError
from etl.leases import make_owner
from etl.loader import load_pipeline
from etl.pipeline_run import PipelineRun, RunSettings, RunSetup
from etl.run_mode import RunMode

PIPELINE = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("team")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir")), output="lines")
"""


class Heard:
    """The run's events as they came, by name (nothing is printed)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def waiting(self, busy, seconds_left):
        self.events.append(("waiting", busy))

    def started(self, run):
        self.events.append(("started", run))

    def took_over(self, lease):
        self.events.append(("took_over", lease))

    def undeclared(self, undeclared, catalog_pipeline):
        self.events.append(("undeclared", undeclared))

    def maintained(self, report, error):
        self.events.append(("maintained", error))

    def progress(self, pipeline):
        raise AssertionError("no batch may run")


@pytest.fixture
def busy(tmp_path: Path):
    """A pipeline file whose job's lease a live run (this process) holds."""
    warehouse, drops = tmp_path / "wh", tmp_path / "drops"
    drops.mkdir()
    file = tmp_path / "pipeline.py"
    file.write_text(PIPELINE)
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec(name="lines", location=str(warehouse / "lines"), kind="root"))
    catalog.register_job(JobSpec(name="ingest", output="lines", source="drops"))
    holder = make_owner()
    catalog.acquire_lease("ingest", holder, ttl_seconds=300)
    return warehouse, file, {"dir": str(drops)}, holder


def _setup(warehouse: Path, file: Path, params: dict[str, str], opened: list[str]) -> RunSetup:
    def existing():
        opened.append("existing")
        return load_catalog(None, warehouse=warehouse, create=False)

    def forbidden(what: str):
        def call(*args):
            opened.append(what)
            raise AssertionError(f"{what} before the busy pipeline was refused")

        return call

    return RunSetup(
        load_pipeline=lambda catalog: load_pipeline(file, params),
        existing_catalog=existing,
        open_catalog=forbidden("open_catalog"),
        start_spark=forbidden("start_spark"),
    )


def test_a_busy_pipeline_is_refused_before_the_catalog_is_written_or_spark_starts(busy):
    warehouse, file, params, holder = busy
    opened: list[str] = []
    heard = Heard()
    run = PipelineRun(
        RunSettings(warehouse=str(warehouse), mode=RunMode(continuous=False)),
        _setup(warehouse, file, params, opened),
        heard,
    )
    with pytest.raises(PipelineBusyError) as refused:
        run.execute()
    assert refused.value.job == "ingest" and refused.value.owner == holder
    assert opened == ["existing"]
    assert heard.events == []  # no wait was asked for: refused at once, nothing said


def test_a_run_asked_to_wait_says_so_then_gives_up(busy):
    warehouse, file, params, holder = busy
    opened: list[str] = []
    heard = Heard()
    run = PipelineRun(
        RunSettings(warehouse=str(warehouse), mode=RunMode(continuous=False), wait_seconds=0.5),
        _setup(warehouse, file, params, opened),
        heard,
    )
    with pytest.raises(PipelineBusyError):
        run.execute()
    (event,) = heard.events
    assert event[0] == "waiting" and event[1].owner == holder
    assert opened == ["existing"]
