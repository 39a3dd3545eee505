"""``etl recompute`` (issue 26, item 2): a transform fixed in a three-table chain is
recomputed along the lineage, and readers see the new revision all at once.

The chain: ``words`` (files) -> ``word_counts`` (word, count * FACTOR) -> ``cnt_counts``
(cnt, how many words have it). The first runs have the bug (FACTOR 2); the recompute runs
the fixed file (FACTOR 1). A cut is *mixed* when ``cnt_counts`` is not what its transform
makes of ``word_counts`` (one table of the old revision, the other of the new).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from catalog import RevisionState, load_catalog, open_for_reads
from etl import Runner, snapshot
from etl.errors import RecomputeError
from etl.faults import FAULT_EXIT_CODE
from etl.loader import load_pipeline
from etl.recompute import RecomputeRequest, recompute, recompute_jobs
from tests.support.cli_runner import etl, etl_here, start

TABLES = ["words", "word_counts", "cnt_counts"]

CHAIN = """
from etl import FileSource, Pipeline, param

FACTOR = int(param("factor", "1"))
MAX_CNT = 3
CNT_TYPE = param("cnt_type", "bigint")

pipeline = Pipeline("fixchain")
pipeline.ingest(
    "ingest_words",
    source=FileSource("word_files", path=param("input_dir"), format="text", column="word"),
    output="words",
)
pipeline.sql(
    "count_words",
    output="word_counts",
    inputs=["words"],
    mode="overwrite",
    query=f"SELECT word, CAST(count(*) * {FACTOR} AS {CNT_TYPE}) AS cnt FROM words GROUP BY word",
)
pipeline.sql(
    "count_cnts",
    output="cnt_counts",
    inputs=["word_counts"],
    mode="overwrite",
    query="SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt",
)
if param("gate", ""):  # no word counted more than MAX_CNT times
    import great_expectations as gx
    from etl.quality import QualityGate

    pipeline.expect(
        QualityGate(
            "word_counts",
            [gx.expectations.ExpectColumnValuesToBeBetween(column="cnt", max_value=MAX_CNT)],
            policy=param("gate"),
        )
    )
"""


class Chain:
    """The chain's files and warehouse; runs with the bug happen in this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = root / "chain.py"
        self.file.write_text(CHAIN)
        self.incoming = root / "incoming"
        self.incoming.mkdir()
        self.warehouse = root / "warehouse"
        self.catalog = load_catalog(None, warehouse=self.warehouse)

    def params(self, factor: int) -> list[str]:
        return ["--param", f"input_dir={self.incoming}", "--param", f"factor={factor}"]

    def pipeline(self, *, factor: int, cnt_type: str = "bigint", gate: str = ""):
        params = {
            "input_dir": str(self.incoming),
            "factor": str(factor),
            "cnt_type": cnt_type,
            "gate": gate,
        }
        return load_pipeline(self.file, params)

    def runner(self, spark, *, factor: int, gate: str = "") -> Runner:
        pipeline = self.pipeline(factor=factor, gate=gate)
        return Runner(pipeline, catalog=self.catalog, warehouse=str(self.warehouse), spark=spark)

    def run_buggy(self, spark, files: list[list[str]], *, gate: str = "") -> None:
        runner = self.runner(spark, factor=2, gate=gate)
        for index, words in enumerate(files):
            (self.incoming / f"{index}.txt").write_text("\n".join(words) + "\n")
            assert runner.run_once().exit_code == 0

    def recompute_here(self, spark, table: str = "word_counts", *, factor: int = 1, **params):
        """``table`` and everything downstream recomputed in this process (API, not CLI)."""
        return recompute(
            self.catalog,
            self.pipeline(factor=factor, **params),
            spark,
            RecomputeRequest((table,), downstream=True, reason=f"factor {factor}"),
            warehouse=str(self.warehouse),
        )

    def recompute(self, *extra: str, **env: str):
        return etl(
            "recompute", "word_counts", "--downstream", "--pipeline", self.file,
            *self.params(1), "--warehouse", self.warehouse, "--reason", "factor fix",
            *extra, cwd=self.root, **env,
        )  # fmt: skip

    def location(self, table: str) -> str:
        return self.catalog.get_table(table).location


