"""Child processes of the fault campaign: waiting until one is stopped (SIGSTOP), or gone."""

from __future__ import annotations

import time


def proc_state(pid: int) -> str | None:
    """The one-letter state of a process from /proc/PID/stat ('T' when stopped), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    return stat.rpartition(")")[2].split()[0]


def wait_stopped(pid: int, *, timeout: float, poll=None) -> bool:
    """True once the process is stopped; False if it exited (or ``poll()`` says so) or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = proc_state(pid)
        if state in ("T", "t"):
            return True
        if state in (None, "Z", "X") or (poll is not None and poll() is not None):
            return False
        time.sleep(0.05)
    return False
