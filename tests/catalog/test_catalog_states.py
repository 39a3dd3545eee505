"""The epoch state machine, zombie fencing, COMMIT manifests and latest-state lookups."""

from __future__ import annotations

import pytest

from catalog import (
    EpochState,
    EpochStateError,
    JobProgress,
    JobSpec,
    ProgressRequest,
    SealRequest,
    StaleLeaseError,
    TableSpec,
    UnknownEpochError,
    UnknownTableError,
    ValidationRecord,
    WriterMismatchError,
)

P, W, R, C = EpochState.PROCESSED, EpochState.WRITTEN, EpochState.ROLLED_BACK, EpochState.COALESCED


def processed(chain, table, epoch, version, *, attempt=1, job="ingest", generation=None):
    lease = chain.ingest if job == "ingest" else chain.count
    return chain.catalog.record_processed(
        table,
        epoch,
        delta_version=version,
        job=job,
        attempt=attempt,
        generation=lease.generation if generation is None else generation,
    )


def seal_ingest(chain, epoch, version, **kw):
    return chain.catalog.seal(
        "ingest",
        chain.ingest.generation,
        [SealRequest("raw", epoch, version, **kw), SealRequest("rejects", epoch, version, **kw)],
    )


def seal_count(chain, epoch, version, **kw):
    return chain.catalog.seal(
        "count", chain.count.generation, [SealRequest("counts", epoch, version, **kw)]
    )


def state(chain, table, epoch):
    found = chain.catalog.table_epoch(table, epoch)
    return None if found is None else found.state


def open_epochs(chain, n):
    return [chain.catalog.open_epoch().id for _ in range(n)]


def test_processed_then_written(chain):
    (e,) = open_epochs(chain, 1)
    first = processed(chain, "raw", e, 3)
    assert (first.state, first.delta_version, first.job, first.generation) == (P, 3, "ingest", 1)
    processed(chain, "raw", e, 4)  # another micro-batch of the same epoch
    assert chain.catalog.table_epoch("raw", e).delta_version == 4
    assert chain.seal_root(e, 4, rows=10) is None
    sealed = chain.catalog.table_epoch("raw", e)
    assert (sealed.state, sealed.delta_version, sealed.rows) == (W, 4, 10)
    assert sealed.updated_at is not None and sealed.updated_at.utcoffset().total_seconds() == 0


def test_written_directly_from_no_state(chain):
    (e,) = open_epochs(chain, 1)
    chain.seal_root(e, 0)
    assert state(chain, "raw", e) is W


def test_nothing_follows_written(chain):
    (e,) = open_epochs(chain, 1)
    chain.seal_root(e, 0)
    with pytest.raises(EpochStateError) as raised:
        processed(chain, "raw", e, 1, attempt=2)
    assert (raised.value.table, raised.value.epoch, raised.value.current) == ("raw", e, W)
    with pytest.raises(EpochStateError):
        chain.seal_root(e, 1)
    with pytest.raises(EpochStateError):
        chain.catalog.mark_rolled_back(
            "raw", e, job="ingest", generation=chain.ingest.generation, reason="x"
        )
    assert chain.catalog.table_epoch("raw", e).delta_version == 0


def test_rollback_and_replay_with_a_higher_attempt(chain):
    (e,) = open_epochs(chain, 1)
    processed(chain, "raw", e, 1)
    undone = chain.catalog.mark_rolled_back(
        "raw", e, job="ingest", generation=chain.ingest.generation, reason="crashed mid-epoch"
    )
    assert (undone.state, undone.attempt, undone.reason) == (R, 1, "crashed mid-epoch")
    with pytest.raises(EpochStateError) as raised:
        processed(chain, "raw", e, 2, attempt=1)
    assert "attempt" in str(raised.value)
    with pytest.raises(EpochStateError):
        chain.seal_root(e, 2, attempt=2)  # WRITTEN needs PROCESSED first after a rollback
    processed(chain, "raw", e, 3, attempt=2)
    chain.seal_root(e, 3, attempt=2)
    final = chain.catalog.table_epoch("raw", e)
    assert (final.state, final.attempt, final.delta_version) == (W, 2, 3)
    history = [(h.state, h.attempt, h.delta_version) for h in chain.catalog.state_history("raw")]
    assert history == [(P, 1, 1), (R, 1, 1), (P, 2, 3), (W, 2, 3)]
    assert chain.catalog.state_history("raw", epoch=e + 1) == []


