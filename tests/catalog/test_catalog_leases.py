"""Job leases: one live owner per job, and a generation that fences superseded owners."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from catalog import (
    JobSpec,
    LeaseError,
    LeaseHeldError,
    RetiredError,
    StaleLeaseError,
    TableSpec,
    UnknownJobError,
)

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


def test_a_lease_records_when_its_generation_was_acquired(job_catalog):
    first = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    assert first.acquired_at is not None and first.acquired_at <= first.expires_at
    again = job_catalog.acquire_lease("j", "a", ttl_seconds=60)
    assert again.acquired_at == first.acquired_at
    renewed = job_catalog.renew_lease(again, ttl_seconds=90)
    assert renewed.acquired_at == first.acquired_at
    job_catalog.release_lease(renewed)
    taken = job_catalog.acquire_lease("j", "b", ttl_seconds=30)
    assert taken.acquired_at > first.acquired_at
    assert job_catalog.get_lease("j") == taken


def test_a_held_lease_error_says_who_since_when_and_until_when(job_catalog):
    held = job_catalog.acquire_lease("j", "runner-a", ttl_seconds=30)
    with pytest.raises(LeaseHeldError) as raised:
        job_catalog.acquire_lease("j", "runner-b", ttl_seconds=30)
    error = raised.value
    assert (error.job, error.owner) == ("j", "runner-a")
    assert (error.acquired_at, error.expires_at) == (held.acquired_at, held.expires_at)
    message = str(error)
    assert "runner-a" in message
    assert str(held.acquired_at) in message and str(held.expires_at) in message


def test_a_live_lease_can_be_taken_over_by_compare_and_swap(job_catalog):
    held = job_catalog.acquire_lease("j", "dead-runner", ttl_seconds=300)
    taken = job_catalog.take_over_lease(
        "j", "new-runner", expected_owner="dead-runner", expected_generation=1, ttl_seconds=30
    )
    assert (taken.owner, taken.generation) == ("new-runner", 2)
    assert taken.acquired_at >= held.acquired_at
    assert job_catalog.get_lease("j") == taken
    # The old owner is fenced: it can neither renew nor record anything.
    with pytest.raises(StaleLeaseError):
        job_catalog.renew_lease(held, ttl_seconds=30)
    epoch = job_catalog.open_epoch().id
    with pytest.raises(StaleLeaseError):
        job_catalog.record_processed("t", epoch, delta_version=0, job="j", attempt=1, generation=1)
    job_catalog.record_processed("t", epoch, delta_version=0, job="j", attempt=1, generation=2)


def test_a_takeover_with_a_stale_expectation_is_refused(job_catalog):
    job_catalog.acquire_lease("j", "a", ttl_seconds=300)
    job_catalog.take_over_lease("j", "b", expected_owner="a", expected_generation=1, ttl_seconds=30)
    # A second runner that also saw ("a", 1) loses the race: b's lease is live.
    with pytest.raises(LeaseHeldError) as raised:
        job_catalog.take_over_lease(
            "j", "c", expected_owner="a", expected_generation=1, ttl_seconds=30
        )
    assert raised.value.owner == "b"
    with pytest.raises(LeaseHeldError):
        job_catalog.take_over_lease(
            "j", "c", expected_owner="b", expected_generation=1, ttl_seconds=30
        )
    assert job_catalog.get_lease("j").owner == "b"


def test_a_takeover_of_a_lease_that_changed_and_lapsed_is_stale(job_catalog):
    with pytest.raises(StaleLeaseError) as raised:
        job_catalog.take_over_lease(
            "j", "b", expected_owner="a", expected_generation=1, ttl_seconds=30
        )
    assert raised.value.current_generation is None
    lease = job_catalog.acquire_lease("j", "a", ttl_seconds=SHORT_TTL)
    job_catalog.release_lease(lease)
    job_catalog.acquire_lease("j", "b", ttl_seconds=SHORT_TTL)
    time.sleep(SHORT_TTL + 0.1)
    with pytest.raises(StaleLeaseError) as raised:
        job_catalog.take_over_lease(
            "j", "c", expected_owner="a", expected_generation=1, ttl_seconds=30
        )
    assert (raised.value.generation, raised.value.current_generation) == (1, 2)
    with pytest.raises(LeaseError, match="positive"):
        job_catalog.take_over_lease(
            "j", "c", expected_owner="b", expected_generation=2, ttl_seconds=0
        )


def test_a_retired_jobs_lease_cannot_be_acquired(job_catalog):
    lease = job_catalog.acquire_lease("j", "a", ttl_seconds=30)
    job_catalog.retire_job("j")
    for take in (
        lambda: job_catalog.acquire_lease("j", "a", ttl_seconds=30),
        lambda: job_catalog.take_over_lease(
            "j", "b", expected_owner="a", expected_generation=lease.generation, ttl_seconds=30
        ),
    ):
        with pytest.raises(RetiredError) as raised:
            take()
        assert (raised.value.kind, raised.value.name) == ("job", "j")
        assert "retired" in str(raised.value)
    job_catalog.register_job(JobSpec("j", "t", source="s"))
    assert job_catalog.acquire_lease("j", "a", ttl_seconds=30).generation == lease.generation


@pytest.mark.postgres
def test_a_process_frozen_inside_a_catalog_transaction_does_not_block_postgresql(
    postgres_url, monkeypatch
):
    import threading

    import catalog.dialect
    import catalog.sql

    monkeypatch.setattr(catalog.dialect, "_PG_IDLE_IN_TRANSACTION_SECONDS", 1)
    frozen = catalog.sql.SqlCatalog(postgres_url)
    other = catalog.sql.SqlCatalog(postgres_url)
    holding = threading.Event()
    other_went_on = threading.Event()
    outcome: dict[str, object] = {}

    def freeze() -> None:
        try:
            with frozen._write():  # holds the catalog's write lock, then stops responding
                holding.set()
                # Frozen until the other process got through (or a minute, if it never does).
                outcome["woken_by_other"] = other_went_on.wait(60)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=freeze)
    thread.start()
    assert holding.wait(10)
    other.open_epoch()  # waits for the write lock: granted once the server ends the frozen one
    other_went_on.set()
    thread.join()
    # The other process got the lock while the frozen one still slept inside its transaction,
    # which it then finds gone when it wakes.
    assert outcome["woken_by_other"] is True
    assert "error" in outcome
    frozen.close()
    other.close()


@pytest.mark.postgres
def test_sessions_the_server_ended_are_replaced_on_the_next_call(postgres_url, postgres_server):
    """A restart, a failover or an idle timeout ends the catalog's pooled sessions: the next
    read and write work on new ones instead of failing once per pooled session."""
    import sqlalchemy as sa

    import catalog.sql

    name = "db-ended-sessions-test"
    ended = catalog.sql.SqlCatalog(f"{postgres_url}&application_name={name}")
    first = ended.open_epoch()
    assert ended.latest_epoch() == first  # both the write and the read pool hold a session
    admin = sa.create_engine(postgres_server)
    with admin.connect() as conn:
        terminated = conn.execute(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :name"
            ),
            {"name": name},
        ).scalar_one()
    admin.dispose()
    assert terminated >= 2
    assert ended.latest_epoch() == first
    assert ended.open_epoch().id == first.id + 1
    ended.close()


@pytest.fixture
def jobs_catalog(job_catalog):
    for name in ("k", "m"):
        job_catalog.register_table(TableSpec(f"t_{name}", f"/w/t_{name}", kind="root"))
        job_catalog.register_job(JobSpec(name, f"t_{name}", source=f"s_{name}"))
    return job_catalog


def transactions(call) -> int:
    """Write transactions ``call`` opens (each one takes the catalog's write lock)."""
    import sqlalchemy as sa

    seen = []

    def count(conn, *_args):
        if conn.get_execution_options().get("catalog_write"):
            seen.append(conn)

    sa.event.listen(sa.engine.Engine, "begin", count)
    try:
        call()
    finally:
        sa.event.remove(sa.engine.Engine, "begin", count)
    return len(seen)


def test_leases_are_acquired_all_or_none_in_one_transaction(jobs_catalog):
    catalog = jobs_catalog
    held = catalog.acquire_lease("m", "b", ttl_seconds=30)
    with pytest.raises(LeaseHeldError) as raised:
        catalog.acquire_leases(["j", "k", "m"], "a", ttl_seconds=30)
    assert (raised.value.job, raised.value.owner) == ("m", "b")
    assert catalog.get_lease("j") is None and catalog.get_lease("k") is None
    catalog.release_lease(held)
    taken: list = []
    assert (
        transactions(
            lambda: taken.extend(catalog.acquire_leases(["j", "k", "m"], "a", ttl_seconds=30))
        )
        == 1
    )
    assert [(t.job, t.owner, t.generation) for t in taken] == [
        ("j", "a", 1),
        ("k", "a", 1),
        ("m", "a", 2),
    ]
    assert [catalog.get_lease(t.job) for t in taken] == taken
    assert catalog.acquire_leases([], "a", ttl_seconds=30) == []


def test_leases_are_renewed_in_one_transaction_and_the_lost_ones_named(jobs_catalog):
    catalog = jobs_catalog
    leases = catalog.acquire_leases(["j", "k", "m"], "a", ttl_seconds=SHORT_TTL)
    time.sleep(SHORT_TTL + 0.1)
    taken = catalog.acquire_lease("k", "b", ttl_seconds=30)  # k lapsed and changed hands
    result: list = []
    assert transactions(lambda: result.append(catalog.renew_leases(leases, ttl_seconds=30))) == 1
    (renewed,) = result
    assert set(renewed.renewed) == {"j", "m"} and set(renewed.lost) == {"k"}
    lost = renewed.lost["k"]
    assert isinstance(lost, StaleLeaseError)
    assert (lost.generation, lost.current_generation) == (1, 2)
    for job in ("j", "m"):
        assert renewed.renewed[job].expires_at > leases[0].expires_at
        assert catalog.get_lease(job) == renewed.renewed[job]
    assert catalog.get_lease("k") == taken  # untouched


def test_renewing_many_leases_sends_as_many_statements_as_one(jobs_catalog):
    import sqlalchemy as sa

    catalog = jobs_catalog
    leases = catalog.acquire_leases(["j", "k", "m"], "a", ttl_seconds=30)
    sent: list[str] = []

    def count(_conn, _cursor, statement, *_args):
        sent.append(statement)

    def statements(held) -> int:
        sent.clear()
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
        try:
            renewed = catalog.renew_leases(held, ttl_seconds=30)
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
        assert set(renewed.renewed) == {lease.job for lease in held} and not renewed.lost
        return len(sent)

    assert statements(leases) == statements(leases[:1])


def test_leases_are_released_in_one_transaction(jobs_catalog):
    catalog = jobs_catalog
    leases = catalog.acquire_leases(["j", "k", "m"], "a", ttl_seconds=30)
    taken = catalog.take_over_lease(
        "m", "b", expected_owner="a", expected_generation=1, ttl_seconds=30
    )
    assert transactions(lambda: catalog.release_leases(leases)) == 1
    assert catalog.get_lease("m") == taken  # superseded: not released
    for job in ("j", "k"):
        assert catalog.acquire_lease(job, "c", ttl_seconds=30).generation == 2
