"""Revisions (etl recompute): one transaction switches every table of a revision."""

from __future__ import annotations

import pytest

from catalog import (
    EpochState,
    RevisionState,
    RevisionStateError,
    SealRequest,
    StaleLeaseError,
)


def _three_epochs(chain) -> None:
    """Epochs 1..3 sealed in raw (v1..v3), rejects (v1..v3) and counts (v11..v13)."""
    catalog = chain.catalog
    for epoch in (1, 2, 3):
        catalog.open_epoch()
        catalog.seal(
            "ingest",
            chain.ingest.generation,
            [SealRequest("raw", epoch, epoch), SealRequest("rejects", epoch, epoch)],
        )
        catalog.seal("count", chain.count.generation, [SealRequest("counts", epoch, 10 + epoch)])


def test_a_switch_replaces_every_table_of_the_revision_at_once(chain):
    catalog = chain.catalog
    _three_epochs(chain)
    revision = catalog.begin_revision(
        pipeline="default",
        tables=["counts"],
        from_epoch=2,
        reason="fix",
        actor="me@host",
        owner="host:1:x",
    )
    assert revision.state is RevisionState.BUILDING
    assert catalog.latest_written(["counts"])["counts"].delta_version == 13  # nothing yet

    switched = catalog.switch_revision(
        revision.id,
        generations={"count": chain.count.generation},
        seals=[SealRequest("counts", 3, 20, attempt=2, rows=5, first_epoch=2)],
    )
    assert (switched.state, switched.through_epoch) == (RevisionState.SWITCHED, 3)
    states = {s.epoch: s for s in catalog.table_epochs("counts")}
    assert states[1].delta_version == 11
    assert (states[2].state, states[2].coalesced_into) == (EpochState.COALESCED, 3)
    assert (states[3].state, states[3].delta_version) == (EpochState.WRITTEN, 20)
    assert catalog.get_commit(2) is None  # COALESCED now: no cut there
    assert catalog.get_commit(3).versions == {"raw": 3, "rejects": 3, "counts": 20}
    old = {(s.table, s.epoch): s.delta_version for s in catalog.superseded_states(revision.id)}
    assert old == {("counts", 2): 12, ("counts", 3): 13}
    assert [r.id for r in catalog.revisions(table="counts")] == [revision.id]
    assert catalog.revisions(table="raw") == []
    with pytest.raises(RevisionStateError, match="is SWITCHED"):
        catalog.discard_revision(revision.id, note="too late")


def test_a_recompute_that_lost_a_lease_never_switches(chain):
    catalog = chain.catalog
    _three_epochs(chain)
    revision = catalog.begin_revision(
        pipeline="default",
        tables=["counts"],
        from_epoch=1,
        reason="",
        actor="me@host",
        owner="host:1:x",
    )
    catalog.release_lease(chain.count)
    catalog.acquire_lease("count", "runner-b", ttl_seconds=60)
    with pytest.raises(StaleLeaseError):
        catalog.switch_revision(
            revision.id,
            generations={"count": chain.count.generation},
            seals=[SealRequest("counts", 3, 20, first_epoch=1)],
        )
    assert catalog.latest_written(["counts"])["counts"].delta_version == 13
    discarded = catalog.discard_revision(revision.id, note="killed")
    assert (discarded.state, discarded.note) == (RevisionState.DISCARDED, "killed")