def test_only_a_processed_epoch_can_be_rolled_back(chain):
    (e,) = open_epochs(chain, 1)
    with pytest.raises(EpochStateError) as raised:
        chain.catalog.mark_rolled_back(
            "raw", e, job="ingest", generation=chain.ingest.generation, reason="x"
        )
    assert raised.value.current is None and raised.value.requested == R
    processed(chain, "raw", e, 1)
    chain.catalog.mark_rolled_back("raw", e, job="ingest", generation=1, reason="x")
    with pytest.raises(EpochStateError):
        chain.catalog.mark_rolled_back("raw", e, job="ingest", generation=1, reason="again")


def test_an_older_attempt_cannot_overwrite_a_newer_one(chain):
    (e,) = open_epochs(chain, 1)
    processed(chain, "raw", e, 1)
    chain.catalog.mark_rolled_back("raw", e, job="ingest", generation=1, reason="x")
    processed(chain, "raw", e, 2, attempt=3)
    with pytest.raises(EpochStateError):
        processed(chain, "raw", e, 3, attempt=2)
    with pytest.raises(EpochStateError):
        chain.seal_root(e, 3, attempt=2)
    assert chain.catalog.table_epoch("raw", e).attempt == 3


def test_written_epochs_must_increase(chain):
    e1, e2, e3 = open_epochs(chain, 3)
    chain.seal_root(e1, 0)
    chain.seal_root(e3, 1)
    with pytest.raises(EpochStateError) as raised:
        chain.seal_root(e2, 2)
    assert raised.value.epoch == e2 and "must increase" in str(raised.value)
    assert state(chain, "raw", e2) is None


def test_backlog_batch_coalesces_the_earlier_epochs(chain):
    e1, e2, e3, e4, e5 = open_epochs(chain, 5)
    chain.seal_root(e1, 0)
    processed(chain, "raw", e3, 1)
    processed(chain, "raw", e4, 1)
    chain.catalog.mark_rolled_back("raw", e4, job="ingest", generation=1, reason="x")
    chain.seal_root(e5, 2, first_epoch=e2)
    states = {t.epoch: t for t in chain.catalog.table_epochs("raw")}
    assert [states[e].state for e in (e1, e2, e3, e4, e5)] == [W, C, C, C, W]
    assert {states[e].coalesced_into for e in (e2, e3, e4)} == {e5}
    assert states[e3].delta_version is None
    with pytest.raises(EpochStateError):
        processed(chain, "raw", e3, 3, attempt=2)
    coalesced = [h.epoch for h in chain.catalog.state_history("raw") if h.state is C]
    assert coalesced == [e2, e3, e4]


def test_a_batch_cannot_start_after_its_last_epoch(chain):
    e1, e2 = open_epochs(chain, 2)
    with pytest.raises(EpochStateError):
        chain.seal_root(e1, 0, first_epoch=e2)
    with pytest.raises(EpochStateError):
        chain.seal_root(e1, 0, first_epoch=0)


def test_a_failing_seal_changes_nothing(chain):
    e1, e2 = open_epochs(chain, 2)
    chain.catalog.seal("ingest", 1, [SealRequest("rejects", e2, 5)])
    with pytest.raises(EpochStateError):
        chain.catalog.seal(
            "ingest",
            1,
            [SealRequest("raw", e2, 7, first_epoch=e1), SealRequest("rejects", e1, 7)],
        )
    assert chain.catalog.table_epochs("raw") == []
    assert chain.catalog.state_history("raw") == []


