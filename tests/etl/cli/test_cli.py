"""End-to-end tests of the real ``etl`` command, run in subprocesses on the word-count chain.

Every Spark-using subprocess pays a JVM start-up, so one module-scoped warehouse is built
by a short scenario (two concurrent runs, a run that waits for them, a continuous run,
then one epoch opened that no job has processed yet) and the read-only commands run
against it. Crash and Ctrl-C get warehouses of their own.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from catalog import Catalog, EpochState, JobSpec, TableSpec, ValidationRecord, load_catalog
from etl.faults import FAULT_ENV, FAULT_EXIT_CODE
from etl.quality import GateOutcome
from etl.reader import snapshot
from tests.support.cli_runner import REPO, etl, etl_here, start
from tests.support.faults.process import wait_stopped

pytestmark = [pytest.mark.spark]

WORDCOUNT = REPO / "examples" / "wordcount" / "pipeline.py"
TABLES = ("words", "word_counts", "cnt_counts")
COLUMNS = {
    "words": ["word", "_epoch"],
    "word_counts": ["word", "cnt"],
    "cnt_counts": ["cnt", "words"],
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# The known warehouse: epoch 1 holds FIRST, epoch 2 is empty, epoch 3 holds LATER,
# epochs 4 and 5 are empty, epoch 6 is opened but not processed by any job.
FIRST = {"a.txt": ["apple", "pear", "apple"], "b.txt": ["fig", "apple"]}
LATER = {"d.txt": ["pear", "kiwi"]}


def drop(incoming: Path, files: dict[str, list[str]]) -> None:
    incoming.mkdir(parents=True, exist_ok=True)
    for name, words in files.items():
        hidden = incoming / f".{name}.tmp"
        hidden.write_text("\n".join(words) + "\n")
        os.replace(hidden, incoming / name)
        time.sleep(0.01)  # distinct modification times: files are sliced in this order


def wait_for(condition, *, timeout: float = 300, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def contents(catalog: Catalog, level: str = "repeatable-read", **kwargs) -> dict[str, list]:
    """Every table's rows at one snapshot, read through delta-rs (no Spark)."""
    reader = snapshot(catalog, list(TABLES), level, **kwargs)
    return {
        t: sorted(tuple(r) for r in reader.pandas(t, columns=COLUMNS[t]).values.tolist())
        for t in TABLES
    }


def counts(words: list[str]) -> dict[str, list]:
    """The chain's expected word_counts and cnt_counts for these input words."""
    per_word = Counter(words)
    return {
        "word_counts": sorted(per_word.items()),
        "cnt_counts": sorted(Counter(per_word.values()).items()),
    }


def versions_at(catalog: Catalog, epoch: int) -> dict[str, int | None]:
    return {t: s.delta_version for t, s in catalog.states_at(TABLES, epoch).items()}


def snapshot_line(stderr: str) -> dict:
    """The ``level=... epoch=... versions={...}`` line ``etl sql`` prints on stderr."""
    match = re.search(r"^level=(\S+) epoch=(\S+) versions=(\{.*\})$", stderr, re.MULTILINE)
    assert match, stderr[-3000:]
    return {"level": match[1], "epoch": match[2], "versions": json.loads(match[3])}


