"""A real v1 catalog, built from the frozen v1 schema, upgrades in place to the current
schema (v2: pipelines, retention; v3: revisions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import catalog_v1_schema as v1
import pytest
import sqlalchemy as sa

from catalog import (
    PIPELINE_DEFAULT,
    SCHEMA_VERSION,
    EpochState,
    JobFailureRecord,
    JobSpec,
    RevisionState,
    SchemaVersionError,
    SealRequest,
    SqlCatalog,
    TableSpec,
    load_catalog,
)
from catalog import schema as catalog_schema
from catalog.connection import normalize_url

T0 = datetime(2024, 1, 1, tzinfo=UTC)  # in the past: v1 leases have expired


def build_v1_catalog(url: str) -> None:
    """raw <- ingest(words) -> count -> counts; epoch 1 COMMIT, epoch 2 half done."""
    engine = sa.create_engine(normalize_url(url)[1])
    with engine.begin() as conn:
        v1.metadata.create_all(conn)
        conn.execute(v1.meta_table.insert().values(key="schema_version", value="1"))
        conn.execute(
            v1.tables_table.insert(),
            [
                {
                    "name": name,
                    "location": f"/w/{name}",
                    "kind": kind,
                    "schema_json": None,
                    "partition_by": "[]",
                    "first_epoch": 1,
                    "writer_job": job,
                    "created_at": T0,
                }
                for name, kind, job in (("raw", "root", "ingest"), ("counts", "derived", "count"))
            ],
        )
        conn.execute(
            v1.jobs_table.insert(),
            [
                {
                    "name": name,
                    "output": output,
                    "mode": "append",
                    "source": source,
                    "keys": "[]",
                    "side_outputs": "[]",
                    "created_at": T0,
                }
                for name, output, source in (("ingest", "raw", "words"), ("count", "counts", None))
            ],
        )
        conn.execute(v1.job_inputs_table.insert().values(job="count", table_name="raw", position=0))
        conn.execute(
            v1.epochs_table.insert(),
            [{"id": e, "barrier_ts": T0 + timedelta(minutes=e), "created_at": T0} for e in (1, 2)],
        )
        conn.execute(
            v1.source_slices_table.insert().values(
                source="words", epoch=1, bounds='{"to":10}', catch_up=False, recorded_at=T0
            )
        )
        states = [
            ("raw", 1, "WRITTEN", 1, "ingest"),
            ("counts", 1, "WRITTEN", 1, "count"),
            ("raw", 2, "WRITTEN", 2, "ingest"),
        ]
        for table, epoch, state, version, job in states:
            row = {
                "table_name": table,
                "epoch": epoch,
                "state": state,
                "delta_version": version,
                "job": job,
                "attempt": 1,
                "generation": 3,
                "coalesced_into": None,
                "rows": 5,
                "reason": None,
            }
            conn.execute(v1.table_epochs_table.insert().values(updated_at=T0, **row))
            conn.execute(v1.epoch_history_table.insert().values(recorded_at=T0, **row))
        conn.execute(
            v1.commits_table.insert().values(
                epoch=1,
                versions='{"counts":1,"raw":1}',
                barrier_ts=T0 + timedelta(minutes=1),
                committed_at=T0,
            )
        )
        conn.execute(
            v1.leases_table.insert(),
            [
                {
                    "job": job,
                    "owner": "old-runner",
                    "generation": 3,
                    "expires_at": T0,
                    "acquired_at": T0,
                }
                for job in ("ingest", "count")
            ],
        )
        conn.execute(
            v1.validations_table.insert().values(
                table_name="raw", epoch=1, success=True, policy="warn", results="{}", recorded_at=T0
            )
        )
    engine.dispose()


def test_a_v1_catalog_is_refused_then_upgraded_in_place(shared_catalog_url):
    assert SCHEMA_VERSION == 3
    build_v1_catalog(shared_catalog_url)
    with pytest.raises(SchemaVersionError) as raised:
        load_catalog(shared_catalog_url)
    assert (raised.value.found, raised.value.expected) == (1, 3)
    old = SqlCatalog.open_for_upgrade(shared_catalog_url)
    assert old.upgrade() == 1
    old.close()

    catalog = load_catalog(shared_catalog_url)
    # Everything kept, in pipeline "default".
    assert [p.name for p in catalog.list_pipelines()] == [PIPELINE_DEFAULT]
    raw = catalog.get_table("raw")
    assert (raw.pipeline, raw.retired_at, raw.first_epoch, raw.writer_job) == (
        PIPELINE_DEFAULT,
        None,
        1,
        "ingest",
    )
    assert [(j.name, j.pipeline, j.inputs) for j in catalog.list_jobs()] == [
        ("count", PIPELINE_DEFAULT, ("raw",)),
        ("ingest", PIPELINE_DEFAULT, ()),
    ]
    assert [(e.id, e.pipeline) for e in catalog.epochs()] == [(1, "default"), (2, "default")]
    commit = catalog.get_commit(1)
    assert (commit.pipeline, dict(commit.versions)) == ("default", {"raw": 1, "counts": 1})
    assert catalog.latest_commit(pipeline="default") == commit
    assert catalog.latest_written(["raw", "counts"])["raw"].epoch == 2
    assert len(catalog.state_history("raw")) == 2
    assert catalog.get_slice("words", 1).bounds == {"to": 10}
    assert catalog.validations("raw")[0].policy == "warn"
    lease = catalog.get_lease("ingest")
    assert (lease.generation, lease.acquired_at) == (3, T0)
    assert catalog.max_attempt(["raw"], 2) == 1

    # The new features work on the upgraded catalog.
    e3 = catalog.open_epoch()
    assert (e3.id, e3.pipeline) == (3, PIPELINE_DEFAULT)
    count = catalog.acquire_lease("count", "new-runner", ttl_seconds=60)
    assert count.generation == 4
    manifest = catalog.seal("count", count.generation, [SealRequest("counts", 2, 7)])
    assert manifest.epoch == 2 and manifest.pipeline == PIPELINE_DEFAULT
    catalog.record_failure(
        JobFailureRecord(job="ingest", error_class="E", message="m", owner="o", epoch=3)
    )
    assert catalog.failures(job="ingest")[0].pipeline == PIPELINE_DEFAULT
    pin = catalog.create_pin(pipeline=None, epoch=2, versions={}, holder="r", ttl_seconds=60)
    assert catalog.expire_epochs([1, 2], rule="test") == [1]
    catalog.release_pin(pin)
    catalog.register_table(TableSpec("orders", "/w/orders", kind="root", pipeline="sales"))
    catalog.register_job(JobSpec("load", "orders", source="o", pipeline="sales"))
    assert catalog.open_epoch(pipeline="sales").id == 4
    catalog.retire_job("count")
    catalog.retire_table("counts")
    assert [t.name for t in catalog.list_tables()] == ["orders", "raw"]
    assert {s.table: s.pipeline for s in catalog.table_status()}["orders"] == "sales"
    revision = catalog.begin_revision(
        pipeline=PIPELINE_DEFAULT, tables=["raw"], from_epoch=1, reason="r", actor="a", owner="o"
    )
    assert catalog.discard_revision(revision.id, note="n").state == RevisionState.DISCARDED
    catalog.close()


def test_an_upgraded_catalog_has_the_schema_of_a_new_one(shared_catalog_url):
    build_v1_catalog(shared_catalog_url)
    SqlCatalog.open_for_upgrade(shared_catalog_url).upgrade()
    catalog = load_catalog(shared_catalog_url)
    with catalog._engine.connect() as conn:
        inspector = sa.inspect(conn)
        assert set(inspector.get_table_names()) >= set(catalog_schema.metadata.tables)
        for table in catalog_schema.metadata.sorted_tables:
            columns = {c["name"]: c for c in inspector.get_columns(table.name)}
            assert list(columns) == [c.name for c in table.columns], table.name
            for column in table.columns:
                assert columns[column.name]["nullable"] == column.nullable, (table, column)
            indexes = {i["name"] for i in inspector.get_indexes(table.name)}
            assert indexes >= {i.name for i in table.indexes}, table.name
        assert conn.execute(sa.select(catalog_schema.meta_table.c.value)).scalar_one() == str(
            SCHEMA_VERSION
        )
    catalog.close()


def test_state_rows_of_an_upgraded_catalog_read_back(shared_catalog_url):
    build_v1_catalog(shared_catalog_url)
    SqlCatalog.open_for_upgrade(shared_catalog_url).upgrade()
    catalog = load_catalog(shared_catalog_url)
    state = catalog.table_epoch("counts", 1)
    assert (state.state, state.delta_version, state.generation, state.rows) == (
        EpochState.WRITTEN,
        1,
        3,
        5,
    )
    catalog.close()