def test_a_job_may_only_record_states_of_tables_it_writes(chain):
    (e,) = open_epochs(chain, 1)
    with pytest.raises(EpochStateError) as raised:
        processed(chain, "counts", e, 1, job="ingest")
    assert "'count'" in str(raised.value)
    with pytest.raises(EpochStateError):
        chain.catalog.seal("count", chain.count.generation, [SealRequest("raw", e, 1)])
    with pytest.raises(UnknownTableError):
        processed(chain, "ghost", e, 1)


def test_states_of_unissued_epochs_are_refused(chain):
    with pytest.raises(UnknownEpochError):
        processed(chain, "raw", 1, 0)
    with pytest.raises(UnknownEpochError):
        chain.seal_root(1, 0)


def test_a_stale_lease_generation_cannot_record_or_seal(chain):
    (e,) = open_epochs(chain, 1)
    processed(chain, "raw", e, 1)
    catalog = chain.catalog
    lease = catalog.get_lease("ingest")
    catalog.release_lease(lease)
    taken = catalog.acquire_lease("ingest", "runner-b", ttl_seconds=60)
    assert taken.generation == lease.generation + 1
    with pytest.raises(StaleLeaseError) as raised:
        processed(chain, "raw", e, 2, generation=lease.generation)
    assert (raised.value.job, raised.value.generation) == ("ingest", 1)
    assert raised.value.current_generation == 2
    with pytest.raises(StaleLeaseError):
        catalog.seal("ingest", lease.generation, [SealRequest("raw", e, 2)])
    with pytest.raises(StaleLeaseError):
        catalog.mark_rolled_back("raw", e, job="ingest", generation=lease.generation, reason="x")
    assert catalog.table_epoch("raw", e).state is P
    catalog.seal("ingest", taken.generation, [SealRequest("raw", e, 2)])
    assert catalog.table_epoch("raw", e).generation == taken.generation


def test_a_job_without_a_lease_cannot_write(catalog):
    catalog.register_table(TableSpec("t", "/w/t", kind="root"))
    catalog.register_job(JobSpec("j", "t", source="s"))
    e = catalog.open_epoch().id
    with pytest.raises(StaleLeaseError) as raised:
        catalog.record_processed("t", e, delta_version=0, job="j", attempt=1, generation=1)
    assert raised.value.current_generation is None
    with pytest.raises(StaleLeaseError):
        catalog.seal("j", 1, [SealRequest("t", e, 0)])
    assert catalog.table_epoch("t", e) is None


def test_commit_when_every_table_has_the_epoch_written(chain):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    assert seal_ingest(chain, e1, 10) is None
    assert catalog.get_commit(e1) is None
    manifest = seal_count(chain, e1, 20)
    assert manifest is not None and manifest.epoch == e1
    assert dict(manifest.versions) == {"raw": 10, "rejects": 10, "counts": 20}
    assert manifest.barrier_ts == catalog.get_epoch(e1).barrier_ts
    assert catalog.get_commit(e1) == manifest
    assert catalog.latest_commit() == manifest
    # The order in which the jobs seal does not matter.
    processed(chain, "counts", e2, 21, job="count")
    assert seal_count(chain, e2, 21) is None
    second = seal_ingest(chain, e2, 11)
    assert second.epoch == e2 and dict(second.versions)["counts"] == 21
    assert catalog.latest_commit().epoch == e2


def test_tables_registered_later_do_not_hold_back_older_epochs(chain, tmp_path):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    catalog.register_table(TableSpec("late", str(tmp_path / "late"), kind="root"))
    assert catalog.get_table("late").first_epoch == 3
    seal_ingest(chain, e2, 1)
    assert seal_count(chain, e2, 1, first_epoch=e1).epoch == e2


def test_sealing_an_epoch_completes_that_epoch_only(chain):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    seal_ingest(chain, e1, 1)
    seal_ingest(chain, e2, 2)
    # counts catches up over e1..e2 in one batch: e1 is COALESCED in counts, never COMMIT.
    manifest = seal_count(chain, e2, 5, first_epoch=e1)
    assert manifest.epoch == e2
    assert catalog.get_commit(e1) is None
    assert catalog.table_epoch("counts", e1).state is C