def _rows(location: str, version: int | None) -> list[dict]:
    return DeltaTable(location, version=version).to_pyarrow_table().to_pylist()


def _verdict(cut: dict[str, list[dict]]) -> tuple[int | None, bool]:
    """(the factor word_counts holds against words, None if none; whether the cut mixes
    revisions: cnt_counts is not what its transform makes of word_counts)."""
    counts = Counter(r["word"] for r in cut["words"])
    factors = {int(r["cnt"]) / counts[r["word"]] for r in cut["word_counts"]}
    factor = int(factors.pop()) if len(factors) == 1 else None
    made = dict(Counter(r["cnt"] for r in cut["word_counts"]))
    mixed = made != {r["cnt"]: r["words"] for r in cut["cnt_counts"]}
    return factor, mixed


def read_through(catalog, chain: Chain, **as_of) -> tuple[int | None, bool]:
    """The verdict on a repeatable-read cut resolved through ``catalog``."""
    with snapshot(catalog, TABLES, "repeatable-read", **as_of) as snap:
        return _verdict({t: _rows(chain.location(t), snap.versions[t]) for t in TABLES})


def repeatable_read(chain: Chain, **as_of) -> tuple[int | None, bool]:
    """The verdict on a repeatable-read cut, read through the SQL catalog and through the
    reads `etl sql` and `etl snapshot` open (SQLite without SQLAlchemy): the same."""
    with open_for_reads(warehouse=chain.warehouse) as reads:
        verdicts = {read_through(catalog, chain, **as_of) for catalog in (chain.catalog, reads)}
    (verdict,) = verdicts
    return verdict


def one_by_one_latest(chain: Chain) -> tuple[int | None, bool]:
    """Every table at its latest Delta version, one after the other (a plain Delta reader)."""
    return _verdict({t: _rows(chain.location(t), None) for t in TABLES})


def _wait_stopped(proc) -> None:
    """Until the process stopped itself at its fault point (SIGSTOP)."""
    for _ in range(6000):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.05)
    raise AssertionError("the recompute never reached its pause point")


WORDS = [["a", "b", "a"], ["c", "b"]]


def test_a_derived_table_left_out_is_refused_naming_it(tmp_path):
    chain = Chain(tmp_path)
    pipeline = load_pipeline(chain.file, {"input_dir": str(chain.incoming)})
    with pytest.raises(RecomputeError, match=r"cnt_counts \(reads word_counts\).*--downstream"):
        recompute_jobs(pipeline, ["word_counts"], downstream=False)
    jobs = recompute_jobs(pipeline, ["word_counts"], downstream=True)
    assert [j.name for j in jobs] == ["count_words", "count_cnts"]


