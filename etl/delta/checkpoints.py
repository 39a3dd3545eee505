"""Checkpoints written off the commit's path, by one background thread per process.

A checkpoint is an optimization of the log (a reader replays the JSON entries after the
newest one): a commit stands whether or not it gets one. Writing it is delta-rs loading the
table at the version and writing its whole state as Parquet, about 27 ms of a batch that
commits a checkpointed version: in a 100-table pipeline, 7% of all batch time was spent
waiting for checkpoints (bench/RESULTS-issue28.md, session 54). So a commit asks for its
checkpoint here and returns; the thread writes them in the order asked, one at a time, at a
lower CPU priority than the batches where the platform allows it.

Only the newest version asked for a table is written: a table that committed again before
its checkpoint was written gets the newer one. :func:`flush_checkpoints` waits until every
checkpoint asked for is written; a run waits for them at its end and the process at its
exit (:func:`finish_checkpoints`). A process killed before loses its pending checkpoints,
and the table's next due version writes one.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading

from deltalake.exceptions import DeltaError

from etl.delta.log import loaded_table
from etl.errors import DeltaIOError

_log = logging.getLogger(__name__)

BACKGROUND_NICENESS = 5
"""How much lower the checkpoint thread's CPU priority is than the batches' (Linux: a
thread's own nice value)."""

FINISH_WAIT_SECONDS = 60.0
"""How long the end of a run, or of the process, waits for its pending checkpoints."""


def write_checkpoint(location: str, version: int) -> None:
    """Checkpoint ``version`` of the table at ``location`` now; a failure is logged, not
    raised (the commit stands)."""
    try:
        with loaded_table(location, version=version, operation="checkpoint") as table:
            table.create_checkpoint()
    except (DeltaIOError, DeltaError, OSError) as exc:
        _log.warning("no checkpoint at version %s of %s: %s", version, location, exc)


class BackgroundCheckpoints:
    """Checkpoints asked for (:meth:`request`) and written by one daemon thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._pending: dict[str, int] = {}
        """Location -> the version to checkpoint, in the order first asked."""
        self._writing = False
        self._thread: threading.Thread | None = None

    def request(self, location: str, version: int) -> None:
        """Have ``version`` of ``location`` checkpointed (or a newer version, if one is
        asked for before the thread gets to it)."""
        with self._changed:
            self._pending[location] = max(version, self._pending.get(location, version))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="delta-checkpoints", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def pending(self) -> dict[str, int]:
        """The checkpoints asked for and not yet started: location -> version."""
        with self._changed:
            return dict(self._pending)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every checkpoint asked for is written; False when ``timeout`` seconds
        passed first."""
        with self._changed:
            return self._changed.wait_for(
                lambda: not self._pending and not self._writing, timeout=timeout
            )

    def _run(self) -> None:
        _lower_priority()
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._pending))
                location = next(iter(self._pending))
                version = self._pending.pop(location)
                self._writing = True
            try:
                write_checkpoint(location, version)
            except Exception:  # noqa: BLE001 - the thread outlives any one table's failure
                _log.exception("no checkpoint at version %s of %s", version, location)
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _forget(self) -> None:
        """In a forked child: the parent's thread and requests are not the child's."""
        self._changed = threading.Condition()
        self._pending = {}
        self._writing = False
        self._thread = None


def _lower_priority() -> None:
    if hasattr(os, "setpriority") and hasattr(threading, "get_native_id"):
        # Not permitted here: the thread runs at the batches' priority.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)


CHECKPOINTS = BackgroundCheckpoints()
"""The process's checkpoint thread."""


def request_checkpoint(location: str, version: int) -> None:
    """Have ``version`` of the table at ``location`` checkpointed in the background."""
    CHECKPOINTS.request(location, version)


def flush_checkpoints(timeout: float | None = None) -> bool:
    """Wait until every checkpoint this process asked for is written; False when
    ``timeout`` seconds passed first."""
    return CHECKPOINTS.flush(timeout)


def finish_checkpoints(timeout: float = FINISH_WAIT_SECONDS) -> bool:
    """:func:`flush_checkpoints` for at most ``timeout`` seconds, then go on with a warning
    naming what is still pending (each such table checkpoints again at its next due
    version). A run calls it at its end, the process at its exit."""
    if flush_checkpoints(timeout):
        return True
    _log.warning(
        "checkpoints still pending after %.0f s (written later, or at each table's next due "
        "version): %s",
        timeout,
        CHECKPOINTS.pending(),
    )
    return False


atexit.register(finish_checkpoints)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CHECKPOINTS._forget)
