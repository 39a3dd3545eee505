"""Each benchmark runs at a tiny size so that it cannot rot. No timing is asserted: only
that it runs to its end and prints its figures."""

from __future__ import annotations

import importlib

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TINY = {
    "append_commit": {"DB_BENCH_FILES": "3,12", "DB_BENCH_COMMITS": "2"},
    "catalog_batch": {"DB_BENCH_TABLES": "3", "DB_BENCH_EPOCHS": "5"},
    "small_epoch": {"DB_BENCH_EPOCHS": "1", "DB_BENCH_HISTORY": "12"},
    "file_cut": {"DB_BENCH_CUT_SIZES": "10,100", "DB_BENCH_CUT_RUNS": "1"},
    "freshness": {
        "DB_BENCH_SECONDS": "4",
        "DB_BENCH_WARMUP": "4",
        "DB_BENCH_JOBS": "4",
        "DB_BENCH_ROWS_PER_SECOND": "50",
        "DB_BENCH_FILES_PER_SECOND": "2",
        "DB_BENCH_PROBE_INTERVAL": "0.2",
        "DB_BENCH_MAINTENANCE": "2",
    },
    "recompute_freshness": {
        "DB_BENCH_SECONDS": "6",
        "DB_BENCH_WARMUP": "4",
        "DB_BENCH_JOBS": "3",
        "DB_BENCH_ROWS_PER_SECOND": "50",
        "DB_BENCH_RECOMPUTE_PAUSE": "0.5",
    },
    "retention": {
        "DB_BENCH_EPOCHS": "6",
        "DB_BENCH_MAINTAIN_EVERY": "3",
        "DB_BENCH_KEEP": "2s",
        "DB_BENCH_READS": "1",
        "DB_BENCH_COMMITS": "50",
        "DB_BENCH_OPENS": "1",
    },
    "takeover": {"DB_BENCH_ROUNDS": "1"},
    "throughput": {
        "DB_BENCH_RATES": "50,100",
        "DB_BENCH_WARMUP": "4",
        "DB_BENCH_STEP_SETTLE": "1",
        "DB_BENCH_STEP_SECONDS": "4",
    },
    "wide_pipeline": {
        "DB_BENCH_SIZES": "4,7",
        "DB_BENCH_WARMUP": "4",
        "DB_BENCH_SECONDS": "4",
        "DB_BENCH_EPOCH_INTERVAL": "1",
        "DB_BENCH_ROWS_PER_SECOND": "50",
    },
    "merge_scaling": {
        "DB_BENCH_MERGE_SIZES": "2000,5000",
        "DB_BENCH_MERGE_KEYS": "50",
        "DB_BENCH_MERGE_EPOCHS": "1",
    },
}

EXPECTED = {
    "append_commit": "append commit: done",
    "catalog_batch": "driver CPU per batch: catalog",
    "small_epoch": "one tiny epoch through one job:",
    "file_cut": "file cut 100 / 10 files:",
    "freshness": "freshness of the last table",
    "recompute_freshness": "recomputes of side_clean --downstream:",
    "merge_scaling": "deletion-vectors: merge job 5,000 / 2,000 rows:",
    "retention": "repeatable-read read of the latest cut",
    "takeover": "kill -9 -> next run's first sealed epoch:",
    "throughput": "knee: ",
    "wide_pipeline": "growth against 4 tables:",
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_benchmark_runs_at_a_tiny_size(name, spark, monkeypatch, capsys):
    for key, value in TINY[name].items():
        monkeypatch.setenv(key, value)
    module = importlib.import_module(f"bench.{name}_bench")
    module.main()
    out = capsys.readouterr().out
    assert EXPECTED[name] in out, out
    assert "Traceback" not in out


def test_freshness_runs_with_a_kafka_root_at_a_tiny_size(spark, monkeypatch, capsys):
    for key, value in TINY["freshness"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DB_BENCH_SOURCE", "kafka")
    module = importlib.import_module("bench.freshness_bench")
    module.main()
    out = capsys.readouterr().out
    assert "fed by kafka" in out, out
    assert EXPECTED["freshness"] in out, out
    assert "producer flushes" in out, out