@pytest.mark.slow
@pytest.mark.spark
def test_a_gated_table_is_audited_in_the_revision_a_failing_one_never_switched(tmp_path, spark):
    """A block gate fails the revision (nothing switched); a quarantine gate quarantines the
    revision's failing rows, and the old revision's quarantined rows leave with it."""
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS, gate="quarantine")  # a: 4 (epochs 1 and 2), b: 4 (2)
    quarantine = chain.catalog.get_table("word_counts_quarantine").location
    assert sorted(r["word"] for r in _rows(quarantine, None)) == ["a", "a", "b"]

    with pytest.raises(RecomputeError, match=r"'word_counts' fails its quality gate"):
        chain.recompute_here(spark, factor=5, gate="block")  # every count above MAX_CNT
    assert [r.state for r in chain.catalog.revisions()] == [RevisionState.DISCARDED]

    chain.recompute_here(spark, factor=1, gate="quarantine")
    with snapshot(chain.catalog, [*TABLES, "word_counts_quarantine"], "repeatable-read") as snap:
        counts = _rows(chain.location("word_counts"), snap.versions["word_counts"])
        quarantined = _rows(quarantine, snap.versions["word_counts_quarantine"])
    assert sorted((r["word"], r["cnt"]) for r in counts) == [("a", 2), ("b", 2), ("c", 1)]
    assert quarantined == []
    (validation,) = [
        v for v in chain.catalog.validations("word_counts") if v.epoch == 2 and v.success
    ]

    chain.recompute_here(
        spark, factor=2, gate="quarantine"
    )  # the bug again: the revision quarantines a and b
    with snapshot(chain.catalog, [*TABLES, "word_counts_quarantine"], "repeatable-read") as snap:
        counts = _rows(chain.location("word_counts"), snap.versions["word_counts"])
        quarantined = _rows(quarantine, snap.versions["word_counts_quarantine"])
    assert [(r["word"], r["cnt"]) for r in counts] == [("c", 2)]
    assert sorted(r["word"] for r in quarantined) == ["a", "b"]


@pytest.mark.slow
@pytest.mark.spark
def test_repeatable_read_never_sees_a_mixed_cut_during_a_recompute(tmp_path, spark):
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)
    assert repeatable_read(chain) == (2, False)
    with snapshot(chain.catalog, TABLES, "repeatable-read") as snap:
        chain.catalog.create_tag(
            "before-fix", epoch=snap.epoch, versions=snap.versions, pipeline="fixchain"
        )
    before = datetime.now(UTC)

    # Paused right after word_counts' new content is committed, before cnt_counts is.
    proc = start(
        "recompute", "word_counts", "--downstream", "--pipeline", chain.file,
        *chain.params(1), "--warehouse", chain.warehouse, "--reason", "factor fix",
        cwd=tmp_path, env={"DELTA_BARRIER_FAULT": "pause:after_commit@count_words"},
    )  # fmt: skip
    seen: list[tuple[int | None, bool]] = []
    done = threading.Event()

    def read_in_a_loop() -> None:
        # Each read through one catalog: two reads in a row may straddle the switch.
        with open_for_reads(warehouse=chain.warehouse) as reads:
            for catalog in itertools.cycle((chain.catalog, reads)):
                if done.is_set():
                    return
                seen.append(read_through(catalog, chain))

    reader = threading.Thread(target=read_in_a_loop)
    reader.start()
    try:
        _wait_stopped(proc)
        # The checker can fail: tables read one by one at their latest versions mix the
        # new word_counts with the old cnt_counts...
        assert one_by_one_latest(chain)[1] is True
        # ... while a repeatable-read cut is the old revision, whole.
        assert repeatable_read(chain) == (2, False)
        # A run starting now leaves the recomputed jobs to the recompute and runs the rest.
        (chain.incoming / "2.txt").write_text("d\n")
        during = etl_here(
            "run", chain.file, "--once", *chain.params(1), "--warehouse", chain.warehouse,
            "--format", "json", cwd=tmp_path,
        )  # fmt: skip
        assert during.returncode == 0, during.stderr[-3000:]
        assert json.loads(during.stdout)["left_to_recompute"] == ["count_words", "count_cnts"]
        assert "left to a running recompute" in during.stderr
        assert chain.catalog.latest_written(["words"])["words"].epoch == 3
        assert chain.catalog.latest_written(["word_counts"])["word_counts"].epoch == 2
        os.kill(proc.pid, signal.SIGCONT)
        out, errors = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        done.set()
        reader.join()
    assert proc.returncode == 0, errors[-3000:]
    assert "revision 1 switched" in out
    assert seen and not any(mixed for _, mixed in seen), seen
    factors = [factor for factor, _ in seen]
    assert factors == sorted(factors, reverse=True), "a reader saw the old revision after the new"
    assert repeatable_read(chain) == (1, False)
    # The next run takes the recomputed jobs back and goes on from the switch.
    after = etl_here("run", chain.file, "--once", *chain.params(1), "--warehouse", chain.warehouse, cwd=tmp_path)  # fmt: skip
    assert after.returncode == 0, after.stderr[-3000:]
    level = chain.catalog.latest_written(TABLES)
    assert level["cnt_counts"].epoch == level["words"].epoch == 4
    assert repeatable_read(chain) == (1, False)
    # Time travel to before the switch reads what readers saw then: the old revision.
    assert repeatable_read(chain, as_of_time=before) == (2, False)
    assert repeatable_read(chain, as_of_tag="before-fix") == (2, False)
    assert repeatable_read(chain, as_of_time=datetime.now(UTC)) == (1, False)
    (revision,) = chain.catalog.revisions()
    assert revision.state is RevisionState.SWITCHED
    assert (revision.tables, revision.reason) == (("word_counts", "cnt_counts"), "factor fix")