def test_one_seal_of_several_epochs_returns_the_newest_commit(chain):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    for e in (e1, e2):
        seal_ingest(chain, e, e)
    manifest = catalog.seal(
        "count",
        chain.count.generation,
        [SealRequest("counts", e1, 1), SealRequest("counts", e2, 2)],
    )
    assert manifest.epoch == e2
    assert catalog.get_commit(e1).versions["counts"] == 1


def test_latest_written_and_processed(chain):
    catalog = chain.catalog
    e1, e2, e3, e4 = open_epochs(chain, 4)
    seal_ingest(chain, e1, 1)
    seal_ingest(chain, e2, 2)
    processed(chain, "raw", e3, 3)
    processed(chain, "raw", e4, 4)
    catalog.mark_rolled_back("raw", e4, job="ingest", generation=1, reason="x")
    seal_count(chain, e1, 7)
    written = catalog.latest_written(["raw", "counts", "rejects", "ghost"])
    assert {t: s.epoch for t, s in written.items()} == {"raw": e2, "counts": e1, "rejects": e2}
    assert written["raw"].delta_version == 2
    assert catalog.latest_written(["raw"], at_or_before=e1)["raw"].epoch == e1
    assert catalog.latest_written(["raw"], at_or_before=0) == {}
    assert catalog.latest_written([]) == {}
    latest = catalog.latest_processed(["raw", "counts", "ghost"])
    assert {t: (s.epoch, s.state) for t, s in latest.items()} == {
        "raw": (e3, P),
        "counts": (e1, W),
    }
    catalog.mark_rolled_back("raw", e3, job="ingest", generation=1, reason="x")
    assert catalog.latest_processed(["raw"])["raw"].epoch == e2


def test_latest_processed_counts_coalesced_epochs(chain):
    catalog = chain.catalog
    e1, e2, e3 = open_epochs(chain, 3)
    chain.seal_root(e3, 1, first_epoch=e1)
    processed(chain, "rejects", e1, 0)
    assert catalog.latest_processed(["raw"])["raw"].epoch == e3
    assert catalog.latest_written(["raw"], at_or_before=e2) == {}


def test_states_at_and_ranges(chain):
    catalog = chain.catalog
    e1, e2, e3 = open_epochs(chain, 3)
    seal_ingest(chain, e1, 1)
    seal_ingest(chain, e2, 2)
    processed(chain, "raw", e3, 3)
    at = catalog.states_at(["raw", "rejects", "counts", "raw"], e2)
    assert {t: s.state for t, s in at.items()} == {"raw": W, "rejects": W}
    assert catalog.states_at([], e1) == {}
    assert [t.epoch for t in catalog.table_epochs("raw")] == [e1, e2, e3]
    assert [t.epoch for t in catalog.table_epochs("raw", after=e1)] == [e2, e3]
    assert [t.epoch for t in catalog.table_epochs("raw", up_to=e2)] == [e1, e2]
    assert [t.epoch for t in catalog.table_epochs("raw", limit=1)] == [e1]


def test_validations_are_kept_per_epoch_and_replaced_on_rerun(chain):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    ingest = {"job": "ingest", "generation": chain.ingest.generation}
    catalog.record_validation(
        ValidationRecord("raw", e1, False, "block", {"failed": ["a"]}), **ingest
    )
    catalog.record_validation(ValidationRecord("raw", e1, True, "block", {"failed": []}), **ingest)
    catalog.record_validation(ValidationRecord("raw", e2, False, "warn", {"n": 1}), **ingest)
    records = catalog.validations("raw")
    assert [(r.epoch, r.success, r.policy) for r in records] == [
        (e1, True, "block"),
        (e2, False, "warn"),
    ]
    assert records[0].results == {"failed": []} and records[0].recorded_at is not None
    assert [r.epoch for r in catalog.validations("raw", epoch=e2)] == [e2]
    assert catalog.validations("counts") == []
    with pytest.raises(UnknownTableError):
        catalog.record_validation(ValidationRecord("ghost", e1, True, "warn"), **ingest)
    with pytest.raises(UnknownEpochError):
        catalog.record_validation(ValidationRecord("raw", 99, True, "warn"), **ingest)


