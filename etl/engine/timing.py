"""Where a batch's time goes: wall seconds per stage, reported with every BatchResult.

Spark evaluates lazily, so the stages are the driver's steps, not the plan's operators:
``read`` sets up the inputs (catalog, Delta log, file lists: no rows are read yet),
``transform`` analyses the job's query, ``write`` runs the Spark job that computes the
rows and writes the files, ``commit`` commits them to Delta and records PROCESSED,
``audit`` runs the quality gate and ``seal`` records WRITTEN.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Literal

Stage = Literal["read", "transform", "write", "commit", "audit", "seal"]
STAGES: tuple[Stage, ...] = ("read", "transform", "write", "commit", "audit", "seal")


class StageClock:
    """Accumulates the wall time of one batch's stages (a stage may run several times:
    one per micro-batch or table). Time is exclusive: while a stage runs inside another
    (the quality gate's rewrite is a ``write`` inside ``audit``), it counts for the inner
    one only, so the stages add up to the batch."""

    def __init__(self) -> None:
        self._spent: dict[Stage, float] = {}
        self._active: list[Stage] = []
        self._since = 0.0

    def _charge(self, now: float) -> None:
        if self._active:
            top = self._active[-1]
            self._spent[top] = self._spent.get(top, 0.0) + now - self._since
        self._since = now

    @contextmanager
    def stage(self, name: Stage) -> Iterator[None]:
        self._charge(time.perf_counter())
        self._active.append(name)
        try:
            yield
        finally:
            self._charge(time.perf_counter())
            self._active.pop()

    def totals(self) -> Mapping[str, float]:
        """Seconds per stage that ran, in :data:`STAGES` order (a read-only copy)."""
        return MappingProxyType({s: self._spent[s] for s in STAGES if s in self._spent})


__all__ = ["STAGES", "Stage", "StageClock"]
