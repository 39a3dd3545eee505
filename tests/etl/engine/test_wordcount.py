"""FLIP-276's word-count chain: consistency at every level, and the anomalies the weaker
levels allow."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from catalog import EpochState, UnknownEpochError
from consistency import Level
from consistency.errors import EpochNotReadableError
from examples.wordcount.checks import violations
from tests.support.wordcount_env import make_chain, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.consistency]


def test_every_epoch_is_consistent_at_repeatable_read(tmp_path, spark):
    chain = make_chain(tmp_path, spark)
    batches = [
        [("a.txt", ["apple", "pear", "apple"])],
        [("b.txt", ["pear", "fig"]), ("c.txt", ["apple", "kiwi"])],
        [],
        [("d.txt", ["fig", "fig", "plum"])],
    ]
    for epoch, files in enumerate(batches, start=1):
        for name, words in files:
            chain.drop(name, words)
        result = chain.runner.run_once()
        assert result.ok, result.failures
        reader = chain.read()
        assert reader.epoch == epoch
        assert violations(reader).total == 0
        counts = dict(table_rows(reader, "word_counts", ["word", "cnt"]))
        assert counts == chain.expected_counts()
        expected_cnt = {}
        for cnt in counts.values():
            expected_cnt[cnt] = expected_cnt.get(cnt, 0) + 1
        assert dict(table_rows(reader, "cnt_counts", ["cnt", "words"])) == expected_cnt
    commit = chain.catalog.latest_commit()
    assert commit is not None and commit.epoch == len(batches)
    assert set(commit.versions) == {"words", "word_counts", "cnt_counts"}


def test_weaker_levels_show_the_skew_repeatable_read_rules_out(tmp_path, spark):
    """Schedule: the root job has sealed epoch 2, the derived jobs have not run it yet."""
    chain = make_chain(tmp_path, spark)
    chain.drop("a.txt", ["x", "y", "x"])
    assert chain.runner.run_once().ok
    chain.drop("b.txt", ["x", "z"])
    with chain.runner:
        epoch = chain.runner.open_epoch()
        ingest = chain.runner.pipeline.jobs["ingest_words"]
        (batch,) = chain.runner.plan(ingest)
        chain.runner.engine.run_batch(ingest, batch, chain.runner._lease(ingest))

    committed = chain.read("read-committed")
    assert committed.snapshot.epochs["words"] == epoch.id
    assert committed.snapshot.epochs["word_counts"] == epoch.id - 1
    assert violations(committed).word_counts > 0
    assert violations(chain.read("read-uncommitted")).word_counts > 0

    repeatable = chain.read("repeatable-read")
    assert repeatable.epoch == epoch.id - 1
    assert violations(repeatable).total == 0

    assert chain.runner.run_once().ok
    assert violations(chain.read("read-committed")).total == 0


def test_reader_running_beside_the_chain_never_sees_a_violation(tmp_path, spark):
    chain = make_chain(tmp_path, spark)
    stop = threading.Event()
    seen: dict[int, int] = {}
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                try:
                    snap = chain.read("repeatable-read")
                except Exception as exc:  # before the first epoch is written
                    if "no WRITTEN epoch" in str(exc) or "share no" in str(exc):
                        continue
                    raise
                seen[snap.epoch] = seen.get(snap.epoch, 0) + violations(snap).total
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(6):
            chain.drop(f"f{i}.txt", [f"w{i % 3}", f"w{i % 2}", "common"])
            assert chain.runner.run_once().ok
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert len(seen) >= 2, f"the reader should have seen several epochs, saw {sorted(seen)}"
    assert sum(seen.values()) == 0, seen


def test_repeatable_read_snapshot_answers_the_same_after_more_epochs(tmp_path, spark):
    chain = make_chain(tmp_path, spark)
    chain.drop("a.txt", ["a", "b", "a"])
    assert chain.runner.run_once().ok
    pinned = chain.read()
    query = "SELECT w.word, c.cnt FROM word_counts c JOIN words w ON w.word = c.word ORDER BY 1"
    before = [tuple(r) for r in pinned.sql(query).collect()]
    chain.drop("b.txt", ["a", "c"])
    assert chain.runner.run_once().ok
    assert [tuple(r) for r in pinned.sql(query).collect()] == before
    assert [tuple(r) for r in chain.read().sql(query).collect()] != before


def test_time_travel_by_epoch_and_by_time(tmp_path, spark):
    chain = make_chain(tmp_path, spark)
    chain.drop("a.txt", ["a"])
    assert chain.runner.run_once().ok
    chain.drop("b.txt", ["a", "b"])
    assert chain.runner.run_once().ok
    first = chain.read(as_of_epoch=1)
    assert first.level is Level.REPEATABLE_READ and first.epoch == 1
    assert dict(table_rows(first, "word_counts", ["word", "cnt"])) == {"a": 1}
    epoch2 = chain.catalog.get_epoch(2)
    by_time = chain.read(as_of_time=epoch2.barrier_ts - timedelta(microseconds=1))
    assert by_time.epoch == 1
    assert chain.read(as_of_time=epoch2.barrier_ts).epoch == 2
    with pytest.raises(UnknownEpochError):
        chain.read(as_of_epoch=3)


def test_backlog_is_coalesced_and_readers_skip_coalesced_epochs(tmp_path, spark):
    chain = make_chain(tmp_path, spark)
    chain.runner.backlog_threshold = 3
    chain.drop("a.txt", ["a"])
    assert chain.runner.run_once().ok
    # Four epochs pass while the derived jobs are not run: a backlog.
    ingest = chain.runner.pipeline.jobs["ingest_words"]
    with chain.runner:
        for i in range(4):
            chain.drop(f"b{i}.txt", ["b", "a"])
            chain.runner.open_epoch()
            for batch in chain.runner.plan(ingest):
                chain.runner.engine.run_batch(ingest, batch, chain.runner._lease(ingest))
        result = chain.runner.run_pending()
    assert result.ok
    etl1 = [b for b in result.batches if b.job == "etl1"]
    assert [(b.first_epoch, b.epoch) for b in etl1] == [(2, 5)]
    states = {s.epoch: s.state for s in chain.catalog.table_epochs("word_counts")}
    assert [states[e] for e in range(2, 6)] == [EpochState.COALESCED] * 3 + [EpochState.WRITTEN]
    reader = chain.read()
    assert reader.epoch == 5 and violations(reader).total == 0
    with pytest.raises(EpochNotReadableError):
        chain.read(as_of_epoch=3)
    assert chain.read(as_of_epoch=1).epoch == 1