def test_validations_are_fenced_and_only_by_the_writer(chain):
    catalog = chain.catalog
    (e,) = open_epochs(chain, 1)
    record = ValidationRecord("raw", e, True, "warn")
    with pytest.raises(WriterMismatchError) as raised:
        catalog.record_validation(record, job="count", generation=chain.count.generation)
    assert (raised.value.table, raised.value.job, raised.value.writer) == ("raw", "count", "ingest")
    catalog.release_lease(chain.ingest)
    taken = catalog.acquire_lease("ingest", "runner-b", ttl_seconds=60)
    with pytest.raises(StaleLeaseError) as stale:
        catalog.record_validation(record, job="ingest", generation=chain.ingest.generation)
    assert (stale.value.generation, stale.value.current_generation) == (1, 2)
    assert catalog.validations("raw") == []
    catalog.record_validation(record, job="ingest", generation=taken.generation)
    assert [v.epoch for v in catalog.validations("raw")] == [e]


def test_table_status(chain):
    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    seal_ingest(chain, e1, 1)
    processed(chain, "raw", e2, 2)
    catalog.record_validation(
        ValidationRecord("raw", e2, False, "block"), job="ingest", generation=1
    )
    status = {s.table: s for s in catalog.table_status()}
    assert set(status) == {"raw", "rejects", "counts"}
    raw = status["raw"]
    assert (raw.kind, raw.writer_job) == ("root", "ingest")
    assert (raw.latest_processed.epoch, raw.latest_processed.state) == (e2, P)
    assert raw.latest_written.epoch == e1
    assert raw.latest_validation.epoch == e2 and not raw.latest_validation.success
    counts = status["counts"]
    assert (counts.kind, counts.writer_job, counts.latest_written) == ("derived", "count", None)
    assert counts.latest_processed is None and counts.latest_validation is None


def test_every_transition_goes_through_the_one_state_machine(chain, monkeypatch):
    import catalog.states.sql
    import consistency.states

    calls = []

    def spy(table, epoch, current, requested, **attempts):
        calls.append((table, epoch, current, requested))
        return consistency.states.check_transition(table, epoch, current, requested, **attempts)

    monkeypatch.setattr(catalog.states.sql, "check_transition", spy)
    e1, e2, e3 = open_epochs(chain, 3)
    processed(chain, "raw", e1, 1)
    chain.catalog.mark_rolled_back("raw", e1, job="ingest", generation=1, reason="x")
    processed(chain, "raw", e2, 2)
    chain.seal_root(e3, 3, first_epoch=e1)
    assert calls == [
        ("raw", e1, None, P),
        ("raw", e1, P, R),
        ("raw", e2, None, P),
        ("raw", e3, None, W),
        ("raw", e1, R, C),
        ("raw", e2, P, C),
    ]


def test_every_seal_is_checked_by_the_one_seal_rule(chain, monkeypatch):
    import catalog.states.sql
    import consistency.states

    calls = []

    def spy(table, epoch, current, *, first_epoch, latest_written):
        calls.append((table, epoch, current, first_epoch, latest_written))
        consistency.states.check_seal(
            table, epoch, current, first_epoch=first_epoch, latest_written=latest_written
        )

    monkeypatch.setattr(catalog.states.sql, "check_seal", spy)
    e1, e2, e3 = open_epochs(chain, 3)
    seal_ingest(chain, e1, 1)
    processed(chain, "raw", e3, 2)
    seal_ingest(chain, e3, 2, first_epoch=e2)
    assert calls == [
        ("raw", e1, None, e1, None),
        ("rejects", e1, None, e1, None),
        ("raw", e3, P, e2, e1),
        ("rejects", e3, None, e2, e1),
    ]


