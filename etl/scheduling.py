"""How many batches a run runs at once, and the defaults of its leases (no Spark here:
the command line reads them before any JVM starts)."""

from __future__ import annotations

import os

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


__all__ = ["DEFAULT_LEASE_TTL_SECONDS", "DEFAULT_SLOW_BATCH_SECONDS", "default_parallel_batches"]
