"""A runner's job leases, renewed in the background while the run is alive.

A lease lives ``ttl`` seconds unless renewed; a live run renews every lease it holds every
``ttl / 3`` seconds from a daemon thread, so that a long batch (a catch-up from cron, a
slow object store) never outlives it, while a dead run's lease lapses within ``ttl``.
A lease that another runner took over is *lost*: :meth:`LeaseKeeper.check` raises
LeaseLostError, which a batch calls before every write. Whatever a lost runner still
tries is refused anyway (the catalog checks generations, the Delta tables are fenced:
:class:`etl.delta.Fence`); the check makes it stop early.

Fast takeover: an owner string is ``host:pid:start:id`` (:func:`make_owner`), where
``start`` is the process's start time in clock ticks since boot (``/proc/PID/stat``).
A lease whose owner ran on this host and whose process is gone (no such pid, or a pid
reused by a process that started at another time) is taken over at once
(:meth:`Catalog.take_over_lease`, compare-and-swap on owner and generation), without
waiting for it to expire. An owner on another host is never judged: its lease lapses.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from catalog import Catalog, CatalogError, Lease, LeaseHeldError
from etl.errors import InternalError, LeaseLostError, PipelineBusyError

if TYPE_CHECKING:
    from etl.pipeline import Pipeline

log = logging.getLogger(__name__)


OwnerState = Literal["alive", "dead", "unknown"]
"""Whether a lease owner's process lives: ``unknown`` for another host or an odd owner."""


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if there is no such
    process (or no /proc to ask)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields follow the last ')'.
    fields = text.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return None  # a zombie, or dead: it will never renew a lease again
    try:
        return int(fields[19])  # field 22 of the whole line: starttime
    except (IndexError, ValueError):
        return None


def operator() -> str:
    """Who takes an operator's action (a resolution, a recompute), as the catalog records
    it: ``user@host``; the user is ``unknown`` where the system has no name for this
    process's uid (some containers)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def make_owner() -> str:
    """This process's owner string: ``host:pid:start:id``."""
    pid = os.getpid()
    start = process_start(pid)
    return (
        f"{socket.gethostname()}:{pid}:{start if start is not None else '-'}:{uuid.uuid4().hex[:8]}"
    )


@dataclass(frozen=True)
class OwnerInfo:
    host: str
    pid: int
    start: int | None
    """The process's start time when the owner recorded it (older owners did not)."""


def parse_owner(owner: str) -> OwnerInfo | None:
    parts = owner.split(":")
    if len(parts) not in (3, 4):
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    start = None
    if len(parts) == 4 and parts[2].isdigit():
        start = int(parts[2])
    return OwnerInfo(host=parts[0], pid=pid, start=start)


def owner_state(owner: str) -> OwnerState:
    """``dead`` only when proven: same host, and the pid is gone or belongs to a process
    that started at another time than the owner's."""
    info = parse_owner(owner)
    if info is None or info.host != socket.gethostname():
        return "unknown"
    if info.pid == os.getpid():
        return "alive"
    start = process_start(info.pid)
    if start is None:
        return "dead" if os.path.isdir("/proc/self") else "unknown"
    if info.start is not None and start != info.start:
        return "dead"  # the pid was reused
    return "alive"


def busy_error(pipeline: str, held: LeaseHeldError | Lease) -> PipelineBusyError:
    """The error that says another live runner holds a job of ``pipeline``: who, since
    when, until when, and whether its process is alive."""
    return PipelineBusyError(
        pipeline=pipeline,
        job=held.job,
        owner=held.owner,
        acquired_at=held.acquired_at,
        expires_at=held.expires_at,
        owner_state=owner_state(held.owner),
    )


def check_not_held(
    catalog: Catalog, pipeline: Pipeline, *, left_to_others: Callable[[], set[str]] | None = None
) -> None:
    """PipelineBusyError if another live run holds an unexpired lease of one of the jobs
    (a lease whose owner process is gone from this host does not count: it is taken over).
    The jobs ``left_to_others()`` names do not count either (for a run: those a live
    ``etl recompute`` builds a revision of; asked only once a lease is held). Nothing is
    written: a command calls it to refuse a busy pipeline before it starts Spark."""
    now = datetime.now(UTC)
    left: set[str] | None = None
    for job in pipeline.ordered_jobs():
        lease = catalog.get_lease(job.name)
        if lease is None or lease.expires_at <= now:
            continue
        if owner_state(lease.owner) == "dead":
            continue
        if left_to_others is not None:
            if left is None:
                left = left_to_others()
            if job.name in left:
                continue
        raise busy_error(pipeline.name, lease)


def retry_while_busy(
    attempt: Callable[[], None],
    *,
    deadline: float,
    on_wait: Callable[[PipelineBusyError, float], None],
    every: float = 5.0,
) -> None:
    """Call ``attempt`` until it no longer raises PipelineBusyError (another run stopped
    holding the pipeline), or re-raise that once ``deadline`` (``time.monotonic()``) has
    passed. Every ``every`` seconds of waiting, ``on_wait`` gets the error and the seconds
    left."""
    said: float | None = None
    while True:
        try:
            attempt()
            return
        except PipelineBusyError as exc:
            now = time.monotonic()
            if now >= deadline:
                raise
            if said is None or now - said >= every:
                said = now
                on_wait(exc, deadline - now)
            time.sleep(1.0)


