"""Job leases: one live instance per job, fenced by the lease's generation.

In SQL, on SQLite and PostgreSQL alike (see catalog.dialect).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from catalog.errors import LeaseError, LeaseHeldError, RetiredError, StaleLeaseError
from catalog.leases.base import LeaseStore
from catalog.models import Lease
from catalog.schema import leases_table
from catalog.store import SqlStore


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
        ttl = self._ttl(job, ttl_seconds)
        with self._write() as conn:
            self._leasable_job(conn, job)
            now = self._now(conn)
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
        ttl = self._ttl(lease.job, ttl_seconds)
        with self._write() as conn:
            row = self._lease_row(conn, lease.job)
            if row is None or row.generation != lease.generation or row.owner != lease.owner:
                raise StaleLeaseError(
                    job=lease.job,
                    generation=lease.generation,
                    current_generation=None if row is None else row.generation,
                )
            renewed = Lease(
                job=lease.job,
                owner=lease.owner,
                generation=lease.generation,
                expires_at=self._now(conn) + ttl,
                acquired_at=row.acquired_at,
            )
            conn.execute(
                leases_table.update()
                .where(leases_table.c.job == lease.job)
                .values(expires_at=renewed.expires_at)
            )
            return renewed

    def release_lease(self, lease: Lease) -> None:
        # The row stays, so the generation never restarts: a later owner gets a higher one.
        with self._write() as conn:
            conn.execute(
                leases_table.update()
                .where(
                    leases_table.c.job == lease.job,
                    leases_table.c.generation == lease.generation,
                    leases_table.c.owner == lease.owner,
                )
                .values(expires_at=self._now(conn))
            )

    def get_lease(self, job: str) -> Lease | None:
        with self._read() as conn:
            row = self._lease_row(conn, job)
        return None if row is None else self._lease(row)