@pytest.mark.slow
@pytest.mark.spark
def test_a_killed_recompute_is_discarded_by_the_next_recover_or_recompute(tmp_path, spark):
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)

    # Killed with every table written, just before the switch: nothing of it is visible.
    killed = chain.recompute(DELTA_BARRIER_FAULT="before_seal@count_words")
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-3000:]
    assert repeatable_read(chain) == (2, False)
    assert [r.state for r in chain.catalog.revisions()] == [RevisionState.BUILDING]
    # The next run's recovery (etl recover, etl run) rolls it back and says so.
    with chain.runner(spark, factor=1) as runner:
        recovered = runner.recover()
    assert [(r.id, r.state) for r in recovered.discarded] == [(1, RevisionState.DISCARDED)]
    assert one_by_one_latest(chain) == (2, False)  # the tables hold the old revision again

    # Killed in the middle of the build: the next recompute discards it, says so, switches.
    killed = chain.recompute(DELTA_BARRIER_FAULT="after_commit@count_cnts")
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-3000:]
    assert repeatable_read(chain) == (2, False)
    done = chain.recompute()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "discarded revision 2" in done.stdout
    assert "revision 3 switched" in done.stdout
    assert repeatable_read(chain) == one_by_one_latest(chain) == (1, False)
    assert [r.state for r in chain.catalog.revisions()] == [
        RevisionState.DISCARDED,
        RevisionState.DISCARDED,
        RevisionState.SWITCHED,
    ]
    # etl status and etl epochs show revisions: which tables, which epochs, why, by whom.
    status = etl("status", "--warehouse", chain.warehouse, cwd=tmp_path)
    assert "revision 3 switched" in status.stdout, status.stdout
    epochs = etl("epochs", "cnt_counts", "--warehouse", chain.warehouse, cwd=tmp_path).stdout
    assert "revision 1 discarded" in epochs and "revision 3 switched" in epochs, epochs
    assert "cnt_counts from epoch 1 through 2 ('factor fix' by " in epochs, epochs


@pytest.mark.slow
@pytest.mark.spark
def test_a_recompute_from_the_first_epoch_changes_a_type_delta_cannot_widen(tmp_path, spark):
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)
    before = datetime.now(UTC)
    result = chain.recompute_here(spark, cnt_type="string")
    assert [(t.table, t.batches) for t in result.tables] == [
        ("word_counts", ((1, 2),)),
        ("cnt_counts", ((1, 2),)),
    ]
    with snapshot(chain.catalog, TABLES, "repeatable-read") as snap:
        new = DeltaTable(chain.location("word_counts"), version=snap.versions["word_counts"])
    assert pa.schema(new.schema().to_arrow()).field("cnt").type == pa.string()
    assert repeatable_read(chain) == (1, False)
    # The old revision keeps its type, for time travel to before the switch.
    with snapshot(chain.catalog, TABLES, "repeatable-read", as_of_time=before) as snap:
        old = DeltaTable(chain.location("word_counts"), version=snap.versions["word_counts"])
    assert pa.schema(old.schema().to_arrow()).field("cnt").type == pa.int64()
    assert repeatable_read(chain, as_of_time=before) == (2, False)


