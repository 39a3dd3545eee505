"""Continuous runs heal (issue 24, item 4), through the real ``etl run --continuous``.

One run of a three-job chain: ``flaky`` fails its first batch (a marker file it removes)
and its retry makes it good; ``broken``, downstream of it (so it runs only once ``flaky``
healed), fails every time, and once its retries are spent the run exits 1 naming job,
epoch and cause. Every failed attempt is on record in the catalog."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from catalog import load_catalog
from etl.reader import snapshot
from etl.scheduling import RetryPolicy
from tests.support.cli_runner import etl

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


def test_a_transient_failure_heals_and_spent_retries_end_the_run(tmp_path: Path):
    drops = tmp_path / "drops"
    drops.mkdir()
    (drops / "1.txt").write_text("x\ny\n")
    marker = tmp_path / "marker"
    marker.write_text("fail once")
    file = tmp_path / "heal.py"
    file.write_text(CHAIN)
    started = time.monotonic()
    result = etl(
        "run", file, "--continuous", "--epoch-interval", "1", "--max-epochs", "500",
        "--retries", "2", "--retry-backoff", "0.1",
        "--param", f"dir={drops}", "--param", f"marker={marker}",
        cwd=tmp_path,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert not marker.exists()  # flaky failed once
    assert (
        "failed, then retried successfully: job 'flaky' failed in its transform at epoch 1"
        in result.stderr
    )
    assert "transient trouble" in result.stderr
    spent = [line for line in result.stderr.splitlines() if "retries spent" in line]
    assert len(spent) == 1, result.stderr
    assert (
        "job 'broken' failed in its transform at epoch 1" in spent[0]
        and "permanent trouble" in spent[0]
    )
    # It gave up: it did not go on opening epochs until --max-epochs.
    assert elapsed < 400, elapsed

    catalog = load_catalog(None, warehouse=tmp_path / "warehouse")
    assert len(catalog.failures(job="flaky")) == 1
    assert len(catalog.failures(job="broken")) == 3  # the first attempt and two retries
    epochs = catalog.epochs()
    assert len(epochs) < 500
    reader = snapshot(catalog, ["flaky_out"], "read-committed")
    assert sorted(reader.pandas("flaky_out")["value"]) == ["x", "y"]
