"""Failures, resolutions of blocked epochs, and the attempts a replay must exceed."""

from __future__ import annotations

import pytest

from catalog import (
    FAILURE_MESSAGE_MAX_CHARS,
    BatchStart,
    CatalogError,
    EpochState,
    JobFailureRecord,
    PipelineMismatchError,
    Resolution,
    ResolutionAction,
    SealRequest,
    UnknownEpochError,
    UnknownJobError,
    UnknownTableError,
)

P, W, R = EpochState.PROCESSED, EpochState.WRITTEN, EpochState.ROLLED_BACK


def failure(job="ingest", **kw):
    values = dict(error_class="JobExecutionError", message="boom", owner="host:1:abc")
    values.update(kw)
    return JobFailureRecord(job=job, **values)


def test_a_failure_is_recorded_with_the_jobs_pipeline_and_a_time(chain):
    catalog = chain.catalog
    epoch = catalog.open_epoch().id
    recorded = catalog.record_failure(
        failure(epoch=epoch, attempt=2, generation=1, message="Spark died\n  at line 3\n")
    )
    assert (recorded.job, recorded.pipeline, recorded.epoch) == ("ingest", "default", epoch)
    assert (recorded.attempt, recorded.generation, recorded.owner) == (2, 1, "host:1:abc")
    assert recorded.message == "Spark died / at line 3"
    assert recorded.failed_at is not None and recorded.id is not None
    assert catalog.failures() == [recorded]


def test_a_failure_message_is_one_bounded_line(chain):
    recorded = chain.catalog.record_failure(failure(message="x" * 5000 + "\nmore"))
    assert "\n" not in recorded.message
    assert len(recorded.message) == FAILURE_MESSAGE_MAX_CHARS
    assert chain.catalog.failures()[0].message == recorded.message


def test_failures_are_listed_newest_first_and_filtered(chain):
    catalog = chain.catalog
    e1, e2 = catalog.open_epoch().id, catalog.open_epoch().id
    first = catalog.record_failure(failure(epoch=e1, message="first"))
    second = catalog.record_failure(failure(job="count", epoch=e1, message="second"))
    third = catalog.record_failure(failure(epoch=e2, message="third"))
    catalog.record_failure(failure(message="no epoch"))
    assert [f.message for f in catalog.failures()] == ["no epoch", "third", "second", "first"]
    assert catalog.failures(job="ingest", epoch=e1) == [first]
    assert catalog.failures(epoch=e1) == [second, first]
    assert catalog.failures(job="ingest", limit=2)[1] == third
    assert catalog.failures(job="nobody") == []


def test_a_failure_needs_a_known_job_and_epoch_and_its_own_pipeline(chain):
    catalog = chain.catalog
    with pytest.raises(UnknownJobError):
        catalog.record_failure(failure(job="ghost"))
    with pytest.raises(UnknownEpochError):
        catalog.record_failure(failure(epoch=42))
    with pytest.raises(PipelineMismatchError):
        catalog.record_failure(failure(pipeline="elsewhere"))
    assert catalog.failures() == []


def test_resolutions_are_kept_per_table_and_epoch(chain):
    catalog = chain.catalog
    e1, e2 = catalog.open_epoch().id, catalog.open_epoch().id
    accepted = catalog.record_resolution(
        "raw", e1, action=ResolutionAction.ACCEPT, actor="ann@ops", reason="known outlier"
    )
    assert isinstance(accepted, Resolution) and accepted.at is not None
    catalog.record_resolution("raw", e2, action="QUARANTINE", actor="bob@ops", reason="bad rows")
    catalog.record_resolution("counts", e2, action="SKIP", actor="bob@ops", reason="garbage")
    assert [(r.epoch, r.action) for r in catalog.resolutions("raw")] == [
        (e1, ResolutionAction.ACCEPT),
        (e2, ResolutionAction.QUARANTINE),
    ]
    assert catalog.resolutions("raw", epoch=e1) == [accepted]
    assert catalog.resolutions("counts")[0].action is ResolutionAction.SKIP
    assert catalog.resolutions("rejects") == []
    with pytest.raises(CatalogError, match="unknown action"):
        catalog.record_resolution("raw", e1, action="IGNORE", actor="x", reason="y")
    with pytest.raises(UnknownTableError):
        catalog.record_resolution("ghost", e1, action="ACCEPT", actor="x", reason="y")
    with pytest.raises(UnknownEpochError):
        catalog.record_resolution("raw", 99, action="ACCEPT", actor="x", reason="y")


