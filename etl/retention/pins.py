"""Pins held by open snapshots: created when a snapshot opens, renewed from a daemon
thread while it is open, released when it closes. A holder that dies stops renewing, and
its pin expires by itself after ``ttl_seconds``.

docs/design.md, "Reading: three consistency levels": the files a repeatable-read
snapshot needs are protected from cleanup while it is open. The catalog serializes pin
creation with expiry (``Catalog.create_pin`` raises EpochExpiredError for an expired
epoch). A read-committed cut names no single epoch: its pin is taken first and then its
tables' epochs are checked not expired, which maintenance's order (expiries read before
pins) makes race-free; see etl/retention/maintain.py.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping

from catalog import CatalogError, CatalogReads, EpochExpiredError, Pin
from catalog.errors import PinExpiredError

log = logging.getLogger(__name__)

DEFAULT_PIN_TTL_SECONDS = 60.0


def default_holder(kind: str = "snapshot") -> str:
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class PinHolder:
    """One pin, renewed every ``ttl / 3`` seconds until :meth:`close`."""

    def __init__(
        self,
        catalog: CatalogReads,
        *,
        versions: Mapping[str, int | None],
        epoch: int | None,
        epochs: Mapping[str, int | None] | None = None,
        pipeline: str | None = None,
        holder: str | None = None,
        ttl_seconds: float = DEFAULT_PIN_TTL_SECONDS,
    ) -> None:
        self.catalog = catalog
        self.ttl_seconds = ttl_seconds
        self.lost: str | None = None
        pinned = {t: int(v) for t, v in versions.items() if v is not None}
        self.pin: Pin | None = catalog.create_pin(
            pipeline=pipeline,
            epoch=epoch,
            versions=pinned,
            holder=holder or default_holder(),
            ttl_seconds=ttl_seconds,
        )
        if epoch is None and epochs:
            # No epoch for the catalog to check atomically: check each table's epoch after
            # the pin exists (an expiry after this point sees the pin).
            for table_epoch in sorted({e for e in epochs.values() if e is not None}):
                expiry = catalog.expiry_of(table_epoch)
                if expiry is not None:
                    self.close()
                    raise EpochExpiredError(
                        epoch=table_epoch, rule=expiry.rule, expired_at=expiry.expired_at
                    )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._renew, name="pin-keeper", daemon=True)
        self._thread.start()

    @property
    def id(self) -> str | None:
        return self.pin.id if self.pin is not None else None

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_seconds / 3):
            with self._lock:
                pin = self.pin
                if pin is None:
                    return
                try:
                    self.pin = self.catalog.renew_pin(pin, ttl_seconds=self.ttl_seconds)
                except PinExpiredError as exc:
                    self.lost = str(exc)
                    log.error("pin %s of a snapshot was lost: %s", pin.id, exc)
                    return
                except CatalogError as exc:  # may come back before the pin lapses
                    log.warning("could not renew pin %s: %s", pin.id, exc)

    def close(self) -> None:
        """Stop renewing and release the pin (idempotent)."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        lock = getattr(self, "_lock", None) or threading.Lock()
        with lock:
            pin, self.pin = self.pin, None
        if pin is not None:
            try:
                self.catalog.release_pin(pin)
            except CatalogError as exc:  # it lapses by itself
                log.warning("could not release pin %s: %s", pin.id, exc)

    def __enter__(self) -> PinHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["DEFAULT_PIN_TTL_SECONDS", "PinHolder", "default_holder"]
