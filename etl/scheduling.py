"""How many batches a run runs at once, when a job behind coalesces its epochs, and the
defaults of its leases (no Spark here: the command line reads them before any JVM starts)."""

from __future__ import annotations

import os
from dataclasses import dataclass
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


DEFAULT_RETRIES = 4
"""A continuous run tries a failed batch again up to four times (five attempts in all)."""

DEFAULT_RETRY_BACKOFF_SECONDS = 1.0
"""The wait before the first retry; it doubles with every failed attempt..."""

MAX_RETRY_BACKOFF_SECONDS = 60.0
"""...up to this."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a run retries a job whose batch failed: after ``backoff_seconds``, doubling with
    every failed attempt up to ``max_backoff_seconds``, ``retries`` times; then the job's
    retries are spent and the run ends (exit 1, so that a supervisor restarts it), unless
    ``keep_going``: then the job is retried at the capped backoff until the run stops.
    A success resets the count. Every failed attempt stays on record in the catalog."""

    retries: int = DEFAULT_RETRIES
    backoff_seconds: float = DEFAULT_RETRY_BACKOFF_SECONDS
    max_backoff_seconds: float = MAX_RETRY_BACKOFF_SECONDS
    keep_going: bool = False

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ValueError(f"{self!r}: retries and backoffs cannot be negative")

    def delay(self, failed: int) -> float:
        """Seconds to wait before the next attempt, after ``failed`` failed attempts in a row."""
        return min(self.backoff_seconds * 2 ** max(0, failed - 1), self.max_backoff_seconds)

    def spent(self, failed: int) -> bool:
        """Whether ``failed`` failed attempts in a row leave no retry."""
        return not self.keep_going and failed > self.retries


def retry_policy_for(
    retries: int | None, *, backoff_seconds: float, keep_going: bool, continuous: bool
) -> RetryPolicy | None:
    """The policy of a run: ``retries`` (default: :data:`DEFAULT_RETRIES` for a continuous
    run; a run once without ``retries`` has none: a failed job stops, the others go on)."""
    if retries is None:
        if not continuous:
            return None
        retries = DEFAULT_RETRIES
    return RetryPolicy(retries=retries, backoff_seconds=backoff_seconds, keep_going=keep_going)


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
    "DEFAULT_RETRIES",
    "DEFAULT_RETRY_BACKOFF_SECONDS",
    "DEFAULT_SLOW_BATCH_SECONDS",
    "MAX_RETRY_BACKOFF_SECONDS",
    "RetryPolicy",
    "backlog_threshold_for",
    "default_parallel_batches",
    "retry_policy_for",
]
