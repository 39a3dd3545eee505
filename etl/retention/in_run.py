"""``etl maintain <pipeline>`` inside a continuous run (``etl run --continuous
--maintenance-interval SECONDS``), from a background thread of the run's process.

The jobs go on meanwhile. Maintenance compacts the run's own jobs' tables under the run's
leases, and its commits land only while the job has no batch in flight (etl/retention/
gate.py: it waits a few seconds for that); a compaction that loses the race to a job's
commit is planned again, and skipped until the next round if the job stays busy. Nothing maintenance does can fail the run: an error is reported and the next
round tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog import Catalog, Lease
from etl.retention.gate import BatchGate
from etl.retention.maintain import HeldJobs, MaintenanceReport, maintain

log = logging.getLogger(__name__)


@dataclass
class MaintenanceTotals:
    """What the rounds of maintenance inside one run did, summed."""

    rounds: int = 0
    epochs_expired: int = 0
    compacted_files: int = 0
    compacted_into: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    log_entries_removed: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, report: MaintenanceReport) -> None:
        self.rounds += 1
        self.epochs_expired += len(report.epochs_expired)
        self.compacted_files += report.compacted_files
        self.compacted_into += report.compacted_into
        self.files_removed += report.files_removed
        self.bytes_removed += report.bytes_removed
        self.log_entries_removed += report.log_entries_removed
        self.skipped += len(report.skipped)

    def summary(self) -> str:
        failed = f", {len(self.errors)} failed" if self.errors else ""
        return (
            f"maintenance: {self.rounds} round(s){failed}: {self.epochs_expired} epoch(s) "
            f"expired, compacted {self.compacted_files} file(s) into {self.compacted_into}, "
            f"removed {self.files_removed} file(s) ({self.bytes_removed:,} bytes) and "
            f"{self.log_entries_removed} log entries"
        )


MaintenanceCallback = Callable[[MaintenanceReport | None, Exception | None], None]
"""Called after each round: its report, or the error that stopped it."""


class MaintenanceLoop:
    """Runs maintenance of ``pipeline`` every ``interval`` seconds (the first after one
    interval) from a daemon thread, between ``start`` and ``stop`` (a context manager).

    ``leases``: the leases the run holds now; ``gate``: the one its batches pass.
    ``options``: further keyword arguments of :func:`etl.retention.maintain.maintain`.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        pipeline: str,
        interval: float,
        leases: Callable[[], Mapping[str, Lease]],
        gate: BatchGate,
        on_round: MaintenanceCallback | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.catalog = catalog
        self.pipeline = pipeline
        self.interval = interval
        self.totals = MaintenanceTotals()
        self._leases = leases
        self._gate = gate
        self._on_round = on_round
        self._options = dict(options or {})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maintenance", daemon=True)

    def run_round(self) -> MaintenanceReport | None:
        """One round now, in the calling thread; never raises (the error is reported)."""
        try:
            report = maintain(
                self.catalog,
                pipeline=self.pipeline,
                held=HeldJobs(dict(self._leases()), self._gate, cancel=self._stop),
                **self._options,
            )
        except Exception as exc:  # noqa: BLE001 - maintenance never stops the run
            log.warning("maintenance of pipeline %s failed: %s", self.pipeline, exc)
            self.totals.rounds += 1
            self.totals.errors.append(f"{type(exc).__name__}: {exc}")
            if self._on_round is not None:
                self._on_round(None, exc)
            return None
        self.totals.add(report)
        if self._on_round is not None:
            self._on_round(report, None)
        return report

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_round()

    def start(self) -> MaintenanceLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, after the round in progress (if any) ends."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> MaintenanceLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["MaintenanceCallback", "MaintenanceLoop", "MaintenanceTotals"]
