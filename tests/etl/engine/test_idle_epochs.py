"""An epoch with nothing to write writes nothing (issue 24, item 5): an overwrite or merge
job whose inputs changed no row since its last batch seals the epoch at its current Delta
version without a commit; an append job with an empty output commits nothing. Reads at
an idle epoch, and the first batch of a new run (the code may have changed), are right."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from catalog import EpochState, load_catalog
from etl import EpochContext, FileSource, Pipeline, Runner
from etl.delta import log_commits, table_version
from etl.reader import snapshot
from etl.retention.maintain import maintain
from tests.support.cli_runner import etl_here as etl

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLES = ("words", "counts", "latest")


def chain(incoming: Path) -> Pipeline:
    pipeline = Pipeline("idle")
    pipeline.ingest("ingest", source=FileSource("drops", path=incoming), output="words")
    pipeline.sql(
        "count",
        output="counts",
        inputs=["words"],
        mode="overwrite",
        query="SELECT value, count(*) AS n FROM words GROUP BY value",
    )

    @pipeline.job("upsert", output="latest", inputs=["words"], mode="merge", keys=["value"])
    def upsert(ctx: EpochContext):
        return ctx["words"].groupBy("value").agg(F.max(F.lit(1)).alias("seen"))

    return pipeline


def versions(catalog) -> dict[str, int | None]:
    return {t: table_version(catalog.get_table(t).location) for t in TABLES}


def rows(catalog, table: str, **at) -> list[tuple]:
    reader = snapshot(catalog, [table], "repeatable-read", **at)
    frame = reader.pandas(table).drop(columns=["_epoch"])
    return sorted(tuple(r) for r in frame.values.tolist())


def test_idle_epochs_leave_every_version_unchanged(tmp_path, spark):
    incoming = tmp_path / "in"
    incoming.mkdir()
    catalog = load_catalog(None, warehouse=tmp_path / "wh")
    runner = Runner(chain(incoming), catalog=catalog, warehouse=str(tmp_path / "wh"), spark=spark)
    (incoming / "1.txt").write_text("a\nb\na\n")
    first = runner.run_once().epochs_opened[0].id
    after_first = versions(catalog)

    idle = [runner.run_once() for _ in range(3)]
    assert versions(catalog) == after_first  # three epochs, no commit to any table
    for result in idle:
        assert result.ok and {b.rows for b in result.batches} == {0}
        # Every idle epoch reaches COMMIT (sealed by whichever batch ended last; batches that
        # end together are reported in any order).
        commits = [b.commit.epoch for b in result.batches if b.commit is not None]
        assert commits == [result.epochs_opened[0].id], commits
    last_idle = idle[-1].epochs_opened[0].id
    for table in ("counts", "latest"):
        state = catalog.table_epoch(table, last_idle)
        assert state.state is EpochState.WRITTEN
        assert state.delta_version == catalog.table_epoch(table, first).delta_version
    assert rows(catalog, "counts", as_of_epoch=last_idle) == [("a", 2), ("b", 1)]
    assert rows(catalog, "counts", as_of_epoch=last_idle) == rows(
        catalog, "counts", as_of_epoch=first
    )
    listed = etl(
        "epochs", "counts", "--warehouse", tmp_path / "wh", "--format", "json", cwd=tmp_path
    )
    shared = [
        (r["epoch"], r["state"], r["retention"])
        for r in json.loads(listed.stdout)
        if r["delta_version"] == after_first["counts"]
    ]
    idle_ids = [r.epochs_opened[0].id for r in idle]
    assert shared == [(e, "WRITTEN", "retained") for e in (first, *idle_ids)], listed.stdout

    # The negative: an epoch with new input rows commits, and reads see them.
    (incoming / "2.txt").write_text("c\na\n")
    busy = runner.run_once().epochs_opened[0].id
    now = versions(catalog)
    assert all(now[t] > after_first[t] for t in TABLES), (after_first, now)
    assert rows(catalog, "counts", as_of_epoch=busy) == [("a", 3), ("b", 1), ("c", 1)]
    assert rows(catalog, "counts", as_of_epoch=last_idle) == [("a", 2), ("b", 1)]

    def epochs_committed(table: str) -> list[int | None]:
        location = catalog.get_table(table).location
        return [c.epoch for c in log_commits(location, after_version=now[table])]

    # Compacting an input (dataChange false) changes no row: still nothing to compute.
    report = maintain(catalog, orphan_age=timedelta(0), min_files=2)
    assert {t.table: t.compacted_files for t in report.tables}["words"] >= 2, report
    compacted = runner.run_once().epochs_opened[0].id
    assert catalog.table_epoch("counts", compacted).state is EpochState.WRITTEN
    assert compacted not in epochs_committed("counts")
    assert rows(catalog, "counts", as_of_epoch=compacted) == [("a", 3), ("b", 1), ("c", 1)]

    # A new run may load changed code: its first batch computes (and commits) again.
    again = Runner(chain(incoming), catalog=catalog, warehouse=str(tmp_path / "wh"), spark=spark)
    fresh = again.run_once().epochs_opened[0].id
    assert fresh in epochs_committed("counts")
    assert fresh not in epochs_committed("latest")  # merging no row commits nothing


def test_a_transform_that_reads_its_epoch_computes_every_epoch(tmp_path, spark):
    """A transform whose rows depend on its epoch or barrier time is not a function of its
    inputs alone: it runs (and commits) every epoch, inputs unchanged or not; one reading
    only its inputs is sealed without running."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    pipeline = Pipeline("stamped")
    pipeline.ingest("ingest", source=FileSource("drops", path=incoming), output="words")

    @pipeline.job("stamp", output="stamped", inputs=["words"], mode="overwrite")
    def stamp(ctx: EpochContext):
        return ctx["words"].groupBy().count().withColumn("as_of", F.lit(str(ctx.barrier_ts)))

    @pipeline.job("plain", output="plain", inputs=["words"], mode="overwrite")
    def plain(ctx: EpochContext):
        return ctx["words"].groupBy().count()

    catalog = load_catalog(None, warehouse=tmp_path / "wh")
    runner = Runner(pipeline, catalog=catalog, warehouse=str(tmp_path / "wh"), spark=spark)
    (incoming / "1.txt").write_text("a\nb\n")
    runner.run_once()
    before = {t: table_version(catalog.get_table(t).location) for t in ("stamped", "plain")}
    idle = runner.run_once().epochs_opened[0]
    after = {t: table_version(catalog.get_table(t).location) for t in ("stamped", "plain")}
    assert after["plain"] == before["plain"]
    assert after["stamped"] == before["stamped"] + 1
    with snapshot(catalog, ["stamped"], "repeatable-read") as reader:
        assert reader.epoch == idle.id
        assert reader.pandas("stamped")["as_of"].tolist() == [str(idle.barrier_ts)]