class TerminalRun:
    """An ``etl`` process whose stderr is a pseudo-terminal, as in an interactive shell."""

    def __init__(self, *args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.process = start(*args, cwd=cwd, env=env, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, args=(master,), daemon=True)
        self._reader.start()

    def _drain(self, master: int) -> None:
        try:
            while chunk := os.read(master, 65536):
                self._chunks.append(chunk)
        except OSError:  # EIO: every writer closed the terminal
            pass
        finally:
            os.close(master)

    def wait(self, timeout: float = 600) -> tuple[int, str]:
        code = self.process.wait(timeout)
        self._reader.join(30)
        text = ANSI.sub("", b"".join(self._chunks).decode(errors="replace"))
        return code, text.replace("\r\n", "\n")


@dataclass
class Known:
    root: Path
    incoming: Path
    warehouse: Path
    catalog: Catalog
    outcomes: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    holder_pid: int = 0
    after_first: dict[str, list] = field(default_factory=dict)
    v1_after_first: dict[str, int | None] = field(default_factory=dict)
    epochs_after_wait: list[int] = field(default_factory=list)
    after_wait: dict[str, list] = field(default_factory=dict)
    v1_after_wait: dict[str, int | None] = field(default_factory=dict)

    def etl(self, *args: str | Path, **env: str):
        """A read-only command on the known warehouse, in this process."""
        return etl_here(*args, "--warehouse", self.warehouse, cwd=self.root, **env)


@pytest.fixture(scope="module")
def known(tmp_path_factory) -> Known:
    root = tmp_path_factory.mktemp("cli")
    incoming, warehouse = root / "incoming", root / "warehouse"
    # Created here so that the test can watch the leases while the runs start.
    k = Known(root, incoming, warehouse, load_catalog(None, warehouse=warehouse))
    drop(incoming, FIRST)
    run = ("run", WORDCOUNT, "--once", "--param", f"input_dir={incoming}", "--warehouse", warehouse)

    # 1. Two runs at once: "first" (stderr on a terminal) holds the pipeline, so "busy"
    #    is refused and "waiter" waits for it with --wait, then runs an empty epoch. The
    #    first run is frozen mid-epoch (leases held, a long lease so that they cannot
    #    expire meanwhile) until the waiter says it waits, however slowly the others start.
    first = TerminalRun(
        *run, "--lease-ttl", "600", cwd=root, env={FAULT_ENV: "pause:after_commit@ingest_words"}
    )
    if not wait_stopped(first.process.pid, timeout=300, poll=first.process.poll):
        first.process.kill()
        raise AssertionError(f"the first run did not reach its pause: {first.wait()}")
    lease = k.catalog.get_lease("ingest_words")
    assert lease is not None and lease.expires_at > datetime.now(UTC)
    k.holder_pid = first.process.pid
    busy = etl(*run, cwd=root)
    k.outcomes["busy"] = (busy.returncode, busy.stdout, busy.stderr)
    waiter_log = root / "waiter.stderr"
    with waiter_log.open("w") as log:
        waiter = start(*run, "--wait", "600", cwd=root, stderr=log)
    wait_for(
        lambda: "waiting for " in waiter_log.read_text() or waiter.poll() is not None,
        what="the waiting run to wait",
    )
    first.process.send_signal(signal.SIGCONT)
    code, text = first.wait()
    k.outcomes["first"] = (code, "", text)
    k.v1_after_first = versions_at(k.catalog, 1)
    k.after_first = contents(k.catalog)
    stdout, _ = waiter.communicate(timeout=600)
    k.outcomes["waiter"] = (waiter.returncode, stdout, waiter_log.read_text())
    k.epochs_after_wait = [e.id for e in k.catalog.epochs()]
    k.after_wait = contents(k.catalog)
    k.v1_after_wait = versions_at(k.catalog, 1)

    # 2. New words, then a continuous run that stops by itself after three epochs (one
    # batch per epoch and job even when a job falls behind on a busy machine).
    drop(incoming, LATER)
    continuous = etl(
        "run",
        WORDCOUNT,
        "--continuous",
        "--epoch-interval",
        "1",
        "--max-epochs",
        "3",
        "--backlog-threshold",
        "10",
        "--max-parallel",
        "2",
        "--slow-batch-seconds",
        "30",
        "--param",
        f"input_dir={incoming}",
        "--warehouse",
        warehouse,
        cwd=root,
    )
    k.outcomes["continuous"] = (continuous.returncode, continuous.stdout, continuous.stderr)

    # 3. A new barrier that no job has processed yet: every table lags one epoch.
    time.sleep(0.2)
    k.catalog.open_epoch(pipeline="wordcount")
    return k


# -- run -----------------------------------------------------------------------------


@pytest.mark.slow
def test_run_once_twice_is_idempotent(known):
    code, _, text = known.outcomes["first"]
    assert code == 0, text[-3000:]
    code, _, stderr = known.outcomes["waiter"]
    assert code == 0, stderr[-3000:]
    assert "1 epoch(s) opened, 3 batch(es) sealed, 0 blocked, 0 failed" in stderr
    # The second run only opened an empty epoch, sealed in every table ...
    assert known.epochs_after_wait == [1, 2]
    assert known.catalog.get_commit(2) is not None
    assert {t: s.rows for t, s in known.catalog.states_at(TABLES, 2).items()} == {
        "words": 0,
        "word_counts": 0,
        "cnt_counts": 2,  # overwrite: the count-of-counts is recomputed, with the same rows
    }
    # ... and changed no row: the same contents at repeatable-read, epoch 1 at the same
    # Delta versions, and those versions still read as they did.
    assert known.after_wait["words"] == known.after_first["words"]
    assert known.after_wait["word_counts"] == known.after_first["word_counts"]
    assert known.after_wait["cnt_counts"] == known.after_first["cnt_counts"]
    assert known.v1_after_wait == known.v1_after_first
    assert contents(known.catalog, as_of_epoch=1) == known.after_first
    words = [w for ws in FIRST.values() for w in ws]
    assert known.after_first["words"] == sorted((w, 1) for w in words)
    assert {t: known.after_first[t] for t in ("word_counts", "cnt_counts")} == counts(words)


@pytest.mark.slow
def test_concurrent_runs_do_not_both_write(known):
    code, stdout, stderr = known.outcomes["busy"]
    assert code == 3, stderr[-3000:]
    assert stdout == ""
    assert "pipeline 'wordcount' is being run by" in stderr
    assert f":{known.holder_pid}:" in stderr  # the holder: host:pid:instance
    assert "nothing was written" in stderr
    assert "its process is alive on this host" in stderr and "--wait SECONDS" in stderr
    # The waiting run waited for the holder (frozen until it said so), then ran.
    assert "waiting for " in known.outcomes["waiter"][2]
    # The refused run opened no epoch; the waiting one ran after the holder, adding nothing
    # twice: each input word is in `words` exactly once and counted once.
    assert known.epochs_after_wait == [1, 2]
    words = [w for ws in FIRST.values() for w in ws]
    assert Counter(w for w, _ in known.after_wait["words"]) == Counter(words)
    assert {t: known.after_wait[t] for t in ("word_counts", "cnt_counts")} == counts(words)


@pytest.mark.slow
def test_continuous_stops_after_max_epochs(known):
    code, _, stderr = known.outcomes["continuous"]
    assert code == 0, stderr[-3000:]
    assert "3 epoch(s) opened, 9 batch(es) sealed, 0 blocked, 0 failed" in stderr
    assert all(known.catalog.get_commit(e) is not None for e in (3, 4, 5))
    # The new file went into the first epoch of the continuous run.
    assert [s.rows for s in known.catalog.table_epochs("words", after=2, up_to=5)] == [2, 0, 0]
    everything = [w for ws in (*FIRST.values(), *LATER.values()) for w in ws]
    current = contents(known.catalog)
    assert {t: current[t] for t in ("word_counts", "cnt_counts")} == counts(everything)


PROGRESS_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO etl\.progress: "
    r"job (\w+) epoch (\d+) sealed: (\d+) rows$"
)


