"""Fault points: places where a test can make the process die abruptly.

Set ``DELTA_BARRIER_FAULT=<point>`` (optionally ``<point>@<job>`` or
``<point>@<job>:<epoch>``, and optionally ``#<n>`` at the end to die on the n-th time a
matching point is reached, e.g. after the last of several commits of an epoch) and the
process calls ``os._exit(FAULT_EXIT_CODE)`` when it reaches that point, exactly as a
killed process would: no cleanup, no finally blocks.
"""

from __future__ import annotations

import os
import threading
from typing import Literal

FaultPoint = Literal[
    "after_claim",
    "after_restore",
    "after_slice_recorded",
    "before_commit",
    "after_commit",
    "after_processed",
    "between_micro_batches",
    "before_seal",
    "after_seal",
]
FAULT_ENV = "DELTA_BARRIER_FAULT"
FAULT_EXIT_CODE = 86

_reached = 0
_reached_lock = threading.Lock()


def maybe_crash(point: FaultPoint, *, job: str, epoch: int) -> None:
    global _reached
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    spec, _, nth = spec.partition("#")
    name, _, where = spec.partition("@")
    if name != point:
        return
    want_job, _, want_epoch = where.partition(":")
    if want_job and want_job != job:
        return
    if want_epoch and int(want_epoch) != epoch:
        return
    with _reached_lock:
        _reached += 1
        if _reached < int(nth or 1):
            return
    os._exit(FAULT_EXIT_CODE)


__all__ = [
    "FAULT_ENV",
    "FAULT_EXIT_CODE",
    "FaultPoint",
    "maybe_crash",
]
