"""A runner's job leases, renewed in the background while the run is alive.

A lease lives ``ttl`` seconds unless renewed; a live run renews every lease it holds every
``ttl / 3`` seconds from a daemon thread, so that a long batch (a catch-up from cron, a
slow object store) never outlives it, while a dead run's lease lapses within ``ttl``.
A lease that another runner took over is *lost*: :meth:`LeaseKeeper.check` raises
LeaseLostError, which a batch calls before every write. Whatever a lost runner still
tries is refused anyway (the catalog checks generations, the Delta tables are fenced:
:class:`etl.delta.Fence`); the check makes it stop early.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from catalog import Catalog, CatalogError, Lease, StaleLeaseError
from etl.errors import InternalError, LeaseLostError

log = logging.getLogger(__name__)


class LeaseKeeper:
    """The leases one runner holds, and the thread that renews them."""

    def __init__(self, catalog: Catalog, *, owner: str, ttl_seconds: float) -> None:
        self.catalog = catalog
        self.owner = owner
        self.ttl_seconds = ttl_seconds
        self._leases: dict[str, Lease] = {}
        self._lost: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return bool(self._leases)

    def acquire(self, jobs: Iterable[str]) -> None:
        """Take every job's lease (all or none: LeaseHeldError releases those taken)."""
        try:
            for job in jobs:
                lease = self.catalog.acquire_lease(job, self.owner, ttl_seconds=self.ttl_seconds)
                with self._lock:
                    self._leases[job] = lease
                    self._lost.pop(job, None)
        except BaseException:
            self.release()
            raise
        self._start()

    def lease(self, job: str) -> Lease:
        """The job's current lease; LeaseLostError if another runner took it over."""
        with self._lock:
            if job in self._lost:
                raise LeaseLostError(
                    job=job, generation=self._generation(job), detail=self._lost[job]
                )
            lease = self._leases.get(job)
        if lease is None:
            raise InternalError(f"runner does not hold the lease of job {job!r}")
        return lease

    def check(self, job: str) -> None:
        """Raise LeaseLostError once the job's lease was taken over."""
        self.lease(job)

    def release(self) -> None:
        """Stop renewing and give every lease up (leases taken over are left alone)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
            self._lost.clear()
        for lease in leases:
            try:
                self.catalog.release_lease(lease)
            except CatalogError as exc:  # the lease lapses by itself
                log.warning("could not release the lease of job %s: %s", lease.job, exc)

    def renew_all(self) -> None:
        """Renew every lease held now (the background thread calls this)."""
        with self._lock:
            leases = [lease for job, lease in self._leases.items() if job not in self._lost]
        for lease in leases:
            try:
                renewed = self.catalog.renew_lease(lease, ttl_seconds=self.ttl_seconds)
            except StaleLeaseError as exc:
                log.error("lost the lease of job %s: %s", lease.job, exc)
                with self._lock:
                    self._lost[lease.job] = str(exc)
                continue
            except CatalogError as exc:
                # The catalog may be back before the lease lapses; if not, the job is fenced.
                log.warning("could not renew the lease of job %s: %s", lease.job, exc)
                continue
            with self._lock:
                if self._leases.get(lease.job) == lease:
                    self._leases[lease.job] = renewed

    def _generation(self, job: str) -> int:
        lease = self._leases.get(job)
        return lease.generation if lease is not None else -1

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name="lease-keeper", daemon=True
        )
        self._thread.start()

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.ttl_seconds / 3):
            self.renew_all()


__all__ = ["LeaseKeeper"]
