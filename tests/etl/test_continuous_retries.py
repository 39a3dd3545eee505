"""Continuous runs heal (issue 24, item 4), through the real ``etl run --continuous`` (run
in the test process, on the session's SparkSession).

One run of a three-job chain: ``flaky`` fails its first batch (a marker file it removes)
and its retry makes it good; ``broken``, downstream of it (so it runs only once ``flaky``
healed), fails every time, and once its retries are spent the run exits 1 naming job,
epoch and cause. Every failed attempt is on record in the catalog."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from catalog import load_catalog
from etl.reader import snapshot
from etl.scheduling import RetryPolicy
from tests.support.cli_runner import etl_here

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHAIN = """
from pathlib import Path

from etl import FileSource, Pipeline, param

MARKER = Path(param("marker"))
pipeline = Pipeline("heal")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir")), output="lines")


@pipeline.job("flaky", output="flaky_out", inputs=["lines"])
def flaky(ctx):
    if MARKER.exists():
        MARKER.unlink()
        raise RuntimeError("transient trouble")
    return ctx["lines"].select("value")


@pipeline.job("broken", output="broken_out", inputs=["flaky_out"])
def broken(ctx):
    raise RuntimeError("permanent trouble")
"""


def test_retry_policy_backs_off_exponentially_up_to_a_cap():
    policy = RetryPolicy(retries=3, backoff_seconds=1.0, max_backoff_seconds=5.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert [policy.spent(n) for n in (1, 3, 4)] == [False, False, True]
    assert not RetryPolicy(retries=0, keep_going=True).spent(100)
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_a_transient_failure_heals_and_spent_retries_end_the_run(tmp_path: Path, spark):
    drops = tmp_path / "drops"
    drops.mkdir()
    (drops / "1.txt").write_text("x\ny\n")
    marker = tmp_path / "marker"
    marker.write_text("fail once")
    file = tmp_path / "heal.py"
    file.write_text(CHAIN)
    result = etl_here(
        "run", file, "--continuous", "--epoch-interval", "1", "--max-epochs", "500",
        "--retries", "2", "--retry-backoff", "0.1",
        "--param", f"dir={drops}", "--param", f"marker={marker}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert not marker.exists()  # flaky failed once
    assert (
        "failed, then retried successfully: job 'flaky' failed in its transform at epoch 1"
        in result.stderr
    )
    assert "transient trouble" in result.stderr
    spent = [line for line in result.stderr.splitlines() if "retries spent" in line]
    assert len(spent) == 1, result.stderr
    # At the epoch of its last retry: a retried batch takes in the epochs opened meanwhile.
    assert re.search(r"job 'broken' failed in its transform at epoch \d+: ", spent[0]), spent
    assert "permanent trouble" in spent[0]
    catalog = load_catalog(None, warehouse=tmp_path / "warehouse")
    # It gave up: it did not go on opening epochs until --max-epochs.
    assert catalog.latest_epoch().id < 400, catalog.latest_epoch()
    assert len(catalog.failures(job="flaky")) == 1
    assert len(catalog.failures(job="broken")) == 3  # the first attempt and two retries
    epochs = catalog.epochs()
    assert len(epochs) < 500
    reader = snapshot(catalog, ["flaky_out"], "read-committed")
    assert sorted(reader.pandas("flaky_out")["value"]) == ["x", "y"]


def test_keep_going_retries_while_epochs_open_and_the_other_jobs_go_on(tmp_path, spark):
    from catalog import EpochState
    from etl import FileSource, Pipeline, Runner

    drops = tmp_path / "drops"
    drops.mkdir()
    (drops / "1.txt").write_text("x\n")
    pipeline = Pipeline("going")
    pipeline.ingest("ingest", source=FileSource("drops", path=drops), output="lines")

    @pipeline.job("broken", output="broken_out", inputs=["lines"])
    def broken(ctx):
        raise RuntimeError("permanent trouble")

    catalog = load_catalog(None, warehouse=tmp_path / "wh")
    runner = Runner(
        pipeline,
        catalog=catalog,
        warehouse=str(tmp_path / "wh"),
        spark=spark,
        retry=RetryPolicy(
            retries=1, backoff_seconds=0.05, max_backoff_seconds=0.05, keep_going=True
        ),
    )
    stop = threading.Event()

    def stop_after_three_failures() -> None:
        deadline = time.monotonic() + 180
        while len(catalog.failures(job="broken")) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()

    watcher = threading.Thread(target=stop_after_three_failures, daemon=True)
    watcher.start()
    result = runner.run_continuous(epoch_interval=0.5, stop=stop)
    # Past its one retry the job was still retried (the run did not give up) until stopped.
    assert len(catalog.failures(job="broken")) >= 3
    assert result.failures and {f.job for f in result.failures} == {"broken"}
    assert not any(f.retries_spent for f in result.failures)
    last = result.epochs_opened[-1].id
    assert catalog.table_epoch("lines", last).state is EpochState.WRITTEN  # the others go on
