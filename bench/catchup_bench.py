"""Catch-up: 100 pending small epochs coalesced into one batch (FLIP-327's backlog mode)
against the same epochs processed one by one, measured in the same run.

Run: python -m bench catchup
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

EPOCHS = 100


def _pending_pipeline(root: Path, spark, *, backlog_threshold: int | None):
    from catalog import load_catalog
    from etl import FileSource, Pipeline, Runner

    incoming = root / "incoming"
    incoming.mkdir(parents=True)
    pipeline = Pipeline("catchup")
    pipeline.ingest(
        "ingest",
        source=FileSource("drops", path=incoming, format="json", schema="id INT, v DOUBLE"),
        output="events",
    )
    pipeline.sql(
        "derive",
        output="derived",
        query="SELECT id, v * 2 AS v2 FROM events",
        inputs=["events"],
    )
    catalog = load_catalog(None, warehouse=root / "warehouse")
    runner = Runner(
        pipeline,
        catalog=catalog,
        warehouse=str(root / "warehouse"),
        spark=spark,
        backlog_threshold=backlog_threshold,
    )
    runner.register()
    for epoch in range(EPOCHS):
        path = incoming / f"drop{epoch:04d}.json"
        path.write_text("".join(f'{{"id": {epoch * 10 + i}, "v": {i}.5}}\n' for i in range(10)))
        os.utime(path, ns=(time.time_ns(), time.time_ns()))
        time.sleep(0.001)
        runner.open_epoch()
    return runner


def _measure(spark, *, backlog_threshold: int | None) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        runner = _pending_pipeline(Path(tmp), spark, backlog_threshold=backlog_threshold)
        with runner:
            started = time.perf_counter()
            result = runner.run_pending()
            elapsed = time.perf_counter() - started
        assert result.ok, result.failures
        rows = runner.spark.read.parquet(str(Path(tmp) / "warehouse" / "derived")).count()
        assert rows == EPOCHS * 10, rows
        return elapsed, len(result.batches)


def main() -> None:
    from etl.spark import build_spark

    spark = build_spark(app_name="bench-catchup", conf={"spark.ui.enabled": "false"})
    _measure(spark, backlog_threshold=10)  # warm-up: JVM, Python workers
    coalesced, coalesced_batches = _measure(spark, backlog_threshold=10)
    one_by_one, single_batches = _measure(spark, backlog_threshold=None)
    print(f"{EPOCHS} pending epochs, 2 jobs")
    print(f"  one by one : {one_by_one:8.2f} s ({single_batches} batches)")
    print(f"  coalesced  : {coalesced:8.2f} s ({coalesced_batches} batches)")
    print(f"  speed-up   : {one_by_one / coalesced:8.1f}x (target >= 5x)")


if __name__ == "__main__":
    main()
