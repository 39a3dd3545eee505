"""Retention at run time (issue 11): pinned readers survive maintenance, expired epochs give
a clear error, orphans go only after the safety age, compaction keeps every retained cut,
and other Delta readers read every retained version after maintenance."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from catalog import EpochExpiredError, EpochState, load_catalog
from etl import Retention, snapshot
from etl.delta.log import active_files
from etl.delta.maintenance import MAINTENANCE_META, stored_files
from etl.retention.gate import BatchGate
from etl.retention.in_run import MaintenanceLoop
from etl.retention.maintain import HeldJobs, maintain
from tests.support.retention_env import BASE, Env

pytestmark = [pytest.mark.retention, pytest.mark.spark]


def _files(location: str) -> list[str]:
    return [f.path for f in active_files(DeltaTable(location))]


def _duckdb(location: str, version: int) -> list[tuple]:
    (ext,) = [
        f
        for f in importlib.metadata.files("duckdb-ext-delta")
        if f.name == "delta.duckdb_extension"
    ]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext.locate()}'")
    con.execute(f"ATTACH 'file://{location}' AS t (TYPE delta)")
    return sorted(
        con.execute(f"SELECT id, amount, _epoch FROM t AT (VERSION => {version})").fetchall()
    )


def _all_readers(reader, env: Env, table: str) -> dict[str, list[tuple]]:
    version = reader.read_version(table)
    spark_rows = sorted(
        tuple(r) for r in reader.table(table).select("id", "amount", "_epoch").collect()
    )
    arrow = reader.arrow(table, columns=["id", "amount", "_epoch"])
    rs_rows = sorted(
        zip(*(arrow.column(c).to_pylist() for c in ("id", "amount", "_epoch")), strict=True)
    )
    return {
        "spark": spark_rows,
        "delta-rs": rs_rows,
        "duckdb": _duckdb(env.location(table), version),
    }


def test_pinned_reader_survives_maintenance_and_expired_epoch_errors(tmp_path, spark):
    env = Env(tmp_path, spark, Retention(every_epoch_for="1h"))
    e1 = env.epoch(0)
    e2 = env.epoch(1)
    reader = snapshot(env.catalog, ["orders", "big"], as_of_epoch=e1, spark=spark)
    before = {t: _all_readers(reader, env, t) for t in ("orders", "big")}
    assert before["orders"]["spark"] == before["orders"]["duckdb"] == before["orders"]["delta-rs"]
    for i in range(3):  # new epochs arrive, maintenance runs repeatedly
        env.epoch(2 + i)
        report = maintain(
            env.catalog, now=BASE + timedelta(hours=10 + i), orphan_age=timedelta(0), min_files=2
        )
        assert e1 not in report.epochs_expired
        assert {t: _all_readers(reader, env, t) for t in ("orders", "big")} == before
    assert env.catalog.expiry_of(e2) is not None
    with pytest.raises(EpochExpiredError) as err:
        snapshot(env.catalog, ["orders"], as_of_epoch=e2)
    assert str(e2) in str(err.value) and "every epoch for 1h" in str(err.value)
    reader.close()
    env.epoch(6)  # seals on top of the compacted files: the small ones are no longer needed
    report = maintain(env.catalog, now=BASE + timedelta(hours=20), orphan_age=timedelta(0))
    assert e1 in report.epochs_expired and report.files_removed > 0
    with pytest.raises(EpochExpiredError, match=f"epoch {e1} "):
        snapshot(env.catalog, ["orders"], as_of_epoch=e1)
    latest = snapshot(env.catalog, ["orders", "big"], spark=spark)
    with latest:
        rows = _all_readers(latest, env, "orders")
        assert rows["spark"] == rows["duckdb"] == rows["delta-rs"]
        assert len(rows["spark"]) == 2 * 6


def test_compaction_keeps_every_retained_cut_and_drops_file_count(tmp_path, spark):
    env = Env(tmp_path, spark, None)  # keep everything
    epochs = [env.epoch(i) for i in range(4)]
    cuts = {}
    for e in epochs:
        with snapshot(env.catalog, ["orders", "big"], as_of_epoch=e, spark=spark) as r:
            cuts[e] = {t: _all_readers(r, env, t)["delta-rs"] for t in ("orders", "big")}
    files_before = len(_files(env.location("orders")))
    report = maintain(env.catalog, orphan_age=timedelta(0), min_files=2)
    compacted = {t.table: t.compacted_files for t in report.tables}
    assert compacted["orders"] >= 2, report
    assert len(_files(env.location("orders"))) < files_before
    env.epoch(5)  # recovery and the next epoch accept the compaction commit
    for e in epochs:
        with snapshot(env.catalog, ["orders", "big"], as_of_epoch=e, spark=spark) as r:
            for t in ("orders", "big"):
                got = _all_readers(r, env, t)
                assert got["delta-rs"] == got["spark"] == got["duckdb"] == cuts[e][t], (e, t)
    # Compaction rearranges rows already in the table (dataChange false, so streaming
    # readers do not read them again); the jobs' commits change data.
    changes = _data_changes(env.location("orders"))
    compactions = [v for v, (is_compaction, _) in changes.items() if is_compaction]
    assert compactions, changes
    for version, (is_compaction, flags) in changes.items():
        if is_compaction:
            assert flags == {("add", False), ("remove", False)}, (version, flags)
        elif flags:
            assert {change for _, change in flags} == {True}, (version, flags)
    assert any(("add", True) in flags for _, flags in changes.values())


def _data_changes(location: str) -> dict[int, tuple[bool, set[tuple[str, bool]]]]:
    """Per version of the table's log: (a compaction commit?, {(action, dataChange)})."""
    found = {}
    for entry in sorted(Path(location, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        flags = {
            (kind, a[kind]["dataChange"])
            for a in actions
            for kind in ("add", "remove")
            if kind in a
        }
        found[int(entry.stem)] = (info.get(MAINTENANCE_META) == "compaction", flags)
    return found


def test_a_cut_reads_its_compacted_version_and_vacuum_keeps_it(tmp_path, spark):
    """A cut is read at the newest version after it whose commits changed no row (here a
    compaction), from fewer files; that version's files stay while the cut is kept, even
    when no other kept version needs them."""
    env = Env(tmp_path, spark, Retention(every_epoch_for="1h"))
    epochs = [env.epoch(i) for i in range(4)]
    location = env.location("orders")
    sealed = env.catalog.table_epoch("orders", epochs[-1]).delta_version
    plain = sorted(DeltaTable(location, version=sealed).to_pyarrow_table().to_pylist(), key=str)
    maintain(env.catalog, now=BASE + timedelta(hours=3), orphan_age=timedelta(0), min_files=2)
    reader = snapshot(env.catalog, ["orders"], as_of_epoch=epochs[-1], spark=spark)
    with reader:
        assert reader.versions["orders"] == sealed
        compacted = reader.read_version("orders")
        # etl maintain took the job's lease: it claims the table (no row changes), then
        # compacts it.
        assert compacted == sealed + 2
        assert len(_files_at(location, compacted)) < len(_files_at(location, sealed))
        before = _all_readers(reader, env, "orders")
        assert before["spark"] == before["duckdb"] == before["delta-rs"]
        assert sorted(reader.arrow("orders").to_pylist(), key=str) == plain
        # the compacted file is then compacted again and no kept version but the cut's
        # successor needs it; the pinned cut's epoch outlives every other expired one
        env.epoch(4)
        maintain(env.catalog, now=BASE + timedelta(hours=4), orphan_age=timedelta(0), min_files=2)
        env.epoch(5)
        report = maintain(env.catalog, now=BASE + timedelta(hours=50), orphan_age=timedelta(0))
        assert epochs[-1] not in report.epochs_expired and report.files_removed > 0
        needed = set(_files_at(location, compacted))
        assert needed - set(_files_at(location, DeltaTable(location).version()))
        assert needed <= {f.path for f in stored_files(location)}
        assert _all_readers(reader, env, "orders") == before


def test_orphans_removed_after_safety_age_only(tmp_path, spark):
    env = Env(tmp_path, spark, None)
    env.epoch(0)
    location = Path(env.location("orders"))
    orphan = location / "part-crashed-0001.parquet"
    orphan.write_bytes((location / _files(str(location))[0]).read_bytes())
    staging = location / "_delta_barrier_staging-crashed-x"
    staging.mkdir()
    (staging / "part-0.parquet").write_bytes(b"x")
    # What a writer killed mid-commit leaves in the log: ours, delta-rs', object_store's.
    log = location / "_delta_log"
    entries = sorted(p.name for p in log.iterdir())
    leftovers = [
        log / f".{5:020d}.json.{'a' * 32}.tmp",
        log / "_commit_0b7e2f.json.tmp",
        log / f"{5:020d}.json#1",
    ]
    for leftover in leftovers:
        leftover.write_text('{"commitInfo":{}}\n')
    report = maintain(env.catalog, orphan_age=timedelta(hours=1))
    assert orphan.exists() and staging.exists(), report  # a batch in flight looks like this
    assert all(leftover.exists() for leftover in leftovers)  # a commit in flight too
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    for leftover in leftovers:
        os.utime(leftover, (old, old))
    os.utime(staging / "part-0.parquet", (old, old))
    os.utime(staging, (old, old))
    # while the writer's lease is held by a live run, its staging directory stays
    lease = env.catalog.acquire_lease("ingest", "someone-else", ttl_seconds=60)
    report = maintain(env.catalog, orphan_age=timedelta(hours=1), compaction=False)
    assert not orphan.exists() and staging.exists()
    assert not any(leftover.exists() for leftover in leftovers)
    assert any(t.orphans_removed == 1 + len(leftovers) for t in report.tables)
    assert set(entries) <= {p.name for p in log.iterdir()}  # no log entry went with them
    env.catalog.release_lease(lease)
    maintain(env.catalog, orphan_age=timedelta(hours=1), compaction=False)
    assert not staging.exists()
    assert {f.path for f in stored_files(str(location))} == set(_files(str(location)))


def _history(location: str) -> list[tuple[int, bool, int]]:
    """(version, is a compaction commit, active files) of every version of a table."""
    table = DeltaTable(location)
    compactions = {h["version"] for h in table.history() if h.get(MAINTENANCE_META) == "compaction"}
    return [(v, v in compactions, len(_files_at(location, v))) for v in range(table.version() + 1)]


def _files_at(location: str, version: int) -> list[str]:
    return [f.path for f in active_files(DeltaTable(location, version=version))]


def test_compaction_coexists_with_a_continuous_run(tmp_path, spark):
    import threading

    env = Env(tmp_path, spark, None)
    epochs = [env.epoch(i) for i in range(4)]
    cuts = {}
    for e in epochs:
        with snapshot(env.catalog, ["orders"], as_of_epoch=e) as r:
            cuts[e] = sorted(r.arrow("orders").to_pylist(), key=lambda row: row["id"])
    env.runner.acquire()
    inside = MaintenanceLoop(
        env.catalog,
        pipeline="shop",
        interval=0.3,
        leases=env.runner.leases,
        gate=env.runner.gate,
        options={"min_files": 2, "orphan_age": timedelta(0)},
    )
    outside: list = []

    def cron() -> None:  # `etl maintain` from another process while the run holds the jobs
        catalog = load_catalog(None, warehouse=env.warehouse)
        for _ in range(2):
            time.sleep(1.0)
            env.drop()  # new data keeps arriving
            outside.append(maintain(catalog, orphan_age=timedelta(0), min_files=2))

    def compacted_then_written() -> bool:
        history = DeltaTable(env.location("orders")).history()
        compacted = [h["version"] for h in history if h.get(MAINTENANCE_META) == "compaction"]
        return bool(compacted) and any(
            h["version"] > min(compacted) and MAINTENANCE_META not in h for h in history
        )

    stop = threading.Event()

    def watch() -> None:  # the run goes on until all of it happened, however slow the machine
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
            inside.totals.compacted_files >= 2
            and not thread.is_alive()
            and compacted_then_written()
        ):
            time.sleep(0.2)
        stop.set()

    thread = threading.Thread(target=cron)
    watcher = threading.Thread(target=watch)
    env.drop()  # for the first epoch of the run, sealed on top of the compacted files
    thread.start()
    try:
        with inside:
            watcher.start()
            result = env.runner.run_continuous(epoch_interval=1.0, stop=stop)
    finally:
        env.runner.release()
    thread.join()
    watcher.join()
    assert result.ok, result
    assert inside.totals.compacted_files >= 2 and not inside.totals.errors, inside.totals
    assert len(result.epochs_opened) >= 2 and not result.failures
    assert any("held by a live run" in s for r in outside for t in r.tables for s in t.skipped)
    # maintenance inside the run compacted the tables while no batch of their job ran,
    # under the run's own leases, and the run kept sealing epochs on top of them
    history = _history(env.location("orders"))  # ("big" gets no rows: amounts < 10)
    compactions = [v for v, is_compaction, _ in history if is_compaction]
    assert compactions, history
    assert history[compactions[0]][2] < history[compactions[0] - 1][2], history
    assert any(v > compactions[0] and not c for v, c, _ in history), history
    written = {
        row.epoch: row.delta_version
        for row in env.catalog.table_epochs("orders")
        if row.delta_version is not None
    }
    last = result.epochs_opened[-1].id
    assert last in written and written[last] > compactions[0]
    for e in epochs:  # retained cuts still read the same rows
        with snapshot(env.catalog, ["orders"], as_of_epoch=e) as r:
            assert sorted(r.arrow("orders").to_pylist(), key=lambda row: row["id"]) == cuts[e]
    with snapshot(env.catalog, ["orders"], spark=spark) as r:
        got = _all_readers(r, env, "orders")
    assert got["spark"] == got["duckdb"] == got["delta-rs"] and len(got["spark"]) >= 10


def test_compaction_inside_a_run_never_commits_while_a_batch_of_its_job_runs(tmp_path, spark):
    env = Env(tmp_path, spark, None)
    for i in range(4):
        env.epoch(i)
    location = env.location("orders")
    version, stored = DeltaTable(location).version(), set(stored_files(location))
    gate = BatchGate()
    with env.runner:
        held = HeldJobs(env.runner.leases(), gate, idle_wait=0.5)
        with gate.batch("ingest"):  # a batch of the job that writes `orders` is in flight
            report = maintain(env.catalog, orphan_age=timedelta(0), min_files=2, held=held)
        (entry,) = [t for t in report.tables if t.table == "orders"]
        assert entry.compacted_files == 0
        assert any("a batch of job 'ingest' kept running" in s for s in entry.skipped), entry
        # nothing committed, and the rewritten files are gone again
        assert DeltaTable(location).version() == version
        assert set(stored_files(location)) == stored
        report = maintain(env.catalog, orphan_age=timedelta(0), min_files=2, held=held)
        (entry,) = [t for t in report.tables if t.table == "orders"]
        assert entry.compacted_files >= 2 and not entry.skipped, entry
        assert DeltaTable(location).version() == version + 1


def test_status_and_epochs_show_expired_pinned_and_tagged_epochs(tmp_path):
    """Through the real `etl` command, on a history written through the catalog API."""
    from catalog import JobSpec, SealRequest, TableSpec, load_catalog
    from tests.support.cli_runner import etl_here as etl

    warehouse = tmp_path / "warehouse"
    catalog = load_catalog(None, warehouse=warehouse)
    catalog.register_table(TableSpec("facts", str(warehouse / "facts"), kind="root"))
    catalog.register_job(JobSpec("ingest", output="facts", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    for version in range(4):
        epoch = catalog.open_epoch().id
        catalog.seal("ingest", lease.generation, [SealRequest("facts", epoch, version)])
    catalog.create_tag("audit", epoch=2, versions={"facts": 1}, pipeline=None)
    pin = catalog.create_pin(
        pipeline=None, epoch=3, versions={"facts": 2}, holder="a reader", ttl_seconds=60
    )
    assert catalog.expire_epochs([1, 2, 3], rule="every epoch for 1h") == [1]
    epochs = etl("epochs", "facts", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    assert epochs.returncode == 0, epochs.stderr
    retention = {r["epoch"]: r["retention"] for r in json.loads(epochs.stdout)}
    assert retention == {
        1: "expired (every epoch for 1h)",
        2: "retained: tagged audit",
        3: "retained: pinned",
        4: "retained",
    }
    status = etl("status", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    [pipeline] = json.loads(status.stdout)["pipelines"]
    assert (pipeline["expired_epochs"], pipeline["pins"], pipeline["tags"]) == (1, 1, ["audit"])
    catalog.release_pin(pin)
    # A reader that died leaves its pin: maintenance deletes it once it expired.
    catalog.create_pin(pipeline=None, epoch=3, versions={}, holder="dead", ttl_seconds=0.2)
    time.sleep(0.3)
    plan = etl("maintain", "--dry-run", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    assert plan.returncode == 0 and json.loads(plan.stdout)["pins_removed"] == 1, plan.stderr
    done = etl("maintain", "--warehouse", warehouse, cwd=tmp_path)
    assert done.returncode == 0 and "expired pins: 1" in done.stdout, done.stderr
    assert catalog.remove_expired_pins(dry_run=True) == 0
    catalog.close()


def test_log_entries_go_only_below_a_checkpoint_readers_had_time_to_see(tmp_path):
    """A reader that listed the log before a new checkpoint was written may still load an
    older one: log upkeep deletes nothing below a checkpoint younger than its grace."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from etl.delta.maintenance import log_upkeep

    location = str(tmp_path / "t")
    for i in range(6):
        write_deltalake(location, pa.table({"id": [i]}), mode="append")
    first = log_upkeep(location, keep_from_version=3)
    assert first.entries_removed == 0
    assert DeltaTable(location, version=1).to_pyarrow_table().num_rows == 2
    settled = log_upkeep(location, keep_from_version=3, grace=timedelta(0))
    assert settled.entries_removed >= 3 and settled.first_version == 3
    assert DeltaTable(location, version=3).to_pyarrow_table().num_rows == 4
    assert DeltaTable(location).to_pyarrow_table().num_rows == 6


MAINTAINED_WORDCOUNT = """
from etl import Retention, param
from examples.wordcount.pipeline import build

pipeline = build(param("input_dir", "./incoming"))
pipeline.retention = Retention(every_epoch_for="4s", tiers=[("3s", "1h")])
"""
WORDCOUNT_TABLES = {
    "words": ["word", "_epoch"],
    "word_counts": ["word", "cnt"],
    "cnt_counts": ["cnt", "words"],
}


def _sealed_after_compaction(catalog) -> bool:
    """Whether a job sealed an epoch of `words` at a version after a compaction commit."""
    location = catalog.get_table("words").location
    if not DeltaTable.is_deltatable(location):
        return False
    history = DeltaTable(location).history()
    compactions = [h["version"] for h in history if h.get(MAINTENANCE_META) == "compaction"]
    sealed = [s.delta_version for s in catalog.table_epochs("words") if s.delta_version]
    return bool(compactions and sealed) and max(sealed) > min(compactions)


def _opened(warehouse: Path):
    """The warehouse's catalog once an epoch is open in it, else None."""
    try:
        catalog = load_catalog(None, warehouse=warehouse, create=False)
        return catalog if catalog.latest_epoch() is not None else None
    except Exception:  # noqa: BLE001 - not created yet, or its schema not yet
        return None


def _cut(catalog, epoch: int) -> dict[str, list[tuple]]:
    """Every word-count table at one COMMIT epoch, through delta-rs."""
    with snapshot(catalog, list(WORDCOUNT_TABLES), as_of_epoch=epoch) as reader:
        return {
            t: sorted(map(tuple, reader.pandas(t, columns=columns).values.tolist()))
            for t, columns in WORDCOUNT_TABLES.items()
        }


@pytest.mark.slow
def test_etl_run_continuous_maintains_on_an_interval(tmp_path):
    """Through the real `etl` command: a continuous run with --maintenance-interval keeps
    sealing epochs while maintenance compacts its tables and expires cuts by the policy;
    every cut still retained reads as it did when it was sealed, and an expired one gives
    the clear error. The run is stopped (Ctrl-C) once it sealed an epoch on top of a
    compaction and three cuts were read."""
    import signal
    import threading
    from collections import Counter

    from tests.support.cli_runner import start

    incoming, warehouse = tmp_path / "incoming", tmp_path / "warehouse"
    incoming.mkdir()
    (tmp_path / "maintained.py").write_text(MAINTAINED_WORDCOUNT)
    stop = threading.Event()

    def feed() -> None:  # a file of new and repeated words every 0.3 s
        n = 0
        while not stop.wait(0.3):
            n += 1
            hidden = incoming / f".w{n}"
            hidden.write_text("\n".join([f"w{n}", f"w{n % 7}", "common"]) + "\n")
            os.replace(hidden, incoming / f"w{n:05d}.txt")

    feeder = threading.Thread(target=feed)
    feeder.start()
    process = start(
        "run", tmp_path / "maintained.py", "--continuous", "--epoch-interval", "1",
        "--maintenance-interval", "2", "--format", "json",
        "--param", f"input_dir={incoming}", "--warehouse", warehouse, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    seen: dict[int, dict[str, list[tuple]]] = {}
    try:
        catalog = None
        while catalog is None:  # once the run has opened its first epoch
            assert process.poll() is None, process.communicate()[1][-3000:]
            time.sleep(0.2)
            catalog = _opened(warehouse)
        stopping = False
        while process.poll() is None:  # read every cut soon after it is sealed
            latest = catalog.latest_commit(pipeline="wordcount")
            if latest is not None and latest.epoch not in seen:
                seen[latest.epoch] = _cut(catalog, latest.epoch)
            done = len(seen) >= 3 and _sealed_after_compaction(catalog)
            if not stopping and (done or time.monotonic() > deadline):
                os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends
                stopping = True
            time.sleep(0.2)
        stdout, stderr = process.communicate(timeout=600)
    finally:
        stop.set()
        feeder.join()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    result = json.loads(stdout)
    assert not result["failures"] and result["epochs_opened"]
    assert _sealed_after_compaction(catalog), "no epoch sealed after a compaction in 300 s"
    # compactions say dataChange false; the jobs' appends, merges and overwrites true
    for table in WORDCOUNT_TABLES:
        for version, (is_compaction, flags) in _data_changes(
            catalog.get_table(table).location
        ).items():
            assert {change for _, change in flags} <= {not is_compaction}, (table, version)
    changed = {
        kind
        for _, flags in _data_changes(catalog.get_table("word_counts").location).values()
        for kind, change in flags
        if change
    }
    assert changed == {"add", "remove"}  # the merge's copy-on-write removes change data
    # the run kept sealing epochs: every table sealed every epoch it opened (or coalesced
    # it into a later one, when a job fell behind), and the last one is COMMIT
    opened = [e["epoch"] for e in result["epochs_opened"]]
    assert catalog.get_commit(opened[-1]) is not None
    for table in WORDCOUNT_TABLES:
        states = {s.epoch: s.state for s in catalog.table_epochs(table, after=opened[0] - 1)}
        assert set(states) == set(opened), (table, states)
        assert set(states.values()) <= {EpochState.WRITTEN, EpochState.COALESCED}, states
    # maintenance ran inside it, said so, compacted and expired
    totals = result["maintenance"]
    assert totals["rounds"] >= 2 and not totals["errors"], totals
    assert totals["compacted_files"] > 0, totals
    assert stderr.count("maintenance: ") >= totals["rounds"]
    assert re.search(r"maintenance: \d+ round\(s\): \d+ epoch\(s\) expired, compacted", stderr)
    # every cut still retained reads as when it was sealed; an expired one says so
    assert len(seen) >= 3, seen.keys()
    expired = retained = 0
    for epoch, rows in seen.items():
        expiry = catalog.expiry_of(epoch)
        if expiry is None:
            assert _cut(catalog, epoch) == rows, epoch
            retained += 1
            counted = Counter(word for word, _ in rows["words"])
            assert rows["word_counts"] == sorted(counted.items()), epoch
        else:
            with pytest.raises(EpochExpiredError, match=f"epoch {epoch} "):
                _cut(catalog, epoch)
            expired += 1
    assert retained, seen.keys()  # (which cuts expired meanwhile depends on the timing)


def test_maintenance_interval_is_refused_with_once(tmp_path):
    from tests.support.cli_runner import REPO, etl

    result = etl(
        "run", REPO / "examples" / "wordcount" / "pipeline.py", "--once",
        "--maintenance-interval", "60", "--warehouse", tmp_path / "warehouse", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "--maintenance-interval goes with --continuous, not --once" in result.stderr
    assert "etl maintain" in result.stderr
    assert not (tmp_path / "warehouse").exists()  # refused before anything was created
