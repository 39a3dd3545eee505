"""A listing of a log that other writers add entries to may miss some of them: a load or
a replay that finds a version missing between two others looks again, and reports only
a gap that is really there."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from etl.delta import log as log_module
from etl.delta import logfile as logfile_module
from etl.errors import DeltaIOError

GAP = (
    "Generic delta kernel error: Expected contiguous commit files, but found gap: "
    "00000000000000000001.json -> 00000000000000000003.json"
)


@pytest.fixture
def table(tmp_path):
    location = str(tmp_path / "table")
    for i in range(4):
        write_deltalake(location, pa.table({"id": [i]}), mode="append")
    return location


class Loads:
    """delta-rs' table, refusing the first ``gaps`` loads as a listing with a gap does."""

    def __init__(self, gaps: int):
        self.gaps = gaps
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.gaps:
            raise DeltaError(GAP)
        return DeltaTable(*args, **kwargs)


def test_a_load_whose_listing_missed_an_entry_lists_again(table, monkeypatch):
    loads = Loads(gaps=log_module.LISTING_ATTEMPTS - 1)
    monkeypatch.setattr(log_module, "DeltaTable", loads)
    assert log_module.open_table(table).version() == 3
    assert loads.calls == log_module.LISTING_ATTEMPTS


def test_a_gap_that_stays_is_reported_after_the_last_listing(table, monkeypatch):
    loads = Loads(gaps=log_module.LISTING_ATTEMPTS)
    monkeypatch.setattr(log_module, "DeltaTable", loads)
    with pytest.raises(DeltaIOError, match="Expected contiguous commit files"):
        log_module.open_table(table, operation="claim")
    assert loads.calls == log_module.LISTING_ATTEMPTS


def test_a_log_with_an_entry_deleted_is_refused_by_every_load(table, tmp_path):
    (tmp_path / "table" / "_delta_log" / f"{2:020d}.json").unlink()
    with pytest.raises(DeltaIOError, match="table"):
        log_module.open_table(table)


def test_a_replay_looks_up_an_entry_its_listing_missed_and_reports_one_that_is_gone(
    table, tmp_path, monkeypatch
):
    listed = logfile_module.log_versions

    def missing_one(fs, root):
        commits, checkpoints = listed(fs, root)
        return [v for v in commits if v != 2], checkpoints

    monkeypatch.setattr(logfile_module, "log_versions", missing_one)
    assert len(logfile_module.active_adds(table, 3)) == 4

    other = str(tmp_path / "other")
    for i in range(4):
        write_deltalake(other, pa.table({"id": [i]}), mode="append")
    (tmp_path / "other" / "_delta_log" / f"{2:020d}.json").unlink()
    with pytest.raises(DeltaIOError, match=r"log entries \[2\] of version 3 are gone"):
        logfile_module.active_adds(other, 3)
