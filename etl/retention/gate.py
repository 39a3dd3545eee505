"""Which jobs of this process have a batch in flight, so that maintenance running beside
them (``etl run --continuous --maintenance-interval``) never commits to a job's tables
while one of its batches runs.

Why: a merge batch removes the files holding the keys it updates, as they were when it
read the table; a compaction commit landing in between would remove them first, and the
batch's commit would fail its precondition (etl/delta/commit.py, ``commit_files``). A
compaction commit lands only while the job is idle, and a batch starts only once such a
commit is done: a batch waits for at most one commit, never for a whole compaction.

A job that runs batches back to back is never idle by chance: while maintenance waits for
the job's batch to end, the job's next batch waits to start (a wait of one commit again).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class BatchGate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: Counter[str] = Counter()
        self._waiting: Counter[str] = Counter()
        """Per job, the maintenance commits waiting for its batch to end."""

    @contextmanager
    def batch(self, job: str) -> Iterator[None]:
        """Around one batch of ``job``, from before it reads its tables to its last commit;
        it starts once no maintenance commit waits for the job."""
        with self._changed:
            self._changed.wait_for(lambda: not self._waiting[job])
            self._running[job] += 1
        try:
            yield
        finally:
            with self._changed:
                self._running[job] -= 1
                self._changed.notify_all()

    @contextmanager
    def idle(
        self, job: str, *, wait: float = 0.0, cancel: threading.Event | None = None
    ) -> Iterator[bool]:
        """Whether ``job`` has no batch in flight, after waiting up to ``wait`` seconds for
        that (less once ``cancel`` is set); none starts until the block ends (keep the
        block to one commit)."""
        deadline = time.monotonic() + wait
        with self._changed:
            self._waiting[job] += 1
            try:
                while self._running[job] and not (cancel is not None and cancel.is_set()):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(min(left, 0.1))
                yield self._running[job] == 0
            finally:
                self._waiting[job] -= 1
                self._changed.notify_all()


__all__ = ["BatchGate"]
