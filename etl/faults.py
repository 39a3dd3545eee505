"""Fault points: places where a test can make the process die abruptly, or freeze.

Set ``DELTA_BARRIER_FAULT`` to one or more specs separated by ``;`` or ``,``::

    [<action>:]<point>[@<job>[:<epoch>]][#<n>]

- ``action`` is ``crash`` (the default) or ``pause``;
- ``point`` is one of :data:`FAULT_POINTS`;
- ``@job`` and ``@job:epoch`` restrict where the spec fires;
- ``#n`` fires on the n-th time a matching point is reached (default 1), e.g. after the
  last of several commits of an epoch. Each spec counts its own matches.

``crash`` calls ``os._exit(FAULT_EXIT_CODE)``, exactly as a killed process would: no
cleanup, no finally blocks. ``pause`` stops the process with SIGSTOP, so that a test can
take over its leases and later SIGCONT it: a zombie that wakes up late and goes on from
the very point where it stopped. It stops between catalog write transactions (none of its
threads' open, none begun: :func:`catalog.writes_held`), so that the catalog stays
writable by the test meanwhile. A spec fires once per process.

Examples: ``after_commit@ingest:2#3``, ``pause:before_commit@etl1:2``,
``crash:after_seal@a:1;crash:before_commit@b:3``.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from typing import Literal, get_args

from catalog import writes_held

FaultPoint = Literal[
    "after_claim",
    "after_restore",
    "after_slice_recorded",
    "before_commit",
    "before_log_commit",
    "after_log_commit",
    "after_commit",
    "after_processed",
    "between_micro_batches",
    "before_seal",
    "after_seal",
]
FAULT_POINTS: tuple[str, ...] = get_args(FaultPoint)
"""Every fault point, in the order of :data:`FaultPoint` (the one list the tests enumerate)."""

FaultAction = Literal["crash", "pause"]
FAULT_ACTIONS: tuple[str, ...] = get_args(FaultAction)
FAULT_ENV = "DELTA_BARRIER_FAULT"
FAULT_EXIT_CODE = 86


@dataclass(frozen=True)
class FaultSpec:
    """One parsed spec of ``DELTA_BARRIER_FAULT``."""

    action: str
    point: str
    job: str | None = None
    epoch: int | None = None
    nth: int = 1

    def matches(self, point: str, job: str, epoch: int) -> bool:
        return (
            self.point == point
            and (self.job is None or self.job == job)
            and (self.epoch is None or self.epoch == epoch)
        )

    def __str__(self) -> str:
        where = f"@{self.job}" if self.job else ""
        if self.epoch is not None:
            where += f":{self.epoch}"
        return f"{self.action}:{self.point}{where}#{self.nth}"


def parse_faults(text: str | None) -> tuple[FaultSpec, ...]:
    """Parse a ``DELTA_BARRIER_FAULT`` value; ValueError names the bad spec."""
    specs = []
    for raw in (text or "").replace(",", ";").split(";"):
        raw = raw.strip()
        if not raw:
            continue
        body, _, nth = raw.partition("#")
        head, _, where = body.partition("@")
        action, _, point = head.rpartition(":")
        action = action or "crash"
        job, _, epoch = where.partition(":")
        if action not in FAULT_ACTIONS:
            raise ValueError(f"fault {raw!r}: unknown action {action!r}; use {FAULT_ACTIONS}")
        if point not in FAULT_POINTS:
            raise ValueError(f"fault {raw!r}: unknown point {point!r}; use {FAULT_POINTS}")
        try:
            count = int(nth or 1)
            at = int(epoch) if epoch else None
        except ValueError:
            raise ValueError(f"fault {raw!r}: epoch and #n must be integers") from None
        if count < 1:
            raise ValueError(f"fault {raw!r}: #n counts from 1")
        specs.append(FaultSpec(action, point, job or None, at, count))
    return tuple(specs)


_lock = threading.Lock()
_parsed: tuple[str | None, tuple[FaultSpec, ...]] = (None, ())
_reached: dict[int, int] = {}  # index of a spec -> times its point was reached
_fired: set[int] = set()


def _specs() -> tuple[FaultSpec, ...]:
    global _parsed
    text = os.environ.get(FAULT_ENV)
    if _parsed[0] != text:
        _parsed = (text, parse_faults(text))
        _reached.clear()
        _fired.clear()
    return _parsed[1]


def maybe_crash(point: FaultPoint, *, job: str, epoch: int) -> None:
    """Crash or pause here if ``DELTA_BARRIER_FAULT`` says so (a no-op when it is unset)."""
    if not os.environ.get(FAULT_ENV):
        return
    with _lock:
        due = []
        for index, spec in enumerate(_specs()):
            if index in _fired or not spec.matches(point, job, epoch):
                continue
            _reached[index] = _reached.get(index, 0) + 1
            if _reached[index] >= spec.nth:
                _fired.add(index)
                due.append(spec)
    for spec in due:
        if spec.action == "pause":
            # Between catalog transactions: a process stopped inside one of its other
            # threads' would keep the catalog's write lock from every other process.
            with writes_held():
                # To this thread: it stops before it returns. Sent to the process, the stop
                # is taken by the main thread, while a job thread goes on (commits) until
                # stopped.
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        else:
            os._exit(FAULT_EXIT_CODE)