def test_commit_is_decided_by_the_one_commit_rule(chain, monkeypatch):
    import catalog.store
    import consistency.states

    decided = []

    def spy(states):
        decided.append(set(states))
        return consistency.states.global_state_of(states)

    monkeypatch.setattr(catalog.store, "global_state_of", spy)
    (e1,) = open_epochs(chain, 1)
    assert seal_ingest(chain, e1, 1) is None
    assert decided[-1] == {W, None}  # raw and rejects WRITTEN, counts nothing yet
    manifest = seal_count(chain, e1, 2)
    assert manifest is not None and manifest.versions == {"raw": 1, "rejects": 1, "counts": 2}
    assert decided[-1] == {W}


def test_table_status_shows_pipeline_lease_failure_freshness_and_commit(chain, tmp_path):
    from catalog import JobFailureRecord

    catalog = chain.catalog
    e1, e2 = open_epochs(chain, 2)
    seal_ingest(chain, e1, 1)
    seal_count(chain, e1, 2)
    processed(chain, "raw", e2, 3)
    failed = catalog.record_failure(
        JobFailureRecord(job="count", error_class="E", message="m", owner="runner-a", epoch=e2)
    )
    catalog.register_table(
        TableSpec("orders", str(tmp_path / "orders"), kind="root", pipeline="sales")
    )
    sales_epoch = catalog.open_epoch(pipeline="sales")
    status = {s.table: s for s in catalog.table_status()}
    raw = status["raw"]
    assert (raw.pipeline, raw.retired) == ("default", False)
    assert raw.writer_lease == catalog.get_lease("ingest")
    assert raw.writer_lease.acquired_at is not None
    assert raw.writer_last_failure is None
    assert raw.pipeline_latest_epoch == catalog.get_epoch(e2)
    assert raw.latest_written_barrier_ts == catalog.get_epoch(e1).barrier_ts
    assert raw.pipeline_latest_commit == catalog.get_commit(e1)
    counts = status["counts"]
    assert counts.writer_last_failure == failed
    assert counts.writer_lease.owner == "runner-a"
    orders = status["orders"]
    assert (orders.pipeline, orders.writer_job, orders.writer_lease) == ("sales", None, None)
    assert orders.pipeline_latest_epoch == sales_epoch
    assert orders.pipeline_latest_commit is None and orders.latest_written_barrier_ts is None
    catalog.retire_job("count")
    catalog.retire_table("counts")
    assert {s.table: s.retired for s in catalog.table_status()}["counts"] is True


def test_table_status_costs_a_fixed_number_of_queries(chain):
    import sqlalchemy as sa

    catalog = chain.catalog

    def statements() -> int:
        seen = []

        def count(*_args):
            seen.append(1)

        sa.event.listen(catalog._engine, "before_cursor_execute", count)
        try:
            catalog.table_status()
        finally:
            sa.event.remove(catalog._engine, "before_cursor_execute", count)
        return len(seen)

    few = statements()
    for e in open_epochs(chain, 20):
        seal_ingest(chain, e, e)
        seal_count(chain, e, e)
    assert statements() == few


def sliced_sealed_and_counted(chain, e1, e2, e3):
    """Slices recorded for the three epochs, ingest sealed at the first two and PROCESSED
    at the third, count sealed at the first."""
    reader = {"job": "ingest", "generation": chain.ingest.generation}
    for epoch in (e1, e2, e3):
        chain.catalog.record_slice("words", epoch, {"to": epoch}, **reader)
    seal_ingest(chain, e1, 1)
    seal_ingest(chain, e2, 2)
    processed(chain, "raw", e3, 3)
    seal_count(chain, e1, 1)


