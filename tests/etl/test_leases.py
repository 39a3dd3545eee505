"""Who an operator's action is recorded as (``etl.leases.operator``), and what the lease
keeper does with leases taken over; without Spark."""

from __future__ import annotations

import getpass
import socket

import pytest

from catalog import JobSpec, TableSpec, load_catalog
from etl.errors import LeaseLostError
from etl.leases import LeaseKeeper, operator
from etl.recompute import RecomputeRequest


def test_an_action_is_recorded_as_user_at_host():
    assert operator() == f"{getpass.getuser()}@{socket.gethostname()}"


@pytest.mark.parametrize("error", [KeyError("getpwuid(): uid not found: 1001"), OSError("no user")])
def test_a_process_whose_uid_has_no_name_is_recorded_as_unknown(monkeypatch, error):
    """Containers often run under a uid with no passwd entry: getpass.getuser() raises
    there, and neither a resolution nor a recompute may fail for it."""

    def no_name() -> str:
        raise error

    monkeypatch.setattr(getpass, "getuser", no_name)
    assert operator() == f"unknown@{socket.gethostname()}"
    assert RecomputeRequest(tables=("t",)).actor == f"unknown@{socket.gethostname()}"


def test_the_keeper_renews_its_leases_at_once_and_marks_a_taken_over_one_lost():
    catalog = load_catalog("memory://")
    for job in ("a", "b", "c"):
        catalog.register_table(TableSpec(f"t_{job}", f"/w/t_{job}", kind="root"))
        catalog.register_job(JobSpec(job, f"t_{job}", source=f"s_{job}"))
    keeper = LeaseKeeper(catalog, owner="me", ttl_seconds=600)
    keeper.acquire(["a", "b", "c"])
    try:
        before = {job: keeper.lease(job) for job in ("a", "b", "c")}
        catalog.take_over_lease(
            "b", "other", expected_owner="me", expected_generation=1, ttl_seconds=600
        )
        keeper.renew_all()
        with pytest.raises(LeaseLostError):
            keeper.check("b")
        for job in ("a", "c"):
            renewed = keeper.lease(job)
            assert renewed.expires_at > before[job].expires_at
            assert catalog.get_lease(job) == renewed
    finally:
        keeper.release()
    assert catalog.get_lease("b").owner == "other"  # releasing leaves a taken-over lease alone
    assert catalog.acquire_lease("a", "next", ttl_seconds=60).generation == 2
    catalog.close()
