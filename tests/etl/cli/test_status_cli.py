"""``etl status`` as an operator sees it, through the real command (issue 12): the table
fits the terminal's width, and ``--watch`` refreshes in place on a terminal, showing new
epochs as they are sealed, until Ctrl-C ends it cleanly."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from tests.support.cli_runner import ETL, command_environment, etl

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _pipeline(warehouse: Path):
    catalog = load_catalog(None, warehouse=warehouse)
    long = "a_rather_long_table_name_that_would_push_columns_over_the_edge"
    catalog.register_table(TableSpec("raw", str(warehouse / "raw"), kind="root", pipeline="p"))
    catalog.register_table(TableSpec(long, str(warehouse / long), pipeline="p"))
    catalog.register_job(JobSpec("load", "raw", source="src", pipeline="p"))
    catalog.register_job(JobSpec("roll_up_everything", long, inputs=("raw",), pipeline="p"))
    return catalog


def _seal(catalog, epoch: int, version: int) -> None:
    lease = catalog.acquire_lease("load", "test", ttl_seconds=60)
    catalog.seal("load", lease.generation, [SealRequest("raw", epoch, version, rows=1)])
    catalog.release_lease(lease)


def test_status_fits_the_terminal_width(tmp_path):
    warehouse = tmp_path / "wh"
    catalog = _pipeline(warehouse)
    _seal(catalog, catalog.open_epoch(pipeline="p").id, 0)
    for width in (60, 80, 120):
        result = etl("status", "--warehouse", warehouse, cwd=tmp_path, COLUMNS=str(width))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines and max(len(line) for line in lines) <= width, (width, result.stdout)
        assert "pipeline p" in result.stdout
    catalog.close()


def _read_until(fd: int, pattern: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            seen += chunk.decode(errors="replace")
            if re.search(pattern, re.sub(r"\s+", " ", ANSI.sub("", seen))):
                return seen
    raise AssertionError(f"{pattern!r} not shown within {timeout}s:\n{ANSI.sub('', seen)[-2000:]}")


def test_status_watch_refreshes_in_place_until_ctrl_c(tmp_path):
    warehouse = tmp_path / "wh"
    catalog = _pipeline(warehouse)
    _seal(catalog, catalog.open_epoch(pipeline="p").id, 0)
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [str(ETL), "status", "--watch", "--interval", "0.3", "--warehouse", str(warehouse)],
        cwd=tmp_path,
        env=command_environment(COLUMNS="120", LINES="40", TERM="xterm"),
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        start_new_session=True,
    )
    os.close(secondary)
    try:
        _read_until(primary, r"raw\W+1\W+0\W", timeout=60)
        second = catalog.open_epoch(pipeline="p").id
        _seal(catalog, second, 1)
        # the new epoch shows, and the note longer than the terminal wraps instead of being cut
        shown = _read_until(
            primary, rf"raw\W+{second}\W+0\W.*declares it: etl retire job roll_up_everything", 30
        )
        # refreshed in place: Rich moves the cursor up over the previous frame
        assert "\x1b[" in shown and ("\x1b[1A" in shown or "\x1b[2K" in shown), shown[-500:]
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        os.close(primary)
    catalog.close()