def test_job_progress_is_what_planning_reads(chain, tmp_path):
    catalog = chain.catalog
    assert catalog.job_progress("counts", inputs=["raw"]) == JobProgress(
        done_through=0, issued=(), states={"counts": (), "raw": ()}
    )
    e1, e2, e3, e4 = open_epochs(chain, 4)
    # Another pipeline's epochs are never a job's.
    catalog.register_table(TableSpec("orders", str(tmp_path / "orders"), pipeline="sales"))
    catalog.open_epoch(pipeline="sales")
    sliced_sealed_and_counted(chain, e1, e2, e3)

    counts = catalog.job_progress("counts", inputs=["raw"])
    assert (counts.done_through, counts.issued, counts.recorded_slices) == (e1, (e2, e3, e4), ())
    assert counts.states["counts"] == ()
    assert [(s.epoch, s.state) for s in counts.states["raw"]] == [(e2, W), (e3, P)]
    assert counts.states["raw"] == tuple(catalog.table_epochs("raw", after=e1))

    raw = catalog.job_progress("raw", source="words")
    assert (raw.done_through, raw.issued, raw.recorded_slices) == (e2, (e3, e4), (e3,))
    assert [(s.epoch, s.state) for s in raw.states["raw"]] == [(e3, P)]

    with pytest.raises(UnknownTableError):
        catalog.job_progress("nope")


def test_jobs_progress_is_each_jobs_progress_in_one_read(chain, tmp_path):
    """Jobs at different epochs, of two pipelines, with and without a source: each gets
    exactly what job_progress gives it alone, in the order asked."""
    catalog = chain.catalog
    assert catalog.jobs_progress([]) == []
    catalog.register_table(TableSpec("orders", str(tmp_path / "orders"), pipeline="sales"))
    catalog.register_table(TableSpec("tallies", str(tmp_path / "tallies"), pipeline="sales"))
    e1, e2, e3, e4 = open_epochs(chain, 4)
    s1, s2 = (catalog.open_epoch(pipeline="sales").id for _ in range(2))
    sliced_sealed_and_counted(chain, e1, e2, e3)
    requests = [
        ProgressRequest("counts", inputs=("raw",)),
        ProgressRequest("orders"),
        ProgressRequest("raw", source="words"),
        ProgressRequest("tallies", inputs=("orders", "raw")),
        ProgressRequest("rejects"),
        ProgressRequest("counts", inputs=("raw", "rejects")),
    ]
    alone = [catalog.job_progress(r.output, inputs=r.inputs, source=r.source) for r in requests]
    assert catalog.jobs_progress(requests) == alone
    assert [p.issued for p in alone] == [(e2, e3, e4), (s1, s2), (e3, e4), (s1, s2)] + [
        (e3, e4),
        (e2, e3, e4),
    ]
    assert [s.epoch for s in alone[0].states["raw"]] == [e2, e3]
    assert alone[5].states["rejects"] == (
        catalog.table_epoch("rejects", e2),
    )  # only the epochs after counts' own
    assert alone[2].recorded_slices == (e3,) and alone[0].recorded_slices == ()
    with pytest.raises(UnknownTableError, match="nope"):
        catalog.jobs_progress([requests[0], ProgressRequest("nope")])


def test_job_progress_is_one_read_of_a_few_statements(chain):
    import sqlalchemy as sa

    catalog = chain.catalog

    def statements(read=lambda: catalog.job_progress("raw", inputs=["counts"], source="words")):
        seen: list[str] = []

        # Every engine of the catalog (PostgreSQL reads on an autocommit one).
        def count(_conn, _cursor, statement, *_args):
            seen.append(statement.split(None, 1)[0].upper())

        sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
        try:
            read()
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
        return seen

    few = statements()
    for e in open_epochs(chain, 20):
        catalog.record_slice(
            "words", e, {"to": e}, job="ingest", generation=chain.ingest.generation
        )
        if e < 15:
            seal_ingest(chain, e, e)
    seen = statements()
    # The output and its WRITTEN, the epochs, the states, the slices: SQLite adds its BEGIN
    # (every read is a transaction there); PostgreSQL reads one statement at a time.
    assert seen.count("BEGIN") <= 1 and len(seen) - seen.count("BEGIN") == 4, seen
    # As many for every job of a pipeline at once.
    many = [ProgressRequest("raw", inputs=("counts",), source="words")] + [
        ProgressRequest("counts", inputs=("raw", "rejects")),
        ProgressRequest("rejects", inputs=("raw",)),
    ] * 20
    assert statements(lambda: catalog.jobs_progress(many)) == seen
    assert len(few) <= len(seen), few
