"""Exactly once under faults: one regression test per way the engine used to lose or
duplicate a row (issue 10). Crashes are simulated in-process by raising from a fault
point (no cleanup of ours runs on the way out, as with a kill); a superseded runner is a
second Runner of the same pipeline whose lease another runner took over while it was
paused. The fault campaign (tests/faults) explores such schedules by itself.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import great_expectations as gx
import pytest

from catalog import EpochState, load_catalog
from consistency import EpochBatch
from etl import FileSource, Pipeline, Runner, snapshot
from etl.delta import EPOCH_COLUMN, table_version
from etl.engine import BatchWrite
from etl.errors import DuplicateMergeKeyError, LeaseLostError
from etl.leases import LeaseKeeper
from etl.quality import QualityGate
from etl.sources.base import SliceData, SliceRequest, Source
from etl.storage import filesystem

pytestmark = [pytest.mark.spark, pytest.mark.recovery]


class SimulatedCrash(BaseException):
    """Raised at a fault point: unwinds past every `except Exception`, like a kill."""


@contextmanager
def crash_at(point: str, *, nth: int = 1) -> Iterator[None]:
    """Within the block, the nth time the engine reaches fault point ``point`` it crashes."""
    import etl.engine.batch
    import etl.engine.commit
    import etl.engine.recovery

    reached = {"count": 0}

    def maybe_crash(name: str, *, job: str, epoch: int) -> None:
        if name == point:
            reached["count"] += 1
            if reached["count"] == nth:
                raise SimulatedCrash(f"{point} #{nth} ({job}, epoch {epoch})")

    with pytest.MonkeyPatch.context() as patch:
        for module in (etl.engine.batch, etl.engine.commit, etl.engine.recovery):
            patch.setattr(module, "maybe_crash", maybe_crash)
        yield


class ListSource(Source):
    """Rows handed in per epoch by the test; a slice records them in its bounds, so a replay
    reads exactly the same rows. ``None`` in place of a row is a record that cannot be
    decoded: it goes to the rejects. Micro-batches hold ``per_part`` records each."""

    produces_rejects = True

    def __init__(self, name: str, *, per_part: int = 1) -> None:
        self.name = name
        self.per_part = per_part
        self.pending: list[list[object] | None] = []
        self.block_part: int | None = None
        self.blocked = threading.Event()
        self.release = threading.Event()

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        taken, self.pending = self.pending, []
        return {"records": taken}

    def micro_batches(self, bounds: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        records = list(bounds["records"])  # type: ignore[call-overload]
        if len(records) <= self.per_part:
            return ({"records": records, "part": 0},)
        return tuple(
            {"records": records[i : i + self.per_part], "part": i // self.per_part}
            for i in range(0, len(records), self.per_part)
        )

    def read(self, spark, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        if bounds.get("part") == self.block_part:
            self.block_part = None  # once: the replay by another runner reads on
            self.blocked.set()
            assert self.release.wait(120)
        records = list(bounds["records"])  # type: ignore[call-overload]
        rows = [tuple(r) for r in records if r is not None]
        rejects = [(epoch, str(i)) for i, r in enumerate(records) if r is None]
        return SliceData(
            rows=spark.createDataFrame(rows, "k string, v long"),
            rejects=spark.createDataFrame(rejects, "source_epoch long, record string"),
        )


def make_runner(pipeline: Pipeline, root: Path, spark, **options) -> Runner:
    warehouse = root / "warehouse"
    catalog = load_catalog(None, warehouse=warehouse)
    runner = Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark, **options)
    runner.register()
    return runner


def committed(runner: Runner, table: str, columns: Sequence[str] = ("k", "v")) -> list[tuple]:
    reader = snapshot(runner.catalog, [table], "read-committed", spark=runner.spark)
    return sorted(tuple(r) for r in reader.table(table).select(*columns).collect())


def ingest_pipeline(source: ListSource, *, mode: str = "append", keys=()) -> Pipeline:
    pipeline = Pipeline("eo")
    pipeline.job("ingest", output="facts", source=source, mode=mode, keys=keys, rejects="rejects")(
        None
    )
    return pipeline


@pytest.fixture
def no_renewal(monkeypatch):
    """Runners whose owner is in the returned set stop renewing: they stall like a paused
    process, and their lease lapses."""
    stalled: set[str] = set()
    renew = LeaseKeeper.renew_all

    def renew_all(self: LeaseKeeper) -> None:
        if self.owner not in stalled:
            renew(self)

    monkeypatch.setattr(LeaseKeeper, "renew_all", renew_all)
    return stalled


def in_thread(fn) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# -- 1. a superseded runner can change nothing -----------------------------------------


def test_a_superseded_runner_cannot_commit_after_another_took_over(tmp_path, spark, no_renewal):
    source = ListSource("feed")
    zombie = make_runner(ingest_pipeline(source), tmp_path, spark, lease_ttl_seconds=1.0)
    no_renewal.add(zombie.owner)
    source.pending = [["a", 1], ["b", 2], ["c", 3]]
    source.block_part = 1  # the zombie stalls after committing micro-batch 0
    thread, outcome = in_thread(zombie.run_once)
    assert source.blocked.wait(120)
    time.sleep(1.3)  # the zombie's lease lapses

    fresh = make_runner(ingest_pipeline(source), tmp_path, spark)
    result = fresh.run_once()
    assert result.ok, result.failures
    assert [s.action.value for s in result.recovered] == ["rolled back", "rolled back"]
    assert committed(fresh, "facts") == [("a", 1), ("b", 2), ("c", 3)]

    source.release.set()  # the zombie wakes up and tries its micro-batch 1
    thread.join(120)
    failures = outcome["result"].failures
    assert failures and isinstance(failures[0].exception, LeaseLostError)
    assert committed(fresh, "facts") == [("a", 1), ("b", 2), ("c", 3)]
    rows = fresh.catalog.table_epoch("facts", 1).rows
    assert rows == 3


def test_a_superseded_runner_cannot_restore_after_another_took_over(
    tmp_path, spark, monkeypatch, no_renewal
):
    import etl.engine.recovery

    source = ListSource("feed")
    pipeline = ingest_pipeline(source)
    first = make_runner(pipeline, tmp_path, spark)
    source.pending = [["a", 1], ["b", 2]]
    with crash_at("between_micro_batches"), pytest.raises(SimulatedCrash):
        first.run_once()

    # The zombie plans the rollback of epoch 1, then stalls just before its RESTORE.
    restore = etl.engine.recovery.restore_table
    at_restore, go_on = threading.Event(), threading.Event()
    calls = {"n": 0}

    def stalling_restore(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            at_restore.set()
            assert go_on.wait(120)
        return restore(*args, **kwargs)

    monkeypatch.setattr(etl.engine.recovery, "restore_table", stalling_restore)
    time.sleep(1.0)
    zombie = make_runner(pipeline, tmp_path, spark, lease_ttl_seconds=1.0)
    no_renewal.add(zombie.owner)
    thread, outcome = in_thread(zombie.run_once)
    assert at_restore.wait(120)
    time.sleep(1.3)

    fresh = make_runner(pipeline, tmp_path, spark)
    assert fresh.run_once().ok
    source.pending = [["c", 3]]
    assert fresh.run_once().ok  # the next epoch is sealed on top
    expected = [("a", 1), ("b", 2), ("c", 3)]
    assert committed(fresh, "facts") == expected

    go_on.set()
    thread.join(120)
    assert "error" in outcome or not outcome["result"].ok
    assert committed(fresh, "facts") == expected
    source.pending = []
    assert fresh.run_once().ok  # and nothing left for a later run to notice
    assert committed(fresh, "facts") == expected


# -- 2. a recorded slice is read even when its epoch is caught up later -------------------


def test_a_recorded_slice_is_read_when_its_epoch_joins_a_catch_up(tmp_path, spark):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    fail = {"on": True}
    pipeline = Pipeline("eo")

    @pipeline.job(
        "ingest",
        output="lines",
        source=FileSource("drops", path=incoming, format="json", schema="k string, v long"),
    )
    def ingest(ctx):
        if fail["on"]:
            raise RuntimeError("the transform fails after the slice was recorded")
        return ctx["drops"]

    runner = make_runner(pipeline, tmp_path, spark, backlog_threshold=2)
    (incoming / "a.json").write_text('{"k": "a", "v": 1}\n')
    assert not runner.run_once().ok
    assert runner.catalog.get_slice("drops", 1) is not None
    for epoch, name in ((2, "b"), (3, "c")):
        (incoming / f"{name}.json").write_text(f'{{"k": "{name}", "v": {epoch}}}\n')
        runner.open_epoch()
    fail["on"] = False
    with runner:
        runner.recover()
        result = runner.run_pending()
    assert result.ok, result.failures
    assert [(b.first_epoch, b.epoch) for b in result.batches] == [(1, 1), (2, 3)]
    assert committed(runner, "lines") == [("a", 1), ("b", 2), ("c", 3)]


@pytest.mark.s3
def test_a_crash_between_micro_batches_of_files_on_s3_replays_the_same_files_once(
    tmp_path, spark, s3_bucket
):
    """A FileSource on a bucket prefix: the replay of the crashed epoch reads the files its
    recorded slice names, not a file that arrived since; that file comes once, later."""
    incoming = f"{s3_bucket}/incoming"
    fs, root = filesystem(incoming)

    def drop(name: str, v: int) -> None:
        with fs.open_output_stream(f"{root}/{name}.json") as out:
            out.write(json.dumps({"k": name, "v": v}).encode() + b"\n")

    source = FileSource(
        "drops", path=incoming, format="json", schema="k string, v long", files_per_micro_batch=1
    )
    pipeline = Pipeline("eo")
    pipeline.job("ingest", output="lines", source=source)(None)
    runner = make_runner(pipeline, tmp_path, spark)
    drop("a", 1)
    drop("b", 2)
    with crash_at("between_micro_batches"), pytest.raises(SimulatedCrash):
        runner.run_once()
    drop("c", 3)
    assert runner.run_once().ok
    assert runner.run_once().ok
    recorded = runner.catalog.get_slice("drops", 1)
    assert recorded is not None and recorded.bounds["files"] == ["a.json", "b.json"]
    assert committed(runner, "lines") == [("a", 1), ("b", 2), ("c", 3)]


# -- 3. a replay that died after its commit gets a new attempt number -----------------


def test_a_replay_that_died_after_its_commit_is_replayed_again_completely(tmp_path, spark):
    source = ListSource("feed")
    pipeline = ingest_pipeline(source)
    runner = make_runner(pipeline, tmp_path, spark)
    source.pending = [["a", 1], ["b", 2], ["c", 3]]
    with crash_at("between_micro_batches"), pytest.raises(SimulatedCrash):
        runner.run_once()
    # The replay dies right after its first commit, before recording it.
    with crash_at("after_commit"), pytest.raises(SimulatedCrash):
        runner.run_once()
    result = runner.run_once()
    assert result.ok, result.failures
    assert committed(runner, "facts") == [("a", 1), ("b", 2), ("c", 3)]
    attempts = [h.attempt for h in runner.catalog.state_history("facts", epoch=1)]
    assert attempts[-1] == 3


@pytest.mark.parametrize(
    ("nth", "recovered"),
    [(1, "rolled back: the rejects committed, the output not"), (2, "sealed: both committed")],
)
def test_a_crash_between_the_final_commits_and_the_seal_of_a_job_without_a_gate(
    tmp_path, spark, nth, recovered
):
    """A job without a quality gate records its final commits with the seal alone: a crash
    after them leaves only the log to say they happened. Recovery reads them there (the
    rejects' commit without the output's is rolled back and replayed, both are sealed as
    they are), and every row is committed once."""
    from catalog import EpochState

    source = ListSource("feed", per_part=10)
    runner = make_runner(ingest_pipeline(source), tmp_path, spark)
    source.pending = [["a", 1], None, ["b", 2]]
    with crash_at("after_commit", nth=nth), pytest.raises(SimulatedCrash):
        runner.run_once()
    assert runner.catalog.states_at(["facts", "rejects"], 1) == {}  # only the log knows
    result = runner.run_once()
    assert result.ok, result.failures
    assert committed(runner, "facts") == [("a", 1), ("b", 2)]
    assert committed(runner, "rejects", ("source_epoch", "record")) == [(1, "1")]
    history = {
        table: [(h.state, h.attempt) for h in runner.catalog.state_history(table, epoch=1)]
        for table in ("facts", "rejects")
    }
    if nth == 1:
        assert history == {
            "facts": [(EpochState.WRITTEN, 2)],
            "rejects": [
                (EpochState.PROCESSED, 1),  # recovery records what the log holds, then undoes it
                (EpochState.ROLLED_BACK, 1),
                (EpochState.PROCESSED, 2),
                (EpochState.WRITTEN, 2),
            ],
        }, recovered
    else:
        assert history == {
            "facts": [(EpochState.WRITTEN, 1)],
            "rejects": [(EpochState.WRITTEN, 1)],
        }, recovered


# -- 4. side outputs follow their output -------------------------------------------------


def test_rejects_are_sealed_with_the_output_after_a_block_and_a_rerun(tmp_path, spark):
    source = ListSource("feed", per_part=2)
    pipeline = ingest_pipeline(source)
    gate = [gx.expectations.ExpectColumnValuesToBeBetween(column="v", min_value=0)]
    pipeline.expect(QualityGate("facts", gate, policy="block"))
    runner = make_runner(pipeline, tmp_path, spark)
    # Micro-batch 0 has a reject, micro-batch 1 has none and a row the gate blocks.
    source.pending = [["a", 1], None, ["b", -2]]
    result = runner.run_once()
    assert result.ok and [b.outcome.value for b in result.batches] == ["blocked"]

    pipeline.gates["facts"] = QualityGate("facts", gate, policy="warn")
    result = runner.run_once()
    assert result.ok, result.failures
    states = {t: runner.catalog.table_epoch(t, 1).state for t in ("facts", "rejects")}
    assert states == {"facts": EpochState.WRITTEN, "rejects": EpochState.WRITTEN}
    # The gate's quarantine table (empty) stays a side output under warn: COMMIT goes on.
    commit = runner.catalog.get_commit(1)
    assert commit is not None and "facts_quarantine" in commit.versions
    assert committed(runner, "facts") == [("a", 1), ("b", -2)]
    assert committed(runner, "rejects", ("source_epoch", "record")) == [(1, "1")]


# -- 5. quarantine on a merge table keeps the key's sealed row --------------------------


def test_quarantine_on_a_merge_table_keeps_the_previous_row_of_a_quarantined_key(tmp_path, spark):
    source = ListSource("feed", per_part=10)
    pipeline = ingest_pipeline(source, mode="merge", keys=("k",))
    gate = [gx.expectations.ExpectColumnValuesToBeBetween(column="v", min_value=0)]
    pipeline.expect(QualityGate("facts", gate, policy="quarantine", quarantine="facts_bad"))
    runner = make_runner(pipeline, tmp_path, spark)
    source.pending = [["a", 10], ["b", 20]]
    assert runner.run_once().ok
    source.pending = [["a", -5], ["c", 3]]
    result = runner.run_once()
    assert result.ok and result.batches[-1].quarantined == 1
    assert committed(runner, "facts") == [("a", 10), ("b", 20), ("c", 3)]
    assert committed(runner, "facts_bad") == [("a", -5)]


# -- 6. micro-batch and attempt numbers never collide ------------------------------------


def test_micro_batch_numbers_beyond_4095_commit_like_any_other(tmp_path, spark):
    source = ListSource("feed")
    runner = make_runner(ingest_pipeline(source), tmp_path, spark)
    job = runner.pipeline.jobs["ingest"]
    epoch = runner.open_epoch().id
    frame = spark.createDataFrame([("a", 1)], "k string, v long").selectExpr(
        "*", f"CAST({epoch} AS BIGINT) AS {EPOCH_COLUMN}"
    )
    with runner:
        lease = runner._lease(job)
        engine = runner.engine
        first = engine.writer(job, EpochBatch(epoch, epoch), attempt=1, lease=lease)
        written = first.write(
            BatchWrite(), table="facts", frame=frame, part=4096, final=False, mode="append"
        )
        # Packed as epoch | attempt | micro-batch in 12-bit fields, (attempt 1, part 4096)
        # and (attempt 2, part 0) were one transaction version: the second was skipped.
        second = engine.writer(job, EpochBatch(epoch, epoch), attempt=2, lease=lease)
        again = second.write(
            BatchWrite(), table="facts", frame=frame, part=0, final=True, mode="append"
        )
    assert again.versions["facts"] == written.versions["facts"] + 1
    reader = snapshot(runner.catalog, ["facts"], "read-uncommitted", spark=spark)
    assert reader.table("facts").count() == 2


# -- 7. a file source takes files by name, not by modification time ----------------------


def test_a_file_moved_in_with_an_old_modification_time_is_taken_once(tmp_path, spark):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    pipeline = Pipeline("eo")
    pipeline.ingest(
        "ingest",
        source=FileSource("drops", path=incoming, format="json", schema="k string, v long"),
        output="lines",
    )
    runner = make_runner(pipeline, tmp_path, spark)
    (incoming / "new.json").write_text('{"k": "new", "v": 1}\n')
    assert runner.run_once().ok
    old = incoming / "old.json"
    old.write_text('{"k": "old", "v": 2}\n')
    a_day_ago = time.time() - 86_400
    os.utime(old, (a_day_ago, a_day_ago))  # `cp -p` of a file made yesterday
    assert runner.run_once().ok
    assert runner.run_once().ok
    assert committed(runner, "lines") == [("new", 1), ("old", 2)]


# -- 8. overwrite with micro-batches keeps the whole epoch -----------------------------


def test_an_overwrite_job_with_micro_batches_keeps_every_micro_batch(tmp_path, spark):
    source = ListSource("feed")
    runner = make_runner(ingest_pipeline(source, mode="overwrite"), tmp_path, spark)
    source.pending = [["old", 0]]
    assert runner.run_once().ok
    source.pending = [["a", 1], ["b", 2], ["c", 3]]
    assert runner.run_once().ok
    assert committed(runner, "facts") == [("a", 1), ("b", 2), ("c", 3)]


# -- 9. a merge table's first epoch checks duplicate keys too ------------------------


def test_a_merge_tables_first_epoch_refuses_duplicate_keys(tmp_path, spark):
    source = ListSource("feed", per_part=10)
    runner = make_runner(ingest_pipeline(source, mode="merge", keys=("k",)), tmp_path, spark)
    source.pending = [["a", 1], ["a", 2]]
    result = runner.run_once()
    assert not result.ok
    assert isinstance(result.failures[0].exception, DuplicateMergeKeyError)
    assert table_version(runner.catalog.get_table("facts").location) is None


# -- 10. recovery keeps the gate's original verdict -------------------------------------


def test_a_crash_after_quarantine_keeps_the_epochs_failed_verdict(tmp_path, spark):
    source = ListSource("feed", per_part=10)
    pipeline = ingest_pipeline(source)
    gate = [gx.expectations.ExpectColumnValuesToBeBetween(column="v", min_value=0)]
    pipeline.expect(QualityGate("facts", gate, policy="quarantine", quarantine="facts_bad"))
    runner = make_runner(pipeline, tmp_path, spark)
    source.pending = [["a", 1], ["b", -1]]
    with crash_at("before_seal"), pytest.raises(SimulatedCrash):
        runner.run_once()
    result = runner.run_once()
    assert result.ok, result.failures
    [record] = runner.catalog.validations("facts", epoch=1)
    assert record.success is False
    assert committed(runner, "facts") == [("a", 1)]
    assert committed(runner, "facts_bad") == [("b", -1)]


@pytest.mark.postgres
@pytest.mark.parametrize("point", ["after_commit", "after_processed"])
def test_a_batch_whose_catalog_session_the_server_ended_recovers_by_itself(
    tmp_path, spark, postgres_url, postgres_server, point
):
    """The server ends the batch's catalog session while a statement of the batch waits (as
    PostgreSQL does to a process that froze inside a transaction): the run recovers the job
    (the Delta commit that may have landed is sealed or rolled back) and goes on, each row
    once, instead of failing the job."""
    import sqlalchemy as sa

    import etl.engine.commit

    name = "db-interrupted-batch-test"
    catalog = load_catalog(f"{postgres_url}&application_name={name}")
    source = ListSource("feed")
    runner = Runner(
        ingest_pipeline(source),
        catalog=catalog,
        warehouse=str(tmp_path / "warehouse"),
        spark=spark,
        lease_ttl_seconds=600,  # no renewal statement competes with the batch's
    )
    runner.register()
    source.pending = [["a", 1], ["b", 2], None]
    admin = sa.create_engine(postgres_url)
    ended: list[int] = []

    def end_the_waiting_session(locker: sa.Connection, transaction: sa.Transaction) -> None:
        try:
            for _ in range(600):
                pids = locker.execute(
                    sa.text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                        "AND wait_event_type = 'Lock'"
                    ),
                    {"name": name},
                ).scalars()
                pids = list(pids)
                if pids:
                    for pid in pids:
                        locker.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                    ended.extend(pids)
                    return
                time.sleep(0.05)
        finally:
            transaction.rollback()
            locker.close()

    def lock_the_catalog_once(at: str, *, job: str, epoch: int) -> None:
        if at != point or ended or threads:
            return
        locker = admin.connect()
        transaction = locker.begin()
        tables = locker.execute(
            sa.text(
                "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
                "WHERE schemaname = current_schema()"
            )
        ).scalar_one()
        locker.execute(sa.text(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE"))
        thread = threading.Thread(target=end_the_waiting_session, args=(locker, transaction))
        thread.start()
        threads.append(thread)

    threads: list[threading.Thread] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(etl.engine.commit, "maybe_crash", lock_the_catalog_once)
        result = runner.run_once()
    for thread in threads:
        thread.join(60)
    admin.dispose()
    assert ended, "the batch's catalog session was never ended: the test did not interrupt it"
    assert result.ok, result.failures
    assert committed(runner, "facts") == [("a", 1), ("b", 2)]
    assert runner.catalog.table_epoch("facts", 1).state is EpochState.WRITTEN
    assert runner.catalog.table_epoch("facts", 1).rows == 2
    assert len(runner.catalog.table_epochs("rejects")) == 1
    catalog.close()
