"""Job leases: one live instance per job, fenced by the lease's generation.

In SQL, on SQLite and PostgreSQL alike (see catalog.dialect).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from catalog.errors import LeaseError, LeaseHeldError, RetiredError, StaleLeaseError
from catalog.leases.base import LeaseStore
from catalog.models import Lease, RenewedLeases
from catalog.schema import leases_table
from catalog.store import SqlStore

# A runner renews the leases of all its jobs every few seconds: two statements, built once.
_LEASES_OF = sa.select(leases_table).where(
    leases_table.c.job.in_(sa.bindparam("jobs", expanding=True))
)
_EXTEND_LEASE = (
    leases_table.update()
    .where(leases_table.c.job == sa.bindparam("key_job"))
    .values(expires_at=sa.bindparam("expires_at"))
)


class SqlLeaseStore(SqlStore, LeaseStore):
    """Job leases: one live instance per job, fenced by the lease's generation."""

    @staticmethod
    def _ttl(job: str, ttl_seconds: float) -> timedelta:
        if not ttl_seconds > 0:
            raise LeaseError(
                f"lease of job {job!r}: ttl_seconds must be positive, not {ttl_seconds}"
            )
        return timedelta(seconds=ttl_seconds)

    def _leasable_job(self, conn: sa.Connection, job: str) -> None:
        row = self._job_row(conn, job)
        if row.retired_at is not None:
            raise RetiredError(kind="job", name=job, retired_at=row.retired_at)

    @staticmethod
    def _lease_row(conn: sa.Connection, job: str) -> Any:
        return conn.execute(sa.select(leases_table).where(leases_table.c.job == job)).first()

    def acquire_lease(self, job: str, owner: str, *, ttl_seconds: float) -> Lease:
        (lease,) = self.acquire_leases([job], owner, ttl_seconds=ttl_seconds)
        return lease

    def acquire_leases(self, jobs: Iterable[str], owner: str, *, ttl_seconds: float) -> list[Lease]:
        names = list(dict.fromkeys(jobs))
        ttls = {job: self._ttl(job, ttl_seconds) for job in names}
        if not names:
            return []
        with self._write() as conn:
            now = self._now(conn)
            return [self._acquire(conn, now, job, owner, ttls[job]) for job in names]

    def _acquire(
        self, conn: sa.Connection, now: datetime, job: str, owner: str, ttl: timedelta
    ) -> Lease:
        self._leasable_job(conn, job)
        row = self._lease_row(conn, job)
        if row is None:
            generation, acquired_at = 1, now
        elif row.owner == owner:
            generation, acquired_at = row.generation, row.acquired_at
        elif row.expires_at <= now:
            # Taking over bumps the generation: the old owner can no longer seal anything.
            generation, acquired_at = row.generation + 1, now
        else:
            raise LeaseHeldError(
                job=job, owner=row.owner, acquired_at=row.acquired_at, expires_at=row.expires_at
            )
        return self._put_lease(
            conn,
            Lease(job, owner, generation, expires_at=now + ttl, acquired_at=acquired_at),
            exists=row is not None,
        )

    @staticmethod
    def _put_lease(conn: sa.Connection, lease: Lease, *, exists: bool) -> Lease:
        values = dict(
            owner=lease.owner,
            generation=lease.generation,
            expires_at=lease.expires_at,
            acquired_at=lease.acquired_at,
        )
        if exists:
            conn.execute(
                leases_table.update().where(leases_table.c.job == lease.job).values(**values)
            )
        else:
            conn.execute(leases_table.insert().values(job=lease.job, **values))
        return lease

    def take_over_lease(
        self,
        job: str,
        owner: str,
        *,
        expected_owner: str,
        expected_generation: int,
        ttl_seconds: float,
    ) -> Lease:
        ttl = self._ttl(job, ttl_seconds)
        with self._write() as conn:
            self._leasable_job(conn, job)
            now = self._now(conn)
            row = self._lease_row(conn, job)
            if row is None or (row.owner, row.generation) != (expected_owner, expected_generation):
                if row is not None and row.expires_at > now:
                    raise LeaseHeldError(
                        job=job,
                        owner=row.owner,
                        acquired_at=row.acquired_at,
                        expires_at=row.expires_at,
                    )
                raise StaleLeaseError(
                    job=job,
                    generation=expected_generation,
                    current_generation=None if row is None else row.generation,
                )
            return self._put_lease(
                conn,
                Lease(job, owner, row.generation + 1, expires_at=now + ttl, acquired_at=now),
                exists=True,
            )

    def renew_lease(self, lease: Lease, *, ttl_seconds: float) -> Lease:
        result = self.renew_leases([lease], ttl_seconds=ttl_seconds)
        if lease.job in result.lost:
            raise result.lost[lease.job]
        return result.renewed[lease.job]

    def renew_leases(self, leases: Iterable[Lease], *, ttl_seconds: float) -> RenewedLeases:
        held = list(leases)
        ttls = {lease.job: self._ttl(lease.job, ttl_seconds) for lease in held}
        if not held:
            return RenewedLeases()
        renewed: dict[str, Lease] = {}
        lost: dict[str, StaleLeaseError] = {}
        with self._write() as conn:
            now = self._now(conn)
            rows = {
                row.job: row
                for row in conn.execute(_LEASES_OF, {"jobs": [lease.job for lease in held]})
            }
            for lease in held:
                row = rows.get(lease.job)
                if row is None or row.generation != lease.generation or row.owner != lease.owner:
                    lost[lease.job] = StaleLeaseError(
                        job=lease.job,
                        generation=lease.generation,
                        current_generation=None if row is None else row.generation,
                    )
                    continue
                renewed[lease.job] = Lease(
                    job=lease.job,
                    owner=lease.owner,
                    generation=lease.generation,
                    expires_at=now + ttls[lease.job],
                    acquired_at=row.acquired_at,
                )
            if renewed:
                conn.execute(
                    _EXTEND_LEASE,
                    [{"key_job": job, "expires_at": r.expires_at} for job, r in renewed.items()],
                )
        return RenewedLeases(renewed=renewed, lost=lost)

    def release_lease(self, lease: Lease) -> None:
        self.release_leases([lease])

    def release_leases(self, leases: Iterable[Lease]) -> None:
        # The rows stay, so the generation never restarts: a later owner gets a higher one.
        given_up = list(leases)
        if not given_up:
            return
        with self._write() as conn:
            now = self._now(conn)
            for lease in given_up:
                conn.execute(
                    leases_table.update()
                    .where(
                        leases_table.c.job == lease.job,
                        leases_table.c.generation == lease.generation,
                        leases_table.c.owner == lease.owner,
                    )
                    .values(expires_at=now)
                )

    def get_lease(self, job: str) -> Lease | None:
        with self._read() as conn:
            row = self._lease_row(conn, job)
        return None if row is None else self._lease(row)
