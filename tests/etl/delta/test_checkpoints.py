"""Checkpoints written in the background: a commit does not wait for its checkpoint, a
flush does, a table gets its newest version's, a failure is the table's alone, and the
process writes what is pending before it exits."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from etl.delta import CommitRequest, Fence, commit_files, flush_checkpoints
from etl.delta import checkpoints as checkpoints_module
from etl.delta.commit import checkpoint_due
from etl.delta.layout import filesystem
from etl.delta.logfile import log_versions

SCHEMA = pa.schema([("id", pa.int64()), ("_epoch", pa.int64())])
FENCE = Fence("j", generation=1)


def commit(location: Path) -> int:
    return commit_files(
        str(location), CommitRequest([], schema=SCHEMA, mode="append", fence=FENCE, metadata={})
    )


def commit_until_due(location: Path, *, after: int = -1) -> int:
    """Commit until a version due a checkpoint (after ``after``); returns it."""
    version = commit(location)
    while not (version > after and checkpoint_due(str(location), version)):
        version = commit(location)
    return version


def checkpoints_of(location: Path) -> list[int]:
    return sorted(log_versions(*filesystem(str(location)))[1])


class HeldWrites:
    """Holds the checkpoint thread before each write until released; records the writes."""

    def __init__(self, write):
        self.release = threading.Event()
        self.started = threading.Event()
        self.written: list[tuple[str, int]] = []
        self._write = write

    def __call__(self, location: str, version: int) -> None:
        self.started.set()
        assert self.release.wait(30)
        self._write(location, version)
        self.written.append((Path(location).name, version))


@pytest.fixture
def held(monkeypatch):
    holder = HeldWrites(checkpoints_module.write_checkpoint)
    monkeypatch.setattr(checkpoints_module, "write_checkpoint", holder)
    yield holder
    holder.release.set()
    assert flush_checkpoints(timeout=30)


def test_a_commit_returns_before_its_checkpoint_is_written_and_a_flush_waits_for_it(tmp_path, held):
    location = tmp_path / "orders"
    due = commit_until_due(location)
    assert held.started.wait(30)
    assert checkpoints_of(location) == []
    assert commit(location) == due + 1  # the table goes on while its checkpoint waits
    assert not flush_checkpoints(timeout=0.2)

    held.release.set()
    assert flush_checkpoints(timeout=30)
    assert checkpoints_of(location) == [due]
    assert held.written == [("orders", due)]


def test_a_table_that_commits_again_before_its_checkpoint_gets_only_the_newest(tmp_path, held):
    first, busy = tmp_path / "first", tmp_path / "busy"
    commit_until_due(first)
    assert held.started.wait(30)  # the thread holds the first table's checkpoint
    older = commit_until_due(busy)
    newer = commit_until_due(busy, after=older)
    assert checkpoints_module.CHECKPOINTS.pending() == {str(busy): newer}

    held.release.set()
    assert flush_checkpoints(timeout=30)
    assert checkpoints_of(busy) == [newer]
    assert [name for name, _ in held.written] == ["first", "busy"]


def test_a_failed_checkpoint_is_logged_and_the_next_table_still_gets_its_own(
    tmp_path, held, caplog
):
    gone, kept = tmp_path / "gone", tmp_path / "kept"
    commit_until_due(gone)
    assert held.started.wait(30)
    due = commit_until_due(kept)
    for entry in sorted((gone / "_delta_log").iterdir()):
        entry.unlink()

    with caplog.at_level(logging.WARNING, logger=checkpoints_module.__name__):
        held.release.set()
        assert flush_checkpoints(timeout=30)
    assert any(
        "no checkpoint" in r.getMessage() and "gone" in r.getMessage() for r in caplog.records
    )
    assert checkpoints_of(kept) == [due]


@pytest.mark.parametrize("exit_how", ["returns", "os._exit"])
def test_a_process_writes_its_pending_checkpoints_before_it_exits(tmp_path, exit_how):
    """Its checkpoints are written at exit, even when slow; a process killed (``os._exit``
    skips what a normal exit runs) leaves none, and the table's commits stand."""
    location = tmp_path / "orders"
    script = textwrap.dedent(
        f"""
        import os, time
        import pyarrow as pa
        from etl.delta import CommitRequest, Fence, commit_files
        from etl.delta import checkpoints
        from etl.delta.commit import checkpoint_due

        write = checkpoints.write_checkpoint
        def slow(location, version):
            time.sleep(1.0)
            write(location, version)
        checkpoints.write_checkpoint = slow

        schema = pa.schema([("id", pa.int64())])
        version = -1
        while not checkpoint_due({str(location)!r}, version):
            version = commit_files(
                {str(location)!r},
                CommitRequest([], schema=schema, mode="append", fence=Fence("j", generation=1),
                              metadata={{}}),
            )
        print(version, flush=True)
        if {exit_how!r} == "os._exit":
            os._exit(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    due = int(done.stdout.split()[-1])
    assert log_versions(*filesystem(str(location)))[0][-1] == due
    assert checkpoints_of(location) == ([due] if exit_how == "returns" else [])
