"""Crash a run at each fault point in a child process, recover in a fresh run, and compare
with a run that never crashed: same rows, no duplicates, ROLLED_BACK where undone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog import EpochState
from etl.faults import FAULT_ENV, FAULT_EXIT_CODE
from examples.wordcount.checks import violations
from tests.support.wordcount_env import make_chain, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.recovery, pytest.mark.slow]

CHILD = Path(__file__).parents[2] / "support" / "crash_child.py"
FIRST = [("a.txt", ["apple", "pear", "apple"]), ("b.txt", ["fig"])]
SECOND = [("c.txt", ["pear", "kiwi"]), ("d.txt", ["apple", "fig", "fig"])]


def _contents(chain) -> dict[str, list[tuple]]:
    reader = chain.read("read-committed")
    return {
        "words": table_rows(reader, "words", ["word", "_epoch"]),
        "word_counts": table_rows(reader, "word_counts", ["word", "cnt"]),
        "cnt_counts": table_rows(reader, "cnt_counts", ["cnt", "words"]),
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory, spark):
    chain = make_chain(tmp_path_factory.mktemp("reference"), spark, files_per_micro_batch=1)
    for files in (FIRST, SECOND):
        for name, words in files:
            chain.drop(name, words)
        assert chain.runner.run_once().ok
    return _contents(chain)


@pytest.mark.parametrize(
    ("fault", "rolled_back"),
    [
        ("before_commit@etl1:2", None),
        ("after_commit@etl1:2", None),
        ("between_micro_batches@ingest_words:2", "words"),
        ("after_commit@ingest_words:2", "words"),
        ("after_seal@etl1:2", None),
        ("after_slice_recorded@ingest_words:2", None),
    ],
)
def test_crash_then_recover_matches_a_run_without_crash(
    tmp_path, spark, reference, fault, rolled_back
):
    chain = make_chain(tmp_path, spark, files_per_micro_batch=1)
    for name, words in FIRST:
        chain.drop(name, words)
    assert chain.runner.run_once().ok
    for name, words in SECOND:
        chain.drop(name, words)

    env = {**os.environ, FAULT_ENV: fault}
    child = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == FAULT_EXIT_CODE, child.stderr[-3000:]

    if rolled_back == "words":
        # The crash left part of epoch 2 committed: only read-uncommitted may see it.
        dirty = chain.read("read-uncommitted").table("words").where("_epoch = 2").count()
        clean = chain.read("read-committed").table("words").where("_epoch = 2").count()
        assert dirty > 0 and clean == 0

    time.sleep(1.2)  # the child's 1 s lease expires; the new run takes it over
    with chain.runner:
        recovered = chain.runner.recover()
        result = chain.runner.run_pending()
    assert result.ok, result.failures
    assert _contents(chain) == reference
    assert violations(chain.read()).total == 0

    undone = [s for s in recovered.recovered if s.action == "rolled back"]
    if rolled_back:
        assert [s.table for s in undone] == [rolled_back]
        history = chain.catalog.state_history(rolled_back, epoch=2)
        assert EpochState.ROLLED_BACK in [h.state for h in history]
        assert chain.catalog.table_epoch(rolled_back, 2).state is EpochState.WRITTEN
    else:
        assert undone == []
