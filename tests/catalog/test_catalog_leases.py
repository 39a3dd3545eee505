"""Job leases: one live owner per job, and a generation that fences superseded owners."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from catalog import JobSpec, LeaseError, LeaseHeldError, StaleLeaseError, TableSpec, UnknownJobError

SHORT_TTL = 0.15


@pytest.fixture
def job_catalog(catalog):
    catalog.register_table(TableSpec("t", "/w/t", kind="root"))
    catalog.register_job(JobSpec("j", "t", source="s"))
    return catalog


def test_a_free_lease_is_granted_with_generation_one(job_catalog):
    before = datetime.now(UTC)
    lease = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    assert (lease.job, lease.owner, lease.generation) == ("j", "a", 1)
    assert before + timedelta(seconds=25) < lease.expires_at < before + timedelta(seconds=35)
    assert job_catalog.get_lease("j") == lease
    assert job_catalog.get_lease("other") is None


def test_our_own_lease_is_granted_again_with_the_same_generation(job_catalog):
    first = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    again = job_catalog.acquire_lease("j", "a", ttl_seconds=60)
    assert again.generation == first.generation and again.expires_at > first.expires_at


def test_a_live_lease_of_another_owner_is_refused(job_catalog):
    held = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    with pytest.raises(LeaseHeldError) as raised:
        job_catalog.acquire_lease("j", "b", ttl_seconds=30)
    assert (raised.value.job, raised.value.owner) == ("j", "a")
    assert raised.value.expires_at == held.expires_at
    assert job_catalog.get_lease("j") == held


def test_taking_over_an_expired_lease_bumps_the_generation(job_catalog):
    old = job_catalog.acquire_lease("j", "a", ttl_seconds=SHORT_TTL)
    time.sleep(SHORT_TTL + 0.1)
    new = job_catalog.acquire_lease("j", "b", ttl_seconds=30)
    assert new.generation == old.generation + 1
    with pytest.raises(StaleLeaseError) as raised:
        job_catalog.renew_lease(old, ttl_seconds=30)
    assert (raised.value.generation, raised.value.current_generation) == (1, 2)
    with pytest.raises(LeaseHeldError):
        job_catalog.acquire_lease("j", "a", ttl_seconds=30)


def test_our_own_expired_lease_keeps_its_generation(job_catalog):
    old = job_catalog.acquire_lease("j", "a", ttl_seconds=SHORT_TTL)
    time.sleep(SHORT_TTL + 0.1)
    assert job_catalog.acquire_lease("j", "a", ttl_seconds=30).generation == old.generation
    renewed = job_catalog.renew_lease(old, ttl_seconds=30)
    assert renewed.generation == old.generation


def test_renewing_extends_the_lease(job_catalog):
    lease = job_catalog.acquire_lease("j", "a", ttl_seconds=SHORT_TTL)
    renewed = job_catalog.renew_lease(lease, ttl_seconds=30)
    assert renewed.expires_at > lease.expires_at
    time.sleep(SHORT_TTL + 0.1)
    with pytest.raises(LeaseHeldError):
        job_catalog.acquire_lease("j", "b", ttl_seconds=30)


def test_a_released_lease_goes_to_the_next_owner_with_a_new_generation(job_catalog):
    lease = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    job_catalog.release_lease(lease)
    taken = job_catalog.acquire_lease("j", "b", ttl_seconds=30)
    assert taken.generation == 2
    job_catalog.release_lease(lease)  # superseded: releasing is a no-op
    assert job_catalog.get_lease("j") == taken
    with pytest.raises(LeaseHeldError):
        job_catalog.acquire_lease("j", "c", ttl_seconds=30)


def test_lease_of_an_unknown_job_is_refused(job_catalog):
    with pytest.raises(UnknownJobError):
        job_catalog.acquire_lease("nope", "a", ttl_seconds=30)


@pytest.mark.parametrize("ttl", [0, -1.0])
def test_a_lease_needs_a_positive_ttl(job_catalog, ttl):
    with pytest.raises(LeaseError, match="positive"):
        job_catalog.acquire_lease("j", "a", ttl_seconds=ttl)
    assert job_catalog.get_lease("j") is None
