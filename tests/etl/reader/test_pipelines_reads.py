"""A snapshot over tables of two pipelines through etl.snapshot on a real catalog (no
Spark, no Delta files: repeatable-read resolves from the catalog alone): each pipeline's
cut, and the retention pin protecting every version it reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from consistency import NoAlignedCutError, SnapshotRequestError
from etl import snapshot

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def catalog(tmp_path):
    """team_a seals epochs at 0 s and 20 s, team_b at 10 s (a_words at versions 0 and 1,
    b_words at version 0)."""
    opened = load_catalog(f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    for team, table, job in (("team_a", "a_words", "ingest_a"), ("team_b", "b_words", "ingest_b")):
        opened.register_pipeline(
            team,
            [TableSpec(table, str(tmp_path / table), kind="root")],
            [JobSpec(job, table, source=f"{job}_files")],
        )
        opened.acquire_lease(job, "runner", ttl_seconds=60)
    for team, table, job, seconds, version in (
        ("team_a", "a_words", "ingest_a", 0, 0),
        ("team_b", "b_words", "ingest_b", 10, 0),
        ("team_a", "a_words", "ingest_a", 20, 1),
    ):
        epoch = opened.open_epoch(T0 + timedelta(seconds=seconds), pipeline=team).id
        opened.record_processed(
            table, epoch, delta_version=version, job=job, attempt=1, generation=1
        )
        opened.seal(job, 1, [SealRequest(table, epoch, version)])
    yield opened
    opened.close()


def test_a_snapshot_across_pipelines_pins_every_version_it_reads(catalog):
    with snapshot(catalog, ["a_words", "b_words"]) as snap:
        assert snap.epoch is None and snap.snapshot.aligned_at == T0 + timedelta(seconds=10)
        assert [(c.pipeline, c.epoch) for c in snap.snapshot.pipelines] == [
            ("team_a", 1),
            ("team_b", 2),
        ]
        assert dict(snap.versions) == {"a_words": 0, "b_words": 0}  # not a_words' version 1
        (pin,) = catalog.active_pins()
        assert dict(pin.versions) == {"a_words": 0, "b_words": 0}
        described = snap.describe()
        assert [p["epoch"] for p in described["pipelines"]] == [1, 2]
    assert catalog.active_pins() == []
    with snapshot(catalog, ["a_words", "b_words"], as_of_time=T0 + timedelta(seconds=25)) as snap:
        assert dict(snap.versions) == {"a_words": 1, "b_words": 0}
    with pytest.raises(NoAlignedCutError) as raised:
        snapshot(catalog, ["a_words", "b_words"], as_of_time=T0 + timedelta(seconds=5))
    assert raised.value.pipeline == "team_b"
    with pytest.raises(SnapshotRequestError):
        snapshot(catalog, ["a_words", "b_words"], as_of_epoch=1)
    assert catalog.active_pins() == []
