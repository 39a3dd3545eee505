"""Issue 28: a kept table state is checked for being the latest by the next entry alone.

:func:`etl.delta.log.loaded_table` asked for the latest version lists the log after the
state it kept (a LIST on an object store) only when the next version's entry is there;
while it is absent the kept state is the latest, found by one HEAD. A commit of another
writer, which shares no state with this process, is seen all the same, and so is every
version the log says exists.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from etl.delta import table_version
from etl.delta.log import loaded_table
from etl.storage import storage_options
from tests.support.s3_requests import HEAD, LIST

ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


def _another_writer_appends(location: str) -> None:
    """A commit by a writer with no state in common with :func:`loaded_table`'s."""
    write_deltalake(location, ROWS, mode="append", storage_options=storage_options(location))


def _latest(location: str) -> int:
    with loaded_table(location) as table:
        return table.version()


def test_the_latest_of_a_kept_state_sees_every_commit_of_another_writer(tmp_path):
    location = str(tmp_path / "t")
    _another_writer_appends(location)
    assert _latest(location) == 0
    for version in range(1, 4):
        _another_writer_appends(location)
        assert table_version(location) == version  # the log says it exists
        assert _latest(location) == version
        assert _latest(location) == version  # kept, and still the latest
    with loaded_table(location) as table:
        assert table.to_pyarrow_table().num_rows == 8


def test_a_state_kept_at_an_older_version_is_brought_to_the_latest(tmp_path):
    location = str(tmp_path / "t")
    for _ in range(3):
        _another_writer_appends(location)
    with loaded_table(location, version=0) as table:  # the only state kept: version 0
        assert table.version() == 0
    assert _latest(location) == 2


@pytest.mark.s3
def test_on_s3_the_latest_of_an_unchanged_table_costs_no_listing(s3_bucket, s3_requests):
    location = f"{s3_bucket}/t"
    _another_writer_appends(location)
    _another_writer_appends(location)
    assert _latest(location) == 1  # opened, and its state kept
    s3_requests.take()

    assert _latest(location) == 1
    unchanged = s3_requests.take()
    assert unchanged[LIST] == 0
    assert unchanged[HEAD] == 2  # the kept version's entry, and the next one's absence

    _another_writer_appends(location)
    s3_requests.take()
    assert _latest(location) == 2  # the probe finds entry 2: the log is read on
    assert _latest(location) == 2
