"""The fault-injection module itself: parsing, counting, crash and pause (no Spark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import get_args

import pytest

from etl import faults
from etl.faults import FAULT_ENV, FAULT_EXIT_CODE, FAULT_POINTS, FaultPoint, FaultSpec, parse_faults

pytestmark = pytest.mark.faults


def test_fault_points_are_the_literal():
    assert get_args(FaultPoint) == FAULT_POINTS
    assert len(set(FAULT_POINTS)) == len(FAULT_POINTS) >= 5


def test_parse_old_and_new_forms():
    assert parse_faults("after_commit") == (FaultSpec("crash", "after_commit"),)
    assert parse_faults("after_commit@ingest:2#3") == (
        FaultSpec("crash", "after_commit", "ingest", 2, 3),
    )
    assert parse_faults("pause:before_commit@etl1") == (
        FaultSpec("pause", "before_commit", "etl1"),
    )
    assert parse_faults(" crash:after_seal@a:1 ; pause:after_commit@b:3#2,after_commit ") == (
        FaultSpec("crash", "after_seal", "a", 1),
        FaultSpec("pause", "after_commit", "b", 3, 2),
        FaultSpec("crash", "after_commit"),
    )
    assert parse_faults("") == parse_faults(None) == ()
    assert str(FaultSpec("pause", "after_commit", "b", 3, 2)) == "pause:after_commit@b:3#2"


@pytest.mark.parametrize(
    "bad", ["explode:after_commit", "no_such_point", "after_commit@j:x", "after_commit#0"]
)
def test_parse_rejects_bad_specs(bad):
    with pytest.raises(ValueError, match="fault"):
        parse_faults(bad)


def test_unset_or_other_point_is_a_no_op(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    faults.maybe_crash("after_commit", job="j", epoch=1)
    monkeypatch.setenv(FAULT_ENV, "after_seal@j:1")
    faults.maybe_crash("after_commit", job="j", epoch=1)
    faults.maybe_crash("after_seal", job="other", epoch=1)
    faults.maybe_crash("after_seal", job="j", epoch=2)


def test_nth_counts_matches_and_fires_crash(monkeypatch):
    exits = []
    monkeypatch.setattr(faults.os, "_exit", exits.append)
    monkeypatch.setenv(FAULT_ENV, "after_commit@j:2#3;pause:after_seal@k")
    kills = []
    monkeypatch.setattr(faults.signal, "pthread_kill", lambda thread, sig: kills.append(sig))
    for _ in range(2):
        faults.maybe_crash("after_commit", job="j", epoch=2)
    faults.maybe_crash("after_commit", job="j", epoch=1)  # not a match: not counted
    assert exits == []
    faults.maybe_crash("after_commit", job="j", epoch=2)
    assert exits == [FAULT_EXIT_CODE]
    faults.maybe_crash("after_commit", job="j", epoch=2)  # a spec fires once
    assert exits == [FAULT_EXIT_CODE]
    faults.maybe_crash("after_seal", job="k", epoch=7)
    assert kills == [signal.SIGSTOP]


_CHILD = """
import sys
from etl.faults import maybe_crash
maybe_crash("after_commit", job="j", epoch=1)
print("woke", flush=True)
sys.exit(0)
"""


def _child(spec: str) -> subprocess.Popen:
    env = {**os.environ, FAULT_ENV: spec, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE, text=True
    )


def test_crash_exits_without_cleanup():
    child = _child("crash:after_commit@j:1")
    out, _ = child.communicate(timeout=30)
    assert child.returncode == FAULT_EXIT_CODE and out == ""


def test_pause_stops_until_continued():
    from tests.support.faults.process import wait_stopped

    child = _child("pause:after_commit@j")
    try:
        assert wait_stopped(child.pid, timeout=30)
        time.sleep(0.2)
        assert child.poll() is None
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == 0 and out == "woke\n"
    finally:
        if child.poll() is None:
            child.kill()


_THREAD_CHILD = """
import os, sys, threading
from etl.faults import maybe_crash

os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
marker = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
ready = threading.Event()

def job():  # a runner's job thread reaches the point, as in `etl run`
    ready.wait()
    maybe_crash("before_commit", job="j", epoch=1)
    os.write(marker, b"went on")

worker = threading.Thread(target=job)
worker.start()
# The main thread runs only when the job thread does not (one CPU, SCHED_IDLE): a stop that
# waits for the main thread to take it lets the job thread go on.
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
ready.set()
worker.join()
"""


def test_pause_stops_the_thread_that_reached_the_point_before_it_goes_on(tmp_path):
    """The thread that reaches a pause point stops there: not a step further (a commit)
    while the rest of the process is being stopped."""
    from tests.support.faults.process import wait_stopped

    marker = tmp_path / "marker"
    marker.touch()
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _THREAD_CHILD, str(marker)],
            env={**os.environ, FAULT_ENV: "pause:before_commit@j", "PYTHONPATH": os.getcwd()},
        )
        try:
            assert wait_stopped(child.pid, timeout=30)
            assert marker.read_text() == ""
            os.kill(child.pid, signal.SIGCONT)
            assert child.wait(timeout=30) == 0
            assert marker.read_text() == "went on"
        finally:
            if child.poll() is None:
                child.kill()
        marker.write_text("")


_WRITER_CHILD = """
import sys, threading, time
import sqlalchemy as sa
from catalog.connection import Database
from etl.faults import maybe_crash

database = Database("sqlite:///" + sys.argv[1], create=True, read_only=None)
inside = threading.Event()

def renew():  # another thread of the process (a lease renewal) inside a write
    with database.write() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        inside.set()
        time.sleep(0.5)

with database.write() as conn:
    conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
writer = threading.Thread(target=renew)
writer.start()
inside.wait()
maybe_crash("after_commit", job="j", epoch=1)
writer.join()
"""


def test_a_paused_process_keeps_no_catalog_write_lock(tmp_path):
    """The pause waits for the process's other write transactions to end: stopped, it
    keeps no lock that would make every other writer of the catalog wait out its busy
    timeout (a zombie test's own catalog writes failed so, now and then)."""
    import sqlite3

    from tests.support.faults.process import wait_stopped

    path = tmp_path / "catalog.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER_CHILD, str(path)],
        env={**os.environ, FAULT_ENV: "pause:after_commit@j", "PYTHONPATH": os.getcwd()},
    )
    try:
        assert wait_stopped(child.pid, timeout=60)
        other = sqlite3.connect(path, timeout=2, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # "database is locked" if the stopped one held it
        assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)
        other.execute("ROLLBACK")
        other.close()
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