def test_skip_is_restore_rollback_and_an_empty_replay(chain):
    """SKIP: Delta RESTORE, mark_rolled_back, then a replay that seals the epoch empty."""
    catalog = chain.catalog
    epoch = catalog.open_epoch().id
    gen = chain.ingest.generation
    catalog.record_processed("raw", epoch, delta_version=5, job="ingest", attempt=1, generation=gen)
    catalog.record_resolution("raw", epoch, action="SKIP", actor="ann@ops", reason="bad batch")
    catalog.mark_rolled_back("raw", epoch, job="ingest", generation=gen, reason="skipped")
    attempt = catalog.max_attempt(["raw", "rejects"], epoch) + 1
    assert attempt == 2
    catalog.record_processed(
        "raw", epoch, delta_version=7, job="ingest", attempt=attempt, generation=gen, rows=0
    )
    catalog.seal(
        "ingest",
        gen,
        [
            SealRequest("raw", epoch, 7, attempt=attempt, rows=0),
            SealRequest("rejects", epoch, 0, attempt=attempt, rows=0),
        ],
    )
    sealed = catalog.table_epoch("raw", epoch)
    assert (sealed.state, sealed.rows, sealed.attempt, sealed.delta_version) == (W, 0, 2, 7)
    history = [(h.state, h.attempt) for h in catalog.state_history("raw", epoch=epoch)]
    assert history == [(P, 1), (R, 1), (P, 2), (W, 2)]
    (resolution,) = catalog.resolutions("raw", epoch=epoch)
    assert resolution.action is ResolutionAction.SKIP
    assert resolution.at <= catalog.state_history("raw", epoch=epoch)[-1].updated_at


def test_max_attempt_counts_the_history_of_every_given_table(chain):
    catalog = chain.catalog
    e1, e2 = catalog.open_epoch().id, catalog.open_epoch().id
    gen = chain.ingest.generation
    assert catalog.max_attempt(["raw", "rejects"], e1) == 0
    assert catalog.max_attempt([], e1) == 0
    catalog.record_processed(
        "rejects", e1, delta_version=1, job="ingest", attempt=3, generation=gen
    )
    catalog.mark_rolled_back("rejects", e1, job="ingest", generation=gen, reason="crash")
    catalog.record_processed("raw", e1, delta_version=1, job="ingest", attempt=1, generation=gen)
    assert catalog.max_attempt(["raw"], e1) == 1
    assert catalog.max_attempt(["raw", "rejects"], e1) == 3
    assert catalog.max_attempt(["raw", "rejects"], e2) == 0
    # A coalesced epoch keeps only the batch's attempt in its state; the history remembers.
    catalog.seal("ingest", gen, [SealRequest("rejects", e2, 2, attempt=1, first_epoch=e1)])
    assert catalog.table_epoch("rejects", e1).attempt == 1
    assert catalog.max_attempt(["rejects"], e1) == 3


def test_batch_start_is_max_attempt_latest_written_and_input_states_in_one_read(chain):
    catalog = chain.catalog
    e1, e2 = catalog.open_epoch().id, catalog.open_epoch().id
    gen = chain.ingest.generation
    assert catalog.batch_start(["raw", "rejects"], e1) == BatchStart(max_attempt=0)
    assert catalog.batch_start([], e1) == BatchStart(max_attempt=0)
    assert catalog.batch_start(["counts"], e1, inputs=["raw"]) == BatchStart(max_attempt=0)
    catalog.seal("ingest", gen, [SealRequest("raw", e1, 4), SealRequest("rejects", e1, 4)])
    catalog.record_processed("raw", e2, delta_version=5, job="ingest", attempt=2, generation=gen)
    catalog.mark_rolled_back("raw", e2, job="ingest", generation=gen, reason="crash")
    start = catalog.batch_start(["raw", "rejects", "counts"], e2)
    assert start.max_attempt == catalog.max_attempt(["raw", "rejects", "counts"], e2) == 2
    assert start.latest_written == catalog.latest_written(["raw", "rejects", "counts"])
    assert set(start.latest_written) == {"raw", "rejects"}
    assert start.input_states == {}
    # A derived job's batch: its own table's floor, its inputs' states at the epoch.
    for epoch in (e1, e2):
        start = catalog.batch_start(["counts"], epoch, inputs=["raw", "rejects", "raw"])
        assert start.max_attempt == 0 and start.latest_written == {}
        assert start.input_states == catalog.states_at(["raw", "rejects"], epoch)
    assert catalog.batch_start(["counts"], e1, inputs=["raw"]).input_states["raw"].state is (
        EpochState.WRITTEN
    )
    assert catalog.batch_start([], e2, inputs=["raw"]).input_states["raw"].state is (
        EpochState.ROLLED_BACK
    )
