"""Job leases: one live instance per job, fenced by the lease's generation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from catalog.models import Lease, RenewedLeases


class LeaseStore(ABC):
    """Job leases: one live instance per job, fenced by the lease's generation."""

    @abstractmethod
    def acquire_lease(self, job: str, owner: str, *, ttl_seconds: float) -> Lease:
        """Take the job's lease. Free, expired or already ours: granted.

        Taking over a lease that another owner let expire bumps the generation, which
        fences the old owner. A live lease of another owner raises LeaseHeldError (who
        holds it, since when, until when). Re-acquiring our own live lease keeps the
        generation. A retired job's lease raises RetiredError.
        """

    @abstractmethod
    def acquire_leases(self, jobs: Iterable[str], owner: str, *, ttl_seconds: float) -> list[Lease]:
        """Take the leases of ``jobs`` in one transaction, all or none: each as
        :meth:`acquire_lease` takes it; the first live lease of another owner raises
        LeaseHeldError and none is taken."""

    @abstractmethod
    def take_over_lease(
        self,
        job: str,
        owner: str,
        *,
        expected_owner: str,
        expected_generation: int,
        ttl_seconds: float,
    ) -> Lease:
        """Take the lease even if it has not expired, bumping the generation, but only if
        it is still held by (``expected_owner``, ``expected_generation``): compare and swap.

        For a runner that has proved the holder's process dead (same host). Otherwise
        raises LeaseHeldError when another holder's lease is live, StaleLeaseError when
        the lease changed hands and is not live. A retired job raises RetiredError.
        """

    @abstractmethod
    def renew_lease(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        """Extend a lease we hold; StaleLeaseError if it was taken over."""

    @abstractmethod
    def renew_leases(self, leases: Iterable[Lease], *, ttl_seconds: float) -> RenewedLeases:
        """Extend the leases we hold in one transaction; those taken over meanwhile are
        reported lost (each with its StaleLeaseError) and the others renewed."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give a lease up (no-op if it was taken over meanwhile)."""

    @abstractmethod
    def release_leases(self, leases: Iterable[Lease]) -> None:
        """Give leases up in one transaction (each as :meth:`release_lease`)."""

    @abstractmethod
    def get_lease(self, job: str) -> Lease | None: ...