@pytest.mark.slow
def test_progress_is_a_rich_display_on_a_terminal_and_log_lines_in_a_pipe(known):
    code, _, on_terminal = known.outcomes["first"]
    assert code == 0, on_terminal[-3000:]
    assert "job ingest_words epoch 1 sealed: 5 rows" in on_terminal
    assert "job etl1 epoch 1 sealed: 3 rows" in on_terminal
    # the live display: a row per job with its epoch, batches and rows so far
    assert re.search(r"job etl2 +epoch 1, 1 batch\(es\), 2 rows", on_terminal), on_terminal
    assert "1 epoch(s) opened, 3 batch(es) sealed" in on_terminal
    assert "INFO etl.progress" not in on_terminal and "WARNING: Using" not in on_terminal

    _, _, piped = known.outcomes["continuous"]
    lines = piped.strip().splitlines()
    # Nothing but our own lines: one log line per sealed batch, then the summary (no JVM
    # notices, no Spark log).
    assert lines[-1] == "3 epoch(s) opened, 9 batch(es) sealed, 0 blocked, 0 failed", piped
    batches = [PROGRESS_LINE.match(line) for line in lines[:-1]]
    assert all(batches), piped
    per_job = {
        job: sorted(int(m[2]) for m in batches if m[1] == job)
        for job in ("ingest_words", "etl1", "etl2")
    }
    assert per_job == {job: [3, 4, 5] for job in per_job}, piped
    assert [m[3] for m in batches if m[1] == "ingest_words" and m[2] == "3"] == ["2"]
    assert "\x1b[" not in piped  # no colour codes in a pipe either