def _until(condition, what: str, proc=None) -> None:
    for _ in range(3000):
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.communicate()[1][-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


@pytest.mark.slow
@pytest.mark.spark
def test_a_continuous_run_leaves_the_recomputed_jobs_to_it_and_goes_on_after(tmp_path, spark):
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)

    def written(table: str) -> int:
        return chain.catalog.latest_written([table])[table].epoch

    run = start(
        "run", chain.file, "--continuous", "--epoch-interval", "1", *chain.params(2),
        "--warehouse", chain.warehouse, cwd=tmp_path,
    )  # fmt: skip
    try:
        _until(lambda: written("cnt_counts") >= 4, "the run sealed epoch 4", run)
        started = written("words")
        done = chain.recompute()
        assert done.returncode == 0, done.stderr[-3000:]
        (revision,) = chain.catalog.revisions()
        assert revision.state is RevisionState.SWITCHED
        # The table outside the recompute stayed fresh: its job kept sealing epochs.
        assert written("words") > started
        # The recomputed tables' jobs go on from the switch.
        _until(
            lambda: written("cnt_counts") > (revision.through_epoch or 0),
            "cnt_counts sealed an epoch after the switch",
            run,
        )
        assert repeatable_read(chain)[1] is False
    finally:
        run.send_signal(signal.SIGINT)
        out, errors = run.communicate(timeout=300)
    assert run.returncode == 0, errors[-3000:]


@pytest.mark.slow
@pytest.mark.spark
def test_a_root_whose_source_files_are_gone_is_refused_naming_them_before_anything_changes(
    tmp_path, spark
):
    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)
    before = {t: sorted(map(str, _rows(chain.location(t), None))) for t in TABLES}
    (chain.incoming / "1.txt").unlink()
    with pytest.raises(RecomputeError) as refused:
        chain.recompute_here(spark, "words")
    message = str(refused.value)
    assert "cannot recompute words" in message and "1.txt" in message, message
    assert "epoch 2" in message and "Nothing was changed" in message, message
    # Nothing was written: every table holds its old content, and none was RESTOREd.
    assert {t: sorted(map(str, _rows(chain.location(t), None))) for t in TABLES} == before
    for table in TABLES:
        operations = [c.get("operation") for c in DeltaTable(chain.location(table)).history()]
        assert "RESTORE" not in operations, (table, operations)
    assert repeatable_read(chain) == one_by_one_latest(chain) == (2, False)
    (revision,) = chain.catalog.revisions()
    assert revision.state is RevisionState.DISCARDED


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.retention
def test_maintenance_keeps_the_replaced_revision_for_time_travel_to_before_the_switch(
    tmp_path, spark
):
    from datetime import timedelta

    from etl.retention.maintain import maintain

    chain = Chain(tmp_path)
    chain.run_buggy(spark, WORDS)
    before = datetime.now(UTC)
    chain.recompute_here(spark)
    # The old revision's files are in no version the current states name: only the states
    # the switch replaced keep them from being vacuumed.
    with snapshot(chain.catalog, TABLES, "repeatable-read", as_of_time=before) as snap:
        old = snap.versions
    current = {t: s.delta_version for t, s in chain.catalog.latest_written(TABLES).items()}
    assert all(old[t] != current[t] for t in ("word_counts", "cnt_counts"))
    maintain(chain.catalog, orphan_age=timedelta(0), min_files=1)
    assert repeatable_read(chain, as_of_time=before) == (2, False)
    assert repeatable_read(chain) == (1, False)
