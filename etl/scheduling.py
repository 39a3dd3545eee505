"""How many batches a run runs at once, when a job behind coalesces its epochs, and the
defaults of its leases (no Spark here: the command line reads them before any JVM starts)."""

from __future__ import annotations

import os
from typing import Literal

BacklogThreshold = int | None | Literal["auto"]
"""How many pending epochs make a job coalesce them into one batch: a number (at least 1),
None (never), or ``"auto"``: :data:`BATCH_BACKLOG_THRESHOLD` for a run that catches up
once, :data:`CONTINUOUS_BACKLOG_THRESHOLD` for a continuous run."""

BATCH_BACKLOG_THRESHOLD = 10
"""A run that catches up once (``--once``, ``run_pending``) coalesces at ten pending epochs:
after a short outage every epoch stays readable on its own."""

CONTINUOUS_BACKLOG_THRESHOLD = 2
"""A continuous run coalesces as soon as a job is one epoch behind: one epoch at a time
while it keeps up, and when the machine cannot (bench freshness: a ten-job chain doing
0.8-0.9 epochs/s against 1/s arriving), the lag stays about one batch instead of climbing
to ten epochs before a catch-up batch (p95 3.7 s against 8.9-11 s)."""


def backlog_threshold_for(threshold: BacklogThreshold, *, continuous: bool) -> int | None:
    """The threshold a run uses: ``threshold`` itself unless it is ``"auto"``."""
    if threshold != "auto":
        return threshold
    return CONTINUOUS_BACKLOG_THRESHOLD if continuous else BATCH_BACKLOG_THRESHOLD


DEFAULT_LEASE_TTL_SECONDS = 15.0
"""A live run renews its leases every ttl/3 seconds; a dead one's lapse within this."""

DEFAULT_SLOW_BATCH_SECONDS = 5.0
"""A batch that has run this long stops counting against a run's ``max_parallel_jobs``:
it keeps its thread, and the other jobs are not held back behind it."""


def default_parallel_batches() -> int:
    """The cores this process may use (at least 1), the default ``max_parallel_jobs``: a
    small batch's cost is driver CPU, so more batches at once only stretch each other."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


__all__ = [
    "BATCH_BACKLOG_THRESHOLD",
    "BacklogThreshold",
    "CONTINUOUS_BACKLOG_THRESHOLD",
    "DEFAULT_LEASE_TTL_SECONDS",
    "DEFAULT_SLOW_BATCH_SECONDS",
    "backlog_threshold_for",
    "default_parallel_batches",
]