# -- status, lineage, epochs -------------------------------------------------------------


@pytest.mark.slow
def test_status_shows_writers_epochs_and_lag(known):
    ts = {e.id: e.barrier_ts for e in known.catalog.epochs()}
    lag = (ts[6] - ts[5]).total_seconds()
    assert lag > 0
    result = known.etl("status", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["table"]: r for r in json.loads(result.stdout)["tables"]}
    assert set(rows) == set(TABLES)
    writers = {"words": "ingest_words", "word_counts": "etl1", "cnt_counts": "etl2"}
    for table, row in rows.items():
        assert row["writer_job"] == writers[table]
        assert row["kind"] == ("root" if table == "words" else "derived")
        assert (row["latest_processed"], row["latest_written"], row["last_commit"]) == (5, 5, 5)
        assert row["lag_epochs"] == 1
        # Against now, not against the newest epoch: a stopped pipeline shows its age.
        assert row["lag_seconds"] >= lag
        assert row["blocked"] is None

    table = known.etl("status", COLUMNS="300")  # no cell cut short, however long the paths
    assert table.returncode == 0, table.stderr
    lines = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if "│" in line}
    cells = [c.strip() for c in lines["word_counts"].split("│")[1:-1]]
    assert cells[:5] == ["word_counts", "etl1", "5", "5", "1"]
    # Epoch 6 was opened by no run of these jobs: status says they were not in it.
    assert cells[-2:] == ["5", "not in the last run"]
    assert "…" not in table.stdout  # piped output is not truncated to 80 columns


@pytest.mark.slow
def test_lineage_in_every_format(known):
    edges = {
        ("word_files", "ingest_words"),
        ("ingest_words", "words"),
        ("words", "etl1"),
        ("etl1", "word_counts"),
        ("word_counts", "etl2"),
        ("etl2", "cnt_counts"),
    }
    kinds = {
        "word_files": "source",
        "ingest_words": "job",
        "etl1": "job",
        "etl2": "job",
        "words": "table",
        "word_counts": "table",
        "cnt_counts": "table",
    }
    graph = json.loads(known.etl("lineage", "--format", "json").stdout)
    assert {(e["from"], e["to"]) for e in graph["edges"]} == edges
    assert len(graph["edges"]) == len(edges)
    assert {n["name"]: n["kind"] for n in graph["nodes"]} == kinds

    text = known.etl("lineage").stdout
    assert text.splitlines() == [
        "word_files (source)",
        "  ingest_words (job)",
        "    words (table)",
        "      etl1 (job)",
        "        word_counts (table)",
        "          etl2 (job)",
        "            cnt_counts (table)",
    ]

    dot = known.etl("lineage", "--format", "dot").stdout
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")
    assert set(re.findall(r'"(\w+)" -> "(\w+)";', dot)) == edges
    assert '"word_files" [shape=cylinder];' in dot and '"etl1" [shape=box];' in dot

    mermaid = known.etl("lineage", "--format", "mermaid").stdout
    assert mermaid.splitlines()[0] == "flowchart LR"
    assert set(re.findall(r"^  (\w+) --> (\w+)$", mermaid, re.MULTILINE)) == edges
    assert "  word_files[(word_files)]" in mermaid and "  words[/words/]" in mermaid


