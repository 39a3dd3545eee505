"""A process holds its catalog writes back (a fault point's ``pause``): it stops only
between write transactions, so that no other process waits on a write lock it keeps."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from catalog import writes_held
from catalog.connection import Database


def _database(tmp_path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'c.sqlite'}", create=True, read_only=None)


def test_holding_waits_for_an_open_write_and_keeps_new_ones_from_beginning(tmp_path):
    database = _database(tmp_path)
    inside = threading.Event()
    finish = threading.Event()
    order: list[str] = []

    def long_write() -> None:
        with database.write() as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            inside.set()
            finish.wait()
            order.append("first write ends")

    def later_write() -> None:
        with database.write() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            order.append("second write")

    first = threading.Thread(target=long_write)
    first.start()
    inside.wait()
    threading.Timer(0.2, finish.set).start()
    with writes_held() as ended:
        assert ended
        order.append("held")
        second = threading.Thread(target=later_write)
        second.start()
        second.join(0.3)
        assert second.is_alive()  # waits for the gate, not for a lock it could not get
    second.join()
    first.join()
    assert order == ["first write ends", "held", "second write"]


def test_a_write_that_does_not_end_in_time_is_reported(tmp_path):
    database = _database(tmp_path)
    inside = threading.Event()
    finish = threading.Event()

    def stuck_write() -> None:
        with database.write():
            inside.set()
            finish.wait()

    thread = threading.Thread(target=stuck_write)
    thread.start()
    inside.wait()
    started = time.monotonic()
    with writes_held(timeout=0.2) as ended:
        assert not ended
    assert time.monotonic() - started >= 0.2
    finish.set()
    thread.join()


def test_the_holding_thread_writes_and_reads_freely(tmp_path):
    database = _database(tmp_path)
    with writes_held() as ended, database.write() as conn:
        assert ended
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    with database.read() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 0
