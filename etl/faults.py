"""Fault points: places where a test can make the process die abruptly.

Set ``DELTA_BARRIER_FAULT=<point>`` (optionally ``<point>@<job>`` or
``<point>@<job>:<epoch>``) and the process calls ``os._exit(FAULT_EXIT_CODE)`` when it
reaches that point, exactly as a killed process would: no cleanup, no finally blocks.
"""

from __future__ import annotations

import os
from typing import Literal

FaultPoint = Literal[
    "before_commit",
    "after_commit",
    "between_micro_batches",
    "after_seal",
    "after_slice_recorded",
]
FAULT_ENV = "DELTA_BARRIER_FAULT"
FAULT_EXIT_CODE = 86


def maybe_crash(point: FaultPoint, *, job: str, epoch: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, where = spec.partition("@")
    if name != point:
        return
    want_job, _, want_epoch = where.partition(":")
    if want_job and want_job != job:
        return
    if want_epoch and int(want_epoch) != epoch:
        return
    os._exit(FAULT_EXIT_CODE)
