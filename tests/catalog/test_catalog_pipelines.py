"""Several pipelines in one catalog: own epochs, own COMMITs, retirement and revival."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from catalog import (
    PIPELINE_DEFAULT,
    EpochState,
    ForeignEpochError,
    InvalidNameError,
    JobSpec,
    NameOwnedError,
    PipelineMismatchError,
    RetiredError,
    RetirementBlockedError,
    SealRequest,
    TableSpec,
    UnknownPipelineError,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
W, C = EpochState.WRITTEN, EpochState.COALESCED


@pytest.fixture
def two(catalog):
    """Pipeline "default": raw -> counts. Pipeline "sales": orders -> totals."""
    catalog.register_table(TableSpec("raw", "/w/raw", kind="root"))
    catalog.register_table(TableSpec("counts", "/w/counts"))
    catalog.register_job(JobSpec("ingest", "raw", source="words"))
    catalog.register_job(JobSpec("count", "counts", inputs=("raw",)))
    catalog.register_table(TableSpec("orders", "/w/orders", kind="root", pipeline="sales"))
    catalog.register_table(TableSpec("totals", "/w/totals", pipeline="sales"))
    catalog.register_job(JobSpec("load", "orders", source="kafka_orders", pipeline="sales"))
    catalog.register_job(JobSpec("total", "totals", inputs=("orders",), pipeline="sales"))
    for job in ("ingest", "count", "load", "total"):
        catalog.acquire_lease(job, "runner", ttl_seconds=60)
    return catalog


def seal(catalog, job, table, epoch, version, **kw):
    return catalog.seal(job, 1, [SealRequest(table, epoch, version, **kw)])


def test_pipelines_are_created_by_registration(two):
    assert [p.name for p in two.list_pipelines()] == [PIPELINE_DEFAULT, "sales"]
    assert all(p.created_at is not None for p in two.list_pipelines())
    assert two.get_table("orders").pipeline == "sales"
    assert two.get_table("raw").pipeline == PIPELINE_DEFAULT
    assert two.get_job("total").pipeline == "sales"
    assert [t.name for t in two.list_tables(pipeline="sales")] == ["orders", "totals"]
    assert [j.name for j in two.list_jobs(pipeline="sales")] == ["load", "total"]
    with pytest.raises(InvalidNameError) as raised:
        two.register_table(TableSpec("x", "/w/x", pipeline="no good"))
    assert raised.value.kind == "pipeline"


def test_a_fresh_catalog_has_the_default_pipeline(catalog):
    assert [p.name for p in catalog.list_pipelines()] == [PIPELINE_DEFAULT]
    assert catalog.open_epoch().pipeline == PIPELINE_DEFAULT
    with pytest.raises(UnknownPipelineError) as raised:
        catalog.open_epoch(pipeline="nowhere")
    assert raised.value.pipeline == "nowhere"


def test_a_table_cannot_move_to_another_pipeline(two):
    with pytest.raises(NameOwnedError) as raised:
        two.register_table(TableSpec("raw", "/w/raw", kind="root", pipeline="sales"))
    assert raised.value.conflicts == (("table", "raw", PIPELINE_DEFAULT),)


def test_a_job_may_only_use_tables_of_its_own_pipeline(two):
    with pytest.raises(PipelineMismatchError) as raised:
        two.register_job(JobSpec("mix", "totals", inputs=("orders", "raw"), pipeline="sales"))
    error = raised.value
    assert (error.job, error.table, error.role) == ("mix", "raw", "input")
    assert (error.job_pipeline, error.table_pipeline) == ("sales", PIPELINE_DEFAULT)
    for name in ("'mix'", "'raw'", "'sales'", "'default'", "source"):
        assert name in str(error)
    two.register_table(TableSpec("joined", "/w/joined"))
    with pytest.raises(PipelineMismatchError) as raised:
        two.register_job(JobSpec("cross", "joined", inputs=("orders",)))
    assert raised.value.table == "orders" and raised.value.role == "input"
    with pytest.raises(PipelineMismatchError) as raised:
        two.register_job(JobSpec("writes_foreign", "joined", source="s", pipeline="sales"))
    assert raised.value.role == "output"
    assert two.get_table("joined").writer_job is None


def test_epochs_are_one_sequence_but_belong_to_a_pipeline(two):
    a = two.open_epoch(T0)
    b = two.open_epoch(T0 + timedelta(minutes=1), pipeline="sales")
    c = two.open_epoch(T0 + timedelta(minutes=2))
    d = two.open_epoch(T0 + timedelta(minutes=3), pipeline="sales")
    assert [e.id for e in (a, b, c, d)] == [1, 2, 3, 4]
    assert (a.pipeline, b.pipeline) == (PIPELINE_DEFAULT, "sales")
    assert two.get_epoch(2) == b
    assert two.latest_epoch() == d
    assert two.latest_epoch(pipeline=PIPELINE_DEFAULT) == c
    assert two.latest_epoch(pipeline="nowhere") is None
    assert [e.id for e in two.epochs(pipeline="sales")] == [2, 4]
    assert [e.id for e in two.epochs(after=1, up_to=3, pipeline=PIPELINE_DEFAULT)] == [3]
    assert two.epoch_at_or_before(T0 + timedelta(minutes=2, seconds=30), pipeline="sales") == b
    assert two.epoch_at_or_before(T0 + timedelta(minutes=2, seconds=30)) == c
    assert two.epoch_at_or_before(T0, pipeline="sales") is None


def test_barrier_timestamps_never_decrease_within_a_pipeline_only(two):
    two.open_epoch(T0 + timedelta(hours=1), pipeline="sales")
    mine = two.open_epoch(T0)
    assert mine.barrier_ts == T0  # another pipeline's clock does not move ours
    assert two.open_epoch(T0 - timedelta(hours=1)).barrier_ts == T0
    late = two.open_epoch(T0, pipeline="sales")
    assert late.barrier_ts == T0 + timedelta(hours=1)


def test_a_table_only_takes_states_at_its_pipelines_epochs(two):
    mine = two.open_epoch().id
    theirs = two.open_epoch(pipeline="sales").id
    with pytest.raises(ForeignEpochError) as raised:
        two.record_processed("raw", theirs, delta_version=0, job="ingest", attempt=1, generation=1)
    error = raised.value
    assert (error.epoch, error.epoch_pipeline, error.pipeline, error.table) == (
        theirs,
        "sales",
        PIPELINE_DEFAULT,
        "raw",
    )
    with pytest.raises(ForeignEpochError):
        seal(two, "ingest", "raw", theirs, 0)
    with pytest.raises(ForeignEpochError):
        two.record_slice("kafka_orders", mine, {"to": 1}, job="load", generation=1)
    with pytest.raises(ForeignEpochError):
        two.record_resolution("orders", mine, action="ACCEPT", actor="a", reason="r")
    assert two.table_epochs("raw") == []


def test_commit_is_per_pipeline(two):
    d1 = two.open_epoch().id
    s1 = two.open_epoch(pipeline="sales").id
    assert seal(two, "ingest", "raw", d1, 1) is None
    default_commit = seal(two, "count", "counts", d1, 2)
    assert default_commit.pipeline == PIPELINE_DEFAULT
    assert dict(default_commit.versions) == {"raw": 1, "counts": 2}
    seal(two, "load", "orders", s1, 5)
    sales_commit = seal(two, "total", "totals", s1, 6)
    assert (sales_commit.epoch, sales_commit.pipeline) == (s1, "sales")
    assert dict(sales_commit.versions) == {"orders": 5, "totals": 6}
    assert two.get_commit(d1) == default_commit
    assert two.latest_commit() == sales_commit
    assert two.latest_commit(pipeline=PIPELINE_DEFAULT) == default_commit
    assert two.latest_commit(pipeline="sales") == sales_commit
    assert two.latest_commit(pipeline="nowhere") is None


def test_a_backlog_batch_coalesces_only_its_pipelines_epochs(two):
    d1 = two.open_epoch().id
    s2 = two.open_epoch(pipeline="sales").id
    d3 = two.open_epoch().id
    s4 = two.open_epoch(pipeline="sales").id
    d5 = two.open_epoch().id
    seal(two, "ingest", "raw", d1, 1)
    seal(two, "ingest", "raw", d3, 2)
    seal(two, "ingest", "raw", d5, 3)
    manifest = seal(two, "count", "counts", d5, 9, first_epoch=d1)
    states = {t.epoch: t.state for t in two.table_epochs("counts")}
    assert states == {d1: C, d3: C, d5: W}
    assert manifest.epoch == d5
    assert two.get_commit(d1) is None and two.get_commit(d3) is None
    for epoch in (s2, s4):
        assert two.table_epoch("counts", epoch) is None


def test_retiring_a_job_needs_its_readers_retired_first(two):
    with pytest.raises(RetirementBlockedError) as raised:
        two.retire_job("ingest")
    error = raised.value
    assert (error.kind, error.name, error.blockers) == ("job", "ingest", ("count",))
    assert "'count'" in str(error) and "'raw'" in str(error)
    retired = two.retire_job("count")
    assert retired.retired_at is not None
    assert two.retire_job("count") == retired  # idempotent
    two.retire_job("ingest")
    assert [j.name for j in two.list_jobs()] == ["load", "total"]
    assert [j.name for j in two.list_jobs(include_retired=True)] == [
        "count",
        "ingest",
        "load",
        "total",
    ]
    assert all(edge.dst != "count" and edge.src != "count" for edge in two.lineage())


def test_retiring_a_table_needs_its_writer_and_readers_retired(two):
    with pytest.raises(RetirementBlockedError) as raised:
        two.retire_table("counts")
    assert raised.value.blockers == ("count",) and "writer" in str(raised.value)
    two.register_table(TableSpec("lookup", "/w/lookup", kind="root"))
    two.register_table(TableSpec("enriched", "/w/enriched"))
    two.register_job(JobSpec("enrich", "enriched", inputs=("raw", "lookup")))
    with pytest.raises(RetirementBlockedError) as raised:
        two.retire_table("lookup")  # no writer, but an active reader
    assert raised.value.blockers == ("enrich",)
    two.retire_job("enrich")
    assert two.retire_table("lookup").retired_at is not None
    two.retire_job("count")
    info = two.retire_table("counts")
    assert info.retired_at is not None and two.get_table("counts") == info
    assert "counts" not in [t.name for t in two.list_tables()]
    assert "counts" in [t.name for t in two.list_tables(include_retired=True)]


def test_a_retired_table_keeps_its_history_and_no_longer_holds_back_commits(two):
    d1, d2 = two.open_epoch().id, two.open_epoch().id
    seal(two, "ingest", "raw", d1, 1)
    seal(two, "count", "counts", d1, 1)
    two.retire_job("count")
    two.retire_table("counts")
    assert [t.epoch for t in two.table_epochs("counts")] == [d1]
    assert two.latest_written(["counts"])["counts"].epoch == d1
    manifest = seal(two, "ingest", "raw", d2, 2)
    assert manifest is not None and dict(manifest.versions) == {"raw": 2}


def test_registering_again_revives(two):
    two.retire_job("count")
    two.retire_table("counts")
    with pytest.raises(RetiredError) as raised:
        two.register_job(JobSpec("count", "counts", inputs=("raw",)))
    assert (raised.value.kind, raised.value.name, raised.value.job) == ("table", "counts", "count")
    revived_table = two.register_table(TableSpec("counts", "/w/counts"))
    assert revived_table.retired_at is None
    revived_job = two.register_job(JobSpec("count", "counts", inputs=("raw",)))
    assert revived_job.retired_at is None
    assert two.get_job("count").retired_at is None
    assert "count" in [j.name for j in two.list_jobs()]
    assert two.acquire_lease("count", "runner", ttl_seconds=60).generation == 1


def _team(catalog, pipeline, table, *, job="ingest", source="files", inputs=()):
    """A pipeline of one root table written by ``job`` from ``source`` (or from inputs)."""
    kind = "derived" if inputs else "root"
    return catalog.register_pipeline(
        pipeline,
        [TableSpec(table, f"/w/{table}", kind=kind)],
        [JobSpec(job, table, source=None if inputs else source, inputs=inputs)],
    )


def test_a_pipeline_cannot_register_names_another_pipeline_owns(catalog):
    _team(catalog, "team_a", "a_words")
    before = (catalog.list_pipelines(), catalog.list_tables(), catalog.list_jobs())
    with pytest.raises(NameOwnedError) as raised:
        _team(catalog, "team_b", "b_words")
    error = raised.value
    assert (error.pipeline, error.owners) == ("team_b", ("team_a",))
    assert error.conflicts == (("job", "ingest", "team_a"), ("source", "files", "team_a"))
    for words in ("'team_a'", "'team_b'", "'ingest'", "'files'", "Rename", "retire pipeline"):
        assert words in str(error)
    assert (catalog.list_pipelines(), catalog.list_tables(), catalog.list_jobs()) == before
    specs = ([TableSpec("b_words", "/w/b_words", kind="root")], [JobSpec("ingest", "b_words")])
    with pytest.raises(NameOwnedError):  # the same refusal, read-only, before anything runs
        catalog.check_registration("team_b", *specs)
    # Renamed, it registers; registering it again changes nothing.
    _team(catalog, "team_b", "b_words", job="ingest_b", source="files_b")
    _team(catalog, "team_b", "b_words", job="ingest_b", source="files_b")
    assert {j.name: j.pipeline for j in catalog.list_jobs()} == {
        "ingest": "team_a",
        "ingest_b": "team_b",
    }
    # One by one as well: a job or a source name of another pipeline is refused.
    catalog.register_table(TableSpec("c_words", "/w/c_words", kind="root", pipeline="team_c"))
    with pytest.raises(NameOwnedError):
        catalog.register_job(JobSpec("other", "c_words", source="files", pipeline="team_c"))
    with pytest.raises(NameOwnedError):
        catalog.register_job(JobSpec("ingest", "c_words", source="c", pipeline="team_c"))


def test_a_source_whose_slices_another_pipeline_recorded_stays_its(catalog):
    _team(catalog, "team_a", "a_words", job="old")
    lease = catalog.acquire_lease("old", "runner", ttl_seconds=60)
    epoch = catalog.open_epoch(pipeline="team_a")
    catalog.record_slice("files", epoch.id, {"files": ["1.txt"]}, job="old", generation=1)
    catalog.release_lease(lease)
    # The job of team_a now reads another source; its old slices still name "files".
    _team(catalog, "team_a", "a_words", job="old", source="files_v2")
    with pytest.raises(NameOwnedError) as raised:
        _team(catalog, "team_b", "b_words", job="new", source="files")
    assert raised.value.conflicts == (("source", "files", "team_a"),)


def test_a_table_of_another_pipeline_is_no_input(catalog):
    _team(catalog, "team_a", "a_words")
    with pytest.raises(PipelineMismatchError) as raised:
        catalog.register_pipeline(
            "team_b",
            [
                TableSpec("b_words", "/w/b_words", kind="root"),
                TableSpec("b_joined", "/w/b_joined"),
            ],
            [
                JobSpec("ingest_b", "b_words", source="files_b"),
                JobSpec("join", "b_joined", inputs=("b_words", "a_words")),
            ],
        )
    assert "DeltaTableSource('a_words', path='/w/a_words')" in str(raised.value)
    with pytest.raises(PipelineMismatchError):
        catalog.check_registration(
            "team_b", [TableSpec("b", "/w/b")], [JobSpec("join", "b", inputs=("a_words",))]
        )
    assert (raised.value.table, raised.value.table_pipeline) == ("a_words", "team_a")
    assert [t.name for t in catalog.list_tables()] == ["a_words"]
    assert [p.name for p in catalog.list_pipelines()] == [PIPELINE_DEFAULT, "team_a"]


def test_retiring_a_pipeline_removes_its_registration(catalog):
    _team(catalog, "team_a", "a_words")
    _team(catalog, "team_b", "b_words", job="ingest_b", source="files_b")
    lease = catalog.acquire_lease("ingest", "runner", ttl_seconds=60)
    epoch = catalog.open_epoch(pipeline="team_a")
    catalog.open_epoch(pipeline="team_b")
    catalog.record_slice("files", epoch.id, {"files": ["1.txt"]}, job="ingest", generation=1)
    catalog.record_processed(
        "a_words", epoch.id, delta_version=0, job="ingest", attempt=1, generation=1
    )
    catalog.seal("ingest", 1, [SealRequest("a_words", epoch.id, 0)])
    catalog.create_tag("keep", epoch=epoch.id, versions={"a_words": 0}, pipeline="team_a")
    with pytest.raises(RetirementBlockedError) as raised:
        catalog.retire_pipeline("team_a")
    assert raised.value.blockers == ("ingest",) and "runner" in str(raised.value)
    assert catalog.get_job("ingest").pipeline == "team_a"
    catalog.release_lease(lease)
    retired = catalog.retire_pipeline("team_a")
    assert (retired.pipeline, retired.jobs, retired.sources, retired.epochs) == (
        "team_a",
        ("ingest",),
        ("files",),
        1,
    )
    assert [t.location for t in retired.tables] == ["/w/a_words"]
    assert [p.name for p in catalog.list_pipelines()] == [PIPELINE_DEFAULT, "team_b"]
    assert [t.name for t in catalog.list_tables(include_retired=True)] == ["b_words"]
    assert [j.name for j in catalog.list_jobs(include_retired=True)] == ["ingest_b"]
    assert catalog.get_slice("files", epoch.id) is None and catalog.list_tags() == []
    assert catalog.latest_commit(pipeline="team_a") is None
    # Its epoch ids are never issued again; its names are free.
    newest = catalog.latest_epoch().id
    _team(catalog, "team_c", "a_words")
    assert catalog.open_epoch(pipeline="team_c").id == newest + 1
    with pytest.raises(UnknownPipelineError):
        catalog.retire_pipeline("team_a")