@contextmanager
def holding(catalog: Catalog, job: str) -> Iterator[Lease]:
    """The lease of ``job`` for one operation of this process (``etl resolve``), renewed
    while it lasts and released after; PipelineBusyError if another live run holds it."""
    from etl.scheduling import DEFAULT_LEASE_TTL_SECONDS

    keeper = LeaseKeeper(catalog, owner=make_owner(), ttl_seconds=DEFAULT_LEASE_TTL_SECONDS)
    try:
        keeper.acquire([job])
    except LeaseHeldError as exc:
        raise busy_error(catalog.get_job(job).pipeline, exc) from exc
    try:
        yield keeper.lease(job)
    finally:
        keeper.release()


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
        self.taken_over: list[Lease] = []
        """The leases of dead owners this keeper took over (as they were before)."""

    @property
    def held(self) -> bool:
        return bool(self._leases)

    def acquire(self, jobs: Iterable[str]) -> None:
        """Take every job's lease (all or none: LeaseHeldError releases those taken)."""
        wanted = list(jobs)
        try:
            try:
                for lease in self.catalog.acquire_leases(
                    wanted, self.owner, ttl_seconds=self.ttl_seconds
                ):
                    self._hold(lease)
            except LeaseHeldError as exc:
                if owner_state(exc.owner) != "dead":
                    raise
                # A dead run of this host holds one: nothing was taken; take them one by
                # one, taking that one over.
                for job in wanted:
                    self._hold(self._acquire(job))
        except BaseException:
            self.release()
            raise
        self._start()

    def _hold(self, lease: Lease) -> None:
        with self._lock:
            self._leases[lease.job] = lease
            self._lost.pop(lease.job, None)

    def _acquire(self, job: str) -> Lease:
        """Take the lease; a live-looking lease of a dead owner on this host is taken over."""
        try:
            return self.catalog.acquire_lease(job, self.owner, ttl_seconds=self.ttl_seconds)
        except LeaseHeldError as exc:
            if owner_state(exc.owner) != "dead":
                raise
            held = self.catalog.get_lease(job)
            if held is None or held.owner != exc.owner:
                return self.catalog.acquire_lease(job, self.owner, ttl_seconds=self.ttl_seconds)
            lease = self.catalog.take_over_lease(
                job,
                self.owner,
                expected_owner=held.owner,
                expected_generation=held.generation,
                ttl_seconds=self.ttl_seconds,
            )
            log.info("took over the lease of job %s from dead run %s", job, held.owner)
            self.taken_over.append(held)
            return lease

    def take(self, job: str) -> None:
        """Take one more job's lease; LeaseHeldError leaves the leases held as they are."""
        self._hold(self._acquire(job))
        self._start()

    def give_up(self, job: str) -> None:
        """Release one job's lease (a recompute asks for it); the others stay held."""
        with self._lock:
            lease = self._leases.pop(job, None)
            self._lost.pop(job, None)
        if lease is not None:
            self.catalog.release_lease(lease)

    def holds(self, job: str) -> bool:
        with self._lock:
            return job in self._leases

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
        try:
            self.catalog.release_leases(leases)
        except CatalogError as exc:  # the leases lapse by themselves
            jobs = ", ".join(lease.job for lease in leases)
            log.warning("could not release the leases of jobs %s: %s", jobs, exc)

    def renew_all(self) -> None:
        """Renew every lease held now (the background thread calls this)."""
        with self._lock:
            leases = [lease for job, lease in self._leases.items() if job not in self._lost]
        try:
            result = self.catalog.renew_leases(leases, ttl_seconds=self.ttl_seconds)
        except CatalogError as exc:
            # The catalog may be back before the leases lapse; if not, the jobs are fenced.
            jobs = ", ".join(lease.job for lease in leases)
            log.warning("could not renew the leases of jobs %s: %s", jobs, exc)
            return
        with self._lock:
            for job, stale in result.lost.items():
                log.error("lost the lease of job %s: %s", job, stale)
                self._lost[job] = str(stale)
            for lease in leases:
                renewed = result.renewed.get(lease.job)
                if renewed is not None and self._leases.get(lease.job) == lease:
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
            try:
                self.renew_all()
            except Exception as exc:  # a bug: say so, keep renewing; fencing guards a lapse
                log.error("renewing the leases of %s failed: %s", self.owner, exc)
                log.debug("renewing the leases failed", exc_info=exc)


__all__ = [
    "LeaseKeeper",
    "OwnerInfo",
    "OwnerState",
    "busy_error",
    "check_not_held",
    "holding",
    "make_owner",
    "owner_state",
    "parse_owner",
    "process_start",
    "retry_while_busy",
]
