"""Several real processes writing one catalog at once (SQLite file and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable

import pytest
from catalog_race_workers import (
    RACE_RULE,
    expire_all,
    open_epochs,
    pin_epochs,
    register_job,
    register_pipeline,
    successor,
    zombie,
)

from catalog import EpochState, JobSpec, TableSpec, load_catalog

pytestmark = pytest.mark.slow

PROCESSES = 4
# Real, separate processes forked from a clean server process that has already
# imported the catalog: each starts in milliseconds instead of a second.
SPAWN = multiprocessing.get_context("forkserver")
SPAWN.set_forkserver_preload(["catalog", "catalog_race_workers", "psycopg"])


def run_processes(*calls: tuple[Callable, tuple]) -> list:
    """Run each (target, args) in its own process; return what they report."""
    results = SPAWN.Queue()
    processes = [SPAWN.Process(target=target, args=(results, *args)) for target, args in calls]
    for process in processes:
        process.start()
    reported: list = []
    deadline = time.monotonic() + 60
    while len(reported) < len(processes):
        try:
            reported.append(results.get(timeout=0.2))
        except queue.Empty:
            crashed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if crashed or time.monotonic() > deadline:
                for process in processes:
                    process.kill()
                pytest.fail(f"worker processes failed (exit codes {crashed}) or timed out")
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    return reported


def test_concurrent_epochs_are_distinct_and_ordered(shared_catalog_url):
    load_catalog(shared_catalog_url).close()
    count = 15
    start = SPAWN.Barrier(PROCESSES)
    issued = run_processes(*[(open_epochs, (shared_catalog_url, start, count))] * PROCESSES)
    for epochs in issued:
        assert [i for i, _ in epochs] == sorted({i for i, _ in epochs})
    every = sorted(e for epochs in issued for e in epochs)
    assert [i for i, _ in every] == list(range(1, PROCESSES * count + 1))
    timestamps = [ts for _, ts in every]
    assert timestamps == sorted(timestamps)
    catalog = load_catalog(shared_catalog_url)
    assert [(e.id, e.barrier_ts) for e in catalog.epochs()] == every
    catalog.close()


def test_racing_writers_of_one_table_leave_exactly_one(shared_catalog_url):
    catalog = load_catalog(shared_catalog_url)
    catalog.register_table(TableSpec("src", "/w/src", kind="root"))
    catalog.register_table(TableSpec("contested", "/w/contested"))
    start = SPAWN.Barrier(PROCESSES)
    reported = run_processes(
        *[
            (register_job, (shared_catalog_url, start, f"writer_{i}", "contested", ["src"]))
            for i in range(PROCESSES)
        ]
    )
    winners = [job for job, outcome, _ in reported if outcome == "registered"]
    assert len(winners) == 1
    for job, outcome, fields in reported:
        if job != winners[0]:
            assert outcome == "DuplicateWriterError"
            assert fields["table"] == "contested" and fields["existing_job"] == winners[0]
            assert fields["new_job"] == job
    assert catalog.get_table("contested").writer_job == winners[0]
    assert [j.name for j in catalog.list_jobs()] == winners
    catalog.close()


def test_racing_jobs_cannot_close_a_cycle_together(shared_catalog_url):
    catalog = load_catalog(shared_catalog_url)
    catalog.register_table(TableSpec("a", "/w/a"))
    catalog.register_table(TableSpec("b", "/w/b"))
    start = SPAWN.Barrier(2)
    reported = run_processes(
        (register_job, (shared_catalog_url, start, "a_to_b", "b", ["a"])),
        (register_job, (shared_catalog_url, start, "b_to_a", "a", ["b"])),
    )
    outcomes = sorted(outcome for _, outcome, _ in reported)
    assert outcomes == ["LineageCycleError", "registered"]
    assert len(catalog.list_jobs()) == 1
    catalog.close()


def test_racing_pipelines_with_one_job_name_leave_exactly_one(shared_catalog_url):
    load_catalog(shared_catalog_url).close()
    start = SPAWN.Barrier(PROCESSES)
    reported = run_processes(
        *[
            (register_pipeline, (shared_catalog_url, start, f"team_{i}", f"words_{i}"))
            for i in range(PROCESSES)
        ]
    )
    winners = [pipeline for pipeline, outcome, _ in reported if outcome == "registered"]
    assert len(winners) == 1
    for pipeline, outcome, fields in reported:
        if pipeline != winners[0]:
            assert outcome == "NameOwnedError"
            assert fields["owners"] == (winners[0],)
            assert ("job", "ingest", winners[0]) in fields["conflicts"]
    catalog = load_catalog(shared_catalog_url)
    assert {t.pipeline for t in catalog.list_tables()} == set(winners)
    assert [p.name for p in catalog.list_pipelines()] == sorted(["default", *winners])
    catalog.close()


def test_a_zombie_cannot_seal_after_its_lease_was_taken_over(shared_catalog_url):
    catalog = load_catalog(shared_catalog_url)
    catalog.register_table(TableSpec("raw", "/w/raw", kind="root"))
    catalog.register_job(JobSpec("ingest", "raw"))
    epoch = catalog.open_epoch().id
    a_ready, b_took_over, a_done = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    reported = dict(
        (who, (outcome, fields))
        for who, outcome, fields in run_processes(
            (zombie, (shared_catalog_url, 0.5, a_ready, b_took_over, a_done)),
            (successor, (shared_catalog_url, a_ready, b_took_over, a_done)),
        )
    )
    outcome, fields = reported["a"]
    assert outcome == "StaleLeaseError"
    assert (fields["generation"], fields["current_generation"]) == (1, 2)
    assert reported["b"] == ("sealed", {"generation": 2})
    sealed = catalog.table_epoch("raw", epoch)
    assert (sealed.state, sealed.generation, sealed.delta_version) == (EpochState.WRITTEN, 2, 2)
    catalog.close()


def test_a_pin_either_protects_its_epoch_or_fails_clearly(shared_catalog_url):
    catalog = load_catalog(shared_catalog_url)
    max_epoch = 30
    for _ in range(max_epoch):
        catalog.open_epoch()
    pinners = PROCESSES - 1
    start = SPAWN.Barrier(PROCESSES)
    reported = run_processes(
        *[
            (pin_epochs, (shared_catalog_url, start, seed, 20, max_epoch))
            for seed in range(pinners)
        ],
        (expire_all, (shared_catalog_url, start, max_epoch, 99)),
    )
    expired = next(found for who, found in reported if who == "expirer")
    assert len(expired) == len(set(expired))
    outcomes = [o for who, found in reported if who == "pinner" for o in found]
    kept = {pin_id: epoch for what, epoch, pin_id in outcomes if what == "kept"}
    assert kept, "no pin was ever created: the race did not happen"
    for what, epoch, detail in outcomes:
        expiry = catalog.expiry_of(epoch)
        if what == "kept":
            # Its pin is still active: the sweeps must have skipped its epoch.
            assert expiry is None, (epoch, detail)
        elif what == "refused":
            assert expiry is not None and expiry.rule == detail == RACE_RULE
    assert {e.epoch for e in catalog.expired_epochs()} == set(expired)
    active = catalog.active_pins()
    assert {pin.id: pin.epoch for pin in active} == kept
    for pin in active:
        assert catalog.expiry_of(pin.epoch) is None
    # Once the pinners are done, a last sweep expires exactly the epochs without a live pin.
    every = set(range(1, max_epoch + 1))
    catalog.expire_epochs(sorted(every), rule=RACE_RULE)
    assert {e.epoch for e in catalog.expired_epochs()} == every - set(kept.values())
    catalog.close()