@pytest.mark.slow
def test_epochs_of_a_table(known):
    result = known.etl("epochs", "word_counts", "--format", "json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5]  # 6 is not processed yet
    assert {r["state"] for r in records} == {"WRITTEN"}
    # Rows an epoch upserted: epoch 3 updates pear and adds kiwi. (Its merge also copies
    # apple and fig along when it rewrites their file; those are not the epoch's rows.)
    assert [r["rows"] for r in records] == [3, 0, 2, 0, 0]
    assert {r["attempt"] for r in records} == {1}
    assert all(r["validation"] is None for r in records)
    catalog_versions = [s.delta_version for s in known.catalog.table_epochs("word_counts")]
    assert [r["delta_version"] for r in records] == catalog_versions
    ts = {e.id: e.barrier_ts.isoformat() for e in known.catalog.epochs()}
    assert [r["barrier_ts"] for r in records] == [ts[e] for e in range(1, 6)]

    last = known.etl("epochs", "word_counts", "--last", "2")
    rows = [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in last.stdout.splitlines()
        if line.startswith("│")
    ]
    assert [r[:4] for r in rows] == [
        ["4", "WRITTEN", str(catalog_versions[3]), "0"],
        ["5", "WRITTEN", str(catalog_versions[4]), "0"],
    ]


# -- sql -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sql_repeatable_read_joins_a_consistent_cut(known):
    query = (
        "SELECT w.word, count(*) AS seen, max(c.cnt) AS cnt "
        "FROM words w JOIN word_counts c ON w.word = c.word GROUP BY w.word ORDER BY w.word"
    )
    result = known.etl("sql", query, "--format", "csv")
    assert result.returncode == 0, result.stderr[-3000:]
    line = snapshot_line(result.stderr)
    assert line == {
        "level": "repeatable-read",
        "epoch": "5",
        "versions": {t: v for t, v in versions_at(known.catalog, 5).items() if t != "cnt_counts"},
    }
    everything = Counter(w for ws in (*FIRST.values(), *LATER.values()) for w in ws)
    assert result.stdout.splitlines() == ["word,seen,cnt"] + [
        f"{w},{n},{n}" for w, n in sorted(everything.items())
    ]


@pytest.mark.slow
def test_sql_as_of_epoch_returns_the_past(known):
    result = known.etl(
        "sql",
        "SELECT cnt, words FROM cnt_counts ORDER BY cnt",
        "--as-of-epoch",
        "1",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert snapshot_line(result.stderr) == {
        "level": "repeatable-read",
        "epoch": "1",
        "versions": {"cnt_counts": versions_at(known.catalog, 1)["cnt_counts"]},
    }
    first = Counter(w for ws in FIRST.values() for w in ws)  # apple 3, pear 1, fig 1
    assert json.loads(result.stdout) == [{"cnt": 1, "words": 2}, {"cnt": 3, "words": 1}]
    assert sorted(Counter(first.values()).items()) == [(1, 2), (3, 1)]


# -- crash and recovery ----------------------------------------------------------------

CRASH_PIPELINE = """
from etl import param
from examples.wordcount.pipeline import build

# One file per micro-batch, so that an epoch of two files takes two Delta commits.
pipeline = build(param("input_dir"), files_per_micro_batch=1)
"""


@pytest.mark.slow
@pytest.mark.recovery
def test_recover_after_a_crash_then_run_again(tmp_path):
    pipeline_file = tmp_path / "pipeline.py"
    pipeline_file.write_text(CRASH_PIPELINE)
    incoming, warehouse = tmp_path / "incoming", tmp_path / "warehouse"
    run = ("run", pipeline_file, "--once", "--param", f"input_dir={incoming}")

    def cli(*args: str | Path, **env: str):
        return etl(*args, "--warehouse", warehouse, cwd=tmp_path, **env)

    drop(incoming, {"a.txt": ["apple", "pear", "apple"]})
    assert cli(*run).returncode == 0
    # Nothing to recover is said without a JVM (this environment has no Java).
    for fmt in ("table", "json"):
        nothing = cli(
            "recover",
            pipeline_file,
            "--param",
            f"input_dir={incoming}",
            "--format",
            fmt,
            JAVA_HOME="/nonexistent-java",
            PATH="/usr/bin:/bin",
        )
        assert nothing.returncode == 0, nothing.stderr[-3000:]
        if fmt == "json":
            result = json.loads(nothing.stdout)
            assert (result["exit_code"], result["recovered"]) == (0, [])
        else:
            assert nothing.stdout == "nothing to recover: catalog and tables agree\n"
    drop(incoming, {"b.txt": ["pear", "kiwi"], "c.txt": ["apple", "fig", "fig"]})
    # Epoch 2 dies after its first micro-batch (b.txt) is committed to `words`.
    crashed = cli(*run, "--lease-ttl", "1", **{FAULT_ENV: "between_micro_batches@ingest_words:2"})
    assert crashed.returncode == FAULT_EXIT_CODE, crashed.stderr[-3000:]
    catalog = load_catalog(None, warehouse=warehouse)
    assert catalog.table_epoch("words", 2).state is EpochState.PROCESSED

    # The torn epoch is visible at read-uncommitted only.
    dirty = cli(
        "sql",
        "SELECT word, _epoch FROM words WHERE _epoch = 2 ORDER BY word",
        "--consistency",
        "read-uncommitted",
        "--format",
        "csv",
    )
    assert dirty.returncode == 0, dirty.stderr[-3000:]
    assert dirty.stdout.splitlines() == ["word,_epoch", "kiwi,2", "pear,2"]
    assert snapshot_line(dirty.stderr) == {
        "level": "read-uncommitted",
        "epoch": "-",
        "versions": {"words": catalog.table_epoch("words", 2).delta_version},
    }
    clean = cli(
        "sql",
        "SELECT _epoch, count(*) AS n FROM words GROUP BY _epoch",
        "--consistency",
        "read-committed",
        "--format",
        "json",
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert json.loads(clean.stdout) == [{"_epoch": 1, "n": 3}]
    assert snapshot_line(clean.stderr) == {
        "level": "read-committed",
        "epoch": "-",  # no common epoch: each table at its own newest WRITTEN one
        "versions": {"words": catalog.table_epoch("words", 1).delta_version},
    }

    status = {r["table"]: r for r in json.loads(cli("status", "--format", "json").stdout)["tables"]}
    assert (status["words"]["latest_processed"], status["words"]["latest_written"]) == (2, 1)
    assert (status["word_counts"]["latest_processed"], status["word_counts"]["lag_epochs"]) == (
        1,
        1,
    )

    recovered = cli("recover", pipeline_file, "--param", f"input_dir={incoming}")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert recovered.stdout.splitlines() == [
        "words: rolled back epoch(s) 2",
        "the next `etl run` replays the rolled-back epochs from their recorded slices",
    ]
    states = {
        r["epoch"]: r["state"]
        for r in json.loads(cli("epochs", "words", "--format", "json").stdout)
    }
    assert states == {1: "WRITTEN", 2: "ROLLED_BACK"}

    again = cli(*run)
    assert again.returncode == 0, again.stderr[-3000:]
    assert catalog.table_epoch("words", 2).state is EpochState.WRITTEN
    assert catalog.table_epoch("words", 2).attempt == 2
    assert catalog.get_commit(3) is not None
    everything = ["apple", "pear", "apple", "pear", "kiwi", "apple", "fig", "fig"]
    current = contents(catalog)
    assert Counter(w for w, _ in current["words"]) == Counter(everything)
    assert {t: current[t] for t in ("word_counts", "cnt_counts")} == counts(everything)


# -- Ctrl-C ----------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_finishes_the_epoch_in_flight(tmp_path):
    incoming, warehouse = tmp_path / "incoming", tmp_path / "warehouse"
    words = ["apple", "pear", "apple", "fig"]
    drop(incoming, {"a.txt": words})
    catalog = load_catalog(None, warehouse=warehouse)
    process = start(
        "run",
        WORDCOUNT,
        "--continuous",
        "--epoch-interval",
        "1",
        "--param",
        f"input_dir={incoming}",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        wait_for(lambda: catalog.latest_epoch() is not None, what="the first epoch")
        in_flight = catalog.latest_commit() is None
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends: the whole process group
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert "stopping (Ctrl-C): finishing" in stderr
    opened = catalog.latest_epoch().id
    assert catalog.latest_commit().epoch == opened
    states = [s for t in TABLES for s in catalog.table_epochs(t)]
    assert {s.state for s in states} == {EpochState.WRITTEN}
    assert len(states) == 3 * opened
    current = contents(catalog)
    assert {t: current[t] for t in ("word_counts", "cnt_counts")} == counts(words)
    assert in_flight or opened > 1  # the interrupt came while the run was working


# -- quality blocks in status (catalog states written through the catalog API) ---------


def test_status_names_the_expectations_that_block_an_epoch(tmp_path):
    warehouse = tmp_path / "warehouse"
    catalog = load_catalog(None, warehouse=warehouse)
    for table in ("orders", "events"):
        catalog.register_table(TableSpec(table, str(warehouse / table), kind="root"))
        catalog.register_job(JobSpec(f"ingest_{table}", output=table, source=f"{table}_src"))
    epoch = catalog.open_epoch().id
    for table, policy, blocking in (
        ("orders", "block", ("not_null(id)", "between(amount, 0, 100)")),
        ("events", "warn", ()),
    ):
        lease = catalog.acquire_lease(f"ingest_{table}", "test", ttl_seconds=60)
        catalog.record_processed(
            table, epoch, delta_version=0, job=lease.job, attempt=1, generation=lease.generation
        )
        outcome = GateOutcome(
            table=table,
            epoch=epoch,
            policy=policy,
            success=not blocking,
            results=({"expectation": "not_null(id)", "success": False},),
            failed_expectations=("not_null(id)",),
            blocking=blocking,
        )
        catalog.record_validation(
            ValidationRecord(table, epoch, success=False, policy=policy, results=outcome.summary()),
            job=lease.job,
            generation=lease.generation,
        )
    result = etl_here("status", "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    blocked = {r["table"]: r["blocked"] for r in json.loads(result.stdout)["tables"]}
    assert blocked == {
        "orders": "epoch 1 failed validation: not_null(id), between(amount, 0, 100)",
        "events": None,  # failed under `warn`: nothing blocks it
    }
    table = etl_here("status", "--warehouse", warehouse, cwd=tmp_path, COLUMNS="300").stdout
    assert "epoch 1 failed validation: not_null(id), between(amount, 0, 100)" in table
    for name, policy in (("orders", "block"), ("events", "warn")):
        shown = etl_here("epochs", name, "--format", "json", "--warehouse", warehouse, cwd=tmp_path)
        (record,) = json.loads(shown.stdout)
        assert record["state"] == "PROCESSED" and record["validation"] == f"failed ({policy})"
        assert record["failed_expectations"] == ["not_null(id)"]


# -- bad input -------------------------------------------------------------------------

SYNTAX_ERROR = "from etl import Pipeline\n\npipeline = Pipeline(\n"
NO_PIPELINE = "from etl import Pipeline\n\nthe_pipeline = Pipeline('x')\n"


@pytest.mark.parametrize(
    ("args", "files", "expected"),
    [
        (
            ("sql", "SELECT 1 FROM words", "--consistency", "dirty"),
            {},
            ["unknown consistency level 'dirty'", "read-uncommitted", "repeatable-read"],
        ),
        (("run", "nope.py", "--once"), {}, ["'nope.py'", "no such file"]),
        (
            ("run", "broken.py", "--once"),
            {"broken.py": SYNTAX_ERROR},
            ["broken.py", "syntax error", "broken.py:3"],
        ),
        (
            ("run", "empty.py", "--once"),
            {"empty.py": NO_PIPELINE},
            ["empty.py", "must define a variable `pipeline`"],
        ),
        (
            (
                "status",
                "--catalog",
                "postgresql://postgres:secretpw@127.0.0.1:1/nope",
            ),
            {},
            ["cannot open the catalog", "'nope'", "127.0.0.1:1"],
        ),
        (
            ("run", str(WORDCOUNT), "--once", "--param", "input_dir"),
            {},
            ["--param takes key=value", "'input_dir'"],
        ),
        (("run", str(WORDCOUNT)), {}, ["exactly one of --once or --continuous"]),
        (
            ("run", str(WORDCOUNT), "--once", "--continuous"),
            {},
            ["exactly one of --once or --continuous"],
        ),
        (("status", "--warehouse", "typo"), {}, ["no catalog in warehouse 'typo'", "--warehouse"]),
        (
            ("run", str(WORDCOUNT), "--once", "--epoch-interval", "5"),
            {},
            ["--epoch-interval goes with --continuous, not --once"],
        ),
        (
            ("run", str(WORDCOUNT), "--once", "--max-epochs", "2"),
            {},
            ["--max-epochs goes with --continuous, not --once"],
        ),
        (
            ("run", str(WORDCOUNT), "--once", "--param", "input_dir=x", "--param", "inptu=y"),
            {},
            ["unknown param 'inptu', did you mean 'input_dir'?", "the file reads: input_dir"],
        ),
    ],
    ids=[
        "unknown-level",
        "missing-file",
        "syntax-error",
        "no-pipeline",
        "unreachable-catalog",
        "param-without-equals",
        "neither-mode",
        "both-modes",
        "no-warehouse",
        "interval-with-once",
        "max-epochs-with-once",
        "undeclared-param",
    ],
)
def test_bad_input_exits_2_saying_what_to_fix(tmp_path, args, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # Found before any work: no JVM is needed to say so (this environment has no Java).
    result = etl(*args, cwd=tmp_path, timeout=120, JAVA_HOME="/nonexistent", PATH="/usr/bin:/bin")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ")
    for part in expected:
        assert part in result.stderr
    assert "secretpw" not in result.stderr + result.stdout
    assert not (tmp_path / "typo").exists()  # a read-only command creates no catalog
    assert not (tmp_path / "warehouse").exists()  # nor does a refused run


@pytest.mark.slow
def test_unknown_tables_exit_2(known):
    epochs = known.etl("epochs", "nosuch")
    assert epochs.returncode == 2
    assert "unknown table 'nosuch'; the catalog has ['cnt_counts', 'word_counts', 'words']" in (
        epochs.stderr
    )
    query = known.etl("sql", "SELECT * FROM words JOIN nosuch USING (word)")
    assert query.returncode == 2
    assert "unknown table(s) ['nosuch']" in query.stderr
    assert "level=" not in query.stderr  # refused before any snapshot (or Spark) was made


@pytest.mark.parametrize(
    "command",
    ["", "run", "status", "lineage", "sql", "epochs", "recover", "catalog", "catalog upgrade"],
)
def test_help_has_an_example(tmp_path, command):
    result = etl(*command.split(), "--help", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"Example: etl \w", result.stdout), result.stdout


def test_an_internal_error_exits_1_and_asks_for_a_report(capsys):
    import typer

    from etl.cli.app import guard
    from etl.errors import InternalError

    @guard
    def broken() -> None:
        raise InternalError("an invariant does not hold")

    with pytest.raises(typer.Exit) as caught:
        broken()
    assert caught.value.exit_code == 1
    assert "please report" in capsys.readouterr().err


def test_status_does_not_import_pyspark(tmp_path):
    load_catalog(None, warehouse=tmp_path).close()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from etl.cli.app import main\n"
            "sys.argv = ['etl', 'status', '--warehouse', sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
            "assert 'pyspark' not in sys.modules, 'etl status imported PySpark'\n",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
