"""The commit request value and the one retry/verify loop every commit goes through, on
real Delta logs on the local file system, written by real delta-rs and our own JSON log
writer (log writers that fail or race on purpose wrap the real ones)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from consistency.models import META_COMMIT_ID, META_GENERATION, META_JOB
from etl.delta.actions import add_action
from etl.delta.commit import Attempt, CommitRequest, claim_table, commit_files, run_commit
from etl.delta.fence import Fence
from etl.delta.files import DataFile, write_arrow
from etl.delta.logwriter import (
    DELTA_RS,
    JSON_LOG,
    DeltaRsCommit,
    DeltaRsLogWriter,
    JsonCommit,
    LogWriter,
    Written,
)
from etl.errors import DeltaIOError, FencedError, InvalidWriteOptionError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
FENCE = Fence("j", generation=1)


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def _table(location: str) -> int:
    files = write_arrow(_rows(range(3)), location, file_prefix="base")
    return commit_files(location, CommitRequest(files, schema=SCHEMA, mode="append", fence=FENCE))


def _ids(location: str) -> list[int]:
    return sorted(DeltaTable(location).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _versions_with(location: str, commit_id: str) -> list[int]:
    return [
        int(entry["version"])
        for entry in DeltaTable(location).history()
        if entry.get(META_COMMIT_ID) == commit_id
    ]


# -- the request value -------------------------------------------------------------------------


def test_a_commit_request_is_a_frozen_value_that_keeps_what_it_was_given():
    files = [DataFile("a.parquet", 1, {}, 1, "{}", 0)]
    metadata: dict[str, str | int | bool] = {"k": 1}
    request = CommitRequest(files, schema=SCHEMA, mode="append", fence=FENCE, metadata=metadata)
    files.append(DataFile("b.parquet", 1, {}, 1, "{}", 0))
    metadata["k"] = 2
    assert request.files == (DataFile("a.parquet", 1, {}, 1, "{}", 0),)
    assert request.metadata == {"k": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.mode = "overwrite"  # type: ignore[misc]
    assert dataclasses.replace(request, mode="overwrite").mode == "overwrite"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"mode": "upsert"}, "mode"),
        ({"mode": "append", "replace_schema": True}, "replace_schema"),
        ({"mode": "overwrite", "removes": ["a.parquet"]}, "removes"),
    ],
)
def test_options_that_cannot_work_together_are_refused_before_anything_is_written(
    tmp_path, options, option
):
    location = str(tmp_path / "t")
    request = CommitRequest([], schema=SCHEMA, fence=FENCE, **options)
    with pytest.raises(InvalidWriteOptionError) as refused:
        commit_files(location, request)
    assert refused.value.option == option
    assert not (tmp_path / "t").exists()


# -- the retry/verify loop ---------------------------------------------------------------------


class _Wrapping(LogWriter[Any]):
    """A real log writer with something done before or after its write."""

    def __init__(
        self,
        inner: LogWriter[Any],
        *,
        before_first: Callable[[], object] | None = None,
        fail_first: bool = False,
        write_first: bool = True,
        taken_first: bool = False,
    ):
        self.inner = inner
        self.before_first = before_first
        self.fail_first = fail_first
        self.write_first = write_first
        self.taken_first = taken_first
        self.calls: list[int] = []

    def write(self, location: str, version: int, entry: Any) -> Written:
        first = not self.calls
        self.calls.append(version)
        if first and self.before_first is not None:
            self.before_first()
        if first and not self.write_first:
            raise OSError("connection refused before the write")
        outcome = self.inner.write(location, version, entry)
        if first and self.fail_first:
            raise OSError("connection reset after the write")
        return "taken" if first and self.taken_first else outcome


def _appending(writer: _Wrapping, files: list[DataFile], commit_id: str, fence=FENCE):
    """The plan of an append of ``files`` through ``writer`` (delta-rs' or our own entry)."""
    custom = {META_COMMIT_ID: commit_id}

    def plan(table: DeltaTable | None) -> Attempt[Any]:
        assert table is not None
        entry: DeltaRsCommit | JsonCommit
        if isinstance(writer.inner, DeltaRsLogWriter):
            entry = DeltaRsCommit(
                fence=fence,
                custom=custom,
                schema=table.schema(),
                actions=tuple(add_action(f, data_change=True) for f in files),
                table=table,
            )
        else:
            entry = JsonCommit(fence=fence, custom=custom, operation="WRITE", files=tuple(files))
        return Attempt(writer, table.version() + 1, entry)

    return plan


WRITERS = pytest.mark.parametrize("inner", [DELTA_RS, JSON_LOG], ids=["delta-rs", "json-log"])


@WRITERS
@pytest.mark.parametrize(
    "answer",
    ["fail_first", "taken_first"],
    # An I/O error after the write; or an object store's client that retried a conditional
    # write whose answer it lost: the retry finds the entry there and reports it taken.
    ids=["failed-after-the-write", "reported-taken"],
)
def test_an_attempt_that_landed_but_was_not_reported_written_is_verified_not_repeated(
    tmp_path, inner, answer
):
    location = str(tmp_path / "t")
    base = _table(location)
    files = write_arrow(_rows([10, 11]), location, file_prefix="ours")
    writer = _Wrapping(inner, **{answer: True})
    commit_id = uuid.uuid4().hex
    version = run_commit(
        location,
        fence=FENCE,
        plan=_appending(writer, files, commit_id),
        commit_id=commit_id,
        operation="commit",
    )
    assert version == base + 1 and writer.calls == [base + 1]
    assert _versions_with(location, commit_id) == [base + 1]
    assert _ids(location) == [0, 1, 2, 10, 11]


@WRITERS
def test_an_attempt_that_failed_before_writing_is_a_delta_io_error(tmp_path, inner):
    location = str(tmp_path / "t")
    base = _table(location)
    files = write_arrow(_rows([10]), location, file_prefix="ours")
    writer = _Wrapping(inner, write_first=False)
    commit_id = uuid.uuid4().hex
    with pytest.raises(DeltaIOError):
        run_commit(
            location,
            fence=FENCE,
            plan=_appending(writer, files, commit_id),
            commit_id=commit_id,
            operation="commit",
        )
    assert writer.calls == [base + 1] and DeltaTable(location).version() == base


@WRITERS
def test_a_lost_race_for_the_version_is_planned_again_and_retried(tmp_path, inner):
    location = str(tmp_path / "t")
    base = _table(location)
    theirs = write_arrow(_rows([20]), location, file_prefix="theirs")
    ours = write_arrow(_rows([10]), location, file_prefix="ours")

    def another_commit() -> None:
        request = CommitRequest(theirs, schema=SCHEMA, mode="append", fence=FENCE)
        assert commit_files(location, request) == base + 1

    writer = _Wrapping(inner, before_first=another_commit)
    commit_id = uuid.uuid4().hex
    version = run_commit(
        location,
        fence=FENCE,
        plan=_appending(writer, ours, commit_id),
        commit_id=commit_id,
        operation="commit",
    )
    assert writer.calls == [base + 1, base + 2] and version == base + 2
    assert _versions_with(location, commit_id) == [base + 2]
    assert _ids(location) == [0, 1, 2, 10, 20]


@WRITERS
def test_a_fence_lost_while_committing_is_fenced_error_and_nothing_lands(tmp_path, inner):
    location = str(tmp_path / "t")
    base = _table(location)
    files = write_arrow(_rows([10]), location, file_prefix="ours")
    newer = Fence(FENCE.job, FENCE.generation + 1)
    writer = _Wrapping(inner, before_first=lambda: claim_table(location, fence=newer))
    commit_id = uuid.uuid4().hex
    with pytest.raises(FencedError) as fenced:
        run_commit(
            location,
            fence=FENCE,
            plan=_appending(writer, files, commit_id),
            commit_id=commit_id,
            operation="commit",
        )
    assert fenced.value.fenced_at == newer.generation
    assert writer.calls == [base + 1]
    assert _versions_with(location, commit_id) == []
    latest = DeltaTable(location)
    assert latest.version() == base + 1
    assert latest.history(1)[0][META_GENERATION] == newer.generation
    assert _ids(location) == [0, 1, 2]


def test_both_writers_record_the_same_commit_info_and_fence(tmp_path):
    """delta-rs' entry and our own carry the request's metadata, the job, its generation,
    a commit id and the fence's app transaction alike."""
    location = str(tmp_path / "t")
    _table(location)
    for inner in (DELTA_RS, JSON_LOG):
        files = write_arrow(_rows([30]), location, file_prefix="x")
        commit_id = uuid.uuid4().hex
        run_commit(
            location,
            fence=FENCE,
            plan=_appending(_Wrapping(inner), files, commit_id),
            commit_id=commit_id,
            operation="commit",
        )
        (version,) = _versions_with(location, commit_id)
        entry = (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").read_text()
        actions = [json.loads(line) for line in entry.splitlines()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert (info[META_JOB], info[META_GENERATION]) == (FENCE.job, 1)
        txns = [a["txn"] for a in actions if "txn" in a]
        assert txns == [{"appId": FENCE.app_id, "version": 1}]


def test_reading_through_etl_delta_does_not_load_the_write_path():
    code = (
        "import sys, etl.delta, etl.delta.log, etl.delta.read\n"
        "from etl.delta import read_arrow, table_version\n"
        "print(sorted(m for m in sys.modules if m.startswith('etl.delta')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    for module in ("files", "fence", "commit", "restore", "logwriter", "actions", "merge"):
        assert f"'etl.delta.{module}'" not in loaded, loaded
