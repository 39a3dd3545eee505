"""Tables, jobs and lineage: one writer per table, no cycles, names that cannot escape."""

from __future__ import annotations

import pytest

from catalog import (
    DuplicateWriterError,
    InvalidNameError,
    JobSpec,
    LineageCycleError,
    LineageEdge,
    RegistrationError,
    SealRequest,
    TableConflictError,
    TableSpec,
    UnknownJobError,
    UnknownTableError,
)

BAD_NAMES = ["../x", "a;DROP TABLE tables", "", "x" * 129, "1abc", "a b", "a-b", "é"]


def table(name: str, kind: str = "derived") -> TableSpec:
    return TableSpec(name, f"/warehouse/{name}", kind=kind)


def test_table_first_epoch_is_the_next_epoch_to_be_issued(catalog):
    assert catalog.register_table(table("early", "root")).first_epoch == 1
    for _ in range(3):
        catalog.open_epoch()
    late = catalog.register_table(table("late", "root"))
    assert late.first_epoch == 4
    assert late.created_at is not None and late.created_at.utcoffset().total_seconds() == 0
    assert catalog.get_table("late") == late


def test_registering_the_same_table_again_changes_nothing(catalog):
    first = catalog.register_table(TableSpec("t", "/w/t", kind="root", partition_by=("day",)))
    catalog.open_epoch()
    again = catalog.register_table(TableSpec("t", "/w/t", kind="root", partition_by=("day",)))
    assert again == first
    assert [t.name for t in catalog.list_tables()] == ["t"]


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        ("location", TableSpec("t", "/elsewhere/t", kind="root")),
        ("kind", TableSpec("t", "/w/t", kind="derived")),
        ("partition_by", TableSpec("t", "/w/t", kind="root", partition_by=("day",))),
    ],
)
def test_registering_a_table_with_another_definition_is_refused(catalog, field, spec):
    catalog.register_table(TableSpec("t", "/w/t", kind="root"))
    with pytest.raises(TableConflictError) as raised:
        catalog.register_table(spec)
    assert raised.value.table == "t" and raised.value.field == field
    assert catalog.get_table("t").location == "/w/t"


def test_table_schema_is_recorded_once_known(catalog):
    catalog.register_table(table("t"))
    assert catalog.get_table("t").schema_json is None
    catalog.update_table_schema("t", '{"type":"struct","fields":[]}')
    assert catalog.get_table("t").schema_json == '{"type":"struct","fields":[]}'
    with pytest.raises(UnknownTableError):
        catalog.update_table_schema("missing", "{}")


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_names_are_refused_everywhere(catalog, name):
    with pytest.raises(InvalidNameError) as raised:
        catalog.register_table(table(name))
    assert raised.value.kind == "table" and raised.value.name == name
    catalog.register_table(table("good"))
    catalog.register_table(table("other"))
    with pytest.raises(InvalidNameError) as raised:
        catalog.register_job(JobSpec(name, "good"))
    assert raised.value.kind == "job"
    with pytest.raises(InvalidNameError):
        catalog.register_job(JobSpec("j", "good", inputs=(name,)))
    with pytest.raises(InvalidNameError):
        catalog.register_job(JobSpec("j", name))
    with pytest.raises(InvalidNameError) as raised:
        catalog.register_job(JobSpec("j", "good", source=name))
    assert raised.value.kind == "source"
    epoch = catalog.open_epoch()
    with pytest.raises(InvalidNameError):
        catalog.record_slice(name, epoch.id, {"offset": 1}, job="j", generation=1)
    assert [t.name for t in catalog.list_tables()] == ["good", "other"]
    assert catalog.list_jobs() == []


def test_invalid_kind_and_mode_are_refused(catalog):
    with pytest.raises(RegistrationError, match="kind"):
        catalog.register_table(TableSpec("t", "/w/t", kind="view"))  # type: ignore[arg-type]
    catalog.register_table(table("t"))
    with pytest.raises(RegistrationError, match="write mode"):
        catalog.register_job(JobSpec("j", "t", mode="upsert"))  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match="location"):
        catalog.register_table(TableSpec("u", ""))


@pytest.mark.parametrize("missing", ["output", "input", "side_output"])
def test_a_job_over_unknown_tables_is_refused_naming_job_and_table(catalog, missing):
    catalog.register_table(table("known"))
    catalog.register_table(table("out"))
    spec = {
        "output": JobSpec("j", "ghost", inputs=("known",)),
        "input": JobSpec("j", "out", inputs=("known", "ghost")),
        "side_output": JobSpec("j", "out", inputs=("known",), side_outputs=("ghost",)),
    }[missing]
    with pytest.raises(UnknownTableError) as raised:
        catalog.register_job(spec)
    assert (raised.value.table, raised.value.job) == ("ghost", "j")
    assert "'j'" in str(raised.value) and "'ghost'" in str(raised.value)
    with pytest.raises(UnknownJobError):
        catalog.get_job("j")
    assert catalog.get_table("out").writer_job is None


def test_a_second_writer_of_a_table_is_refused_naming_both_jobs(catalog):
    for name in ("src", "out", "errs"):
        catalog.register_table(table(name))
    catalog.register_job(JobSpec("first", "out", inputs=("src",), side_outputs=("errs",)))
    with pytest.raises(DuplicateWriterError) as raised:
        catalog.register_job(JobSpec("second", "out", inputs=("src",)))
    error = raised.value
    assert (error.table, error.existing_job, error.new_job) == ("out", "first", "second")
    assert "'out'" in str(error) and "'first'" in str(error) and "'second'" in str(error)
    catalog.register_table(table("out2"))
    with pytest.raises(DuplicateWriterError) as raised:
        catalog.register_job(JobSpec("second", "out2", inputs=("src",), side_outputs=("errs",)))
    assert raised.value.table == "errs"
    assert [j.name for j in catalog.list_jobs()] == ["first"]
    assert catalog.get_table("out2").writer_job is None


def test_a_job_closing_a_cycle_is_refused_with_the_cycle_path(catalog):
    for name in ("a", "b", "c"):
        catalog.register_table(table(name))
    catalog.register_job(JobSpec("j1", "b", inputs=("a",)))
    catalog.register_job(JobSpec("j2", "c", inputs=("b",)))
    with pytest.raises(LineageCycleError) as raised:
        catalog.register_job(JobSpec("j3", "a", inputs=("c",)))
    assert raised.value.job == "j3"
    assert raised.value.cycle == ("j3", "a", "j1", "b", "j2", "c", "j3")
    assert "j3 -> a -> j1 -> b -> j2 -> c -> j3" in str(raised.value)
    with pytest.raises(UnknownJobError):
        catalog.get_job("j3")
    assert catalog.get_table("a").writer_job is None


def test_a_job_reading_its_own_output_is_a_cycle(catalog):
    catalog.register_table(table("x"))
    with pytest.raises(LineageCycleError) as raised:
        catalog.register_job(JobSpec("loop", "x", inputs=("x",)))
    assert raised.value.cycle == ("loop", "x", "loop")


def test_a_cycle_through_a_side_output_is_refused(catalog):
    for name in ("a", "b", "errs"):
        catalog.register_table(table(name))
    catalog.register_job(JobSpec("j1", "b", inputs=("a",), side_outputs=("errs",)))
    with pytest.raises(LineageCycleError) as raised:
        catalog.register_job(JobSpec("j2", "a", inputs=("errs",)))
    assert raised.value.cycle == ("j2", "a", "j1", "errs", "j2")


def test_a_diamond_is_not_a_cycle(catalog):
    for name in ("a", "b", "c", "d"):
        catalog.register_table(table(name))
    catalog.register_job(JobSpec("jb", "b", inputs=("a",)))
    catalog.register_job(JobSpec("jc", "c", inputs=("a",)))
    info = catalog.register_job(JobSpec("jd", "d", inputs=("b", "c")))
    assert info.inputs == ("b", "c")


def test_registering_the_same_job_again_is_a_no_op(catalog):
    catalog.register_table(table("src", "root"))
    catalog.register_table(table("out"))
    spec = JobSpec("j", "out", mode="merge", inputs=("src",), keys=("id",))
    first = catalog.register_job(spec)
    again = catalog.register_job(spec)
    assert again == first
    assert first.created_at is not None
    assert catalog.get_job("j") == first
    assert (first.mode, first.inputs, first.keys) == ("merge", ("src",), ("id",))


def test_a_job_may_be_redefined_if_the_new_definition_passes_the_checks(catalog):
    for name in ("a", "b", "out", "other"):
        catalog.register_table(table(name))
    catalog.register_job(JobSpec("j", "out", inputs=("a",)))
    changed = catalog.register_job(JobSpec("j", "other", inputs=("a", "b")))
    assert changed.inputs == ("a", "b") and changed.output == "other"
    assert catalog.get_table("out").writer_job is None
    assert catalog.get_table("other").writer_job == "j"
    catalog.register_job(JobSpec("k", "out", inputs=("b",)))
    with pytest.raises(LineageCycleError):
        catalog.register_job(JobSpec("j", "other", inputs=("a", "b", "other")))
    assert catalog.get_job("j").inputs == ("a", "b")


def test_derived_output_starts_at_the_newest_first_epoch_of_its_inputs(catalog):
    catalog.register_table(table("old", "root"))
    for _ in range(4):
        catalog.open_epoch()
    catalog.register_table(table("mid", "root"))
    catalog.open_epoch()
    assert catalog.register_table(table("late")).first_epoch == 6
    catalog.register_table(table("errs", "rejects"))
    catalog.register_job(JobSpec("j", "late", inputs=("old", "mid"), side_outputs=("errs",)))
    assert catalog.get_table("late").first_epoch == 5
    assert catalog.get_table("errs").first_epoch == 5
    catalog.register_table(table("later"))
    catalog.register_job(JobSpec("k", "later", inputs=("old",)))
    assert catalog.get_table("later").first_epoch == 1


def test_first_epoch_does_not_move_once_the_table_has_epoch_states(catalog):
    catalog.register_table(table("a", "root"))
    catalog.open_epoch()
    catalog.open_epoch()
    catalog.register_table(table("b", "root"))
    catalog.register_table(table("out"))
    catalog.register_job(JobSpec("j", "out", inputs=("b",)))
    assert catalog.get_table("out").first_epoch == 3
    epoch = catalog.open_epoch()
    lease = catalog.acquire_lease("j", "me", ttl_seconds=60)
    catalog.record_processed("out", epoch.id, delta_version=0, job="j", attempt=1, generation=1)
    catalog.register_job(JobSpec("j", "out", inputs=("a", "b")))
    assert catalog.get_table("out").first_epoch == 3
    assert lease.generation == 1


def test_a_side_output_an_existing_job_gains_starts_after_its_sealed_epochs(catalog):
    """A gate that gains a quarantine table: the job's history stays, and the new table
    holds back no COMMIT of the epochs the job sealed before it existed."""
    catalog.register_table(table("src", "root"))
    catalog.register_table(table("out"))
    catalog.register_table(table("slow"))
    catalog.register_job(JobSpec("f", "src", source="files"))
    catalog.register_job(JobSpec("j", "out", inputs=("src",)))
    catalog.register_job(JobSpec("k", "slow", inputs=("src",)))
    leases = {job: catalog.acquire_lease(job, "me", ttl_seconds=60) for job in "fjk"}

    def seal(job: str, tables: tuple[str, ...], epoch: int):
        generation = leases[job].generation
        for name in tables:
            catalog.record_processed(
                name, epoch, delta_version=epoch, job=job, attempt=1, generation=generation
            )
        return catalog.seal(job, generation, [SealRequest(t, epoch, epoch) for t in tables])

    epochs = [catalog.open_epoch().id for _ in range(3)]
    for epoch in epochs[:2]:
        seal("f", ("src",), epoch)
        seal("j", ("out",), epoch)
    catalog.register_table(table("out_quarantine", "quarantine"))
    catalog.register_job(JobSpec("j", "out", inputs=("src",), side_outputs=("out_quarantine",)))
    assert catalog.get_table("out_quarantine").first_epoch == epochs[2]
    assert catalog.get_table("out_quarantine").writer_job == "j"
    assert catalog.get_job("j").side_outputs == ("out_quarantine",)
    assert [e.epoch for e in catalog.table_epochs("out")] == epochs[:2]  # history kept
    # The lagging job seals the earlier epochs: their COMMIT needs no quarantine state.
    assert seal("k", ("slow",), epochs[0]).versions == {"src": 1, "out": 1, "slow": 1}
    assert seal("k", ("slow",), epochs[1]) is not None
    seal("f", ("src",), epochs[2])
    seal("k", ("slow",), epochs[2])
    manifest = seal("j", ("out", "out_quarantine"), epochs[2])
    assert manifest is not None and "out_quarantine" in manifest.versions
    # A job that never sealed keeps catching up from its inputs' first epoch.
    catalog.register_table(table("late"))
    catalog.register_table(table("late_errs", "rejects"))
    catalog.register_job(JobSpec("m", "late", inputs=("src",)))
    catalog.register_job(JobSpec("m", "late", inputs=("src",), side_outputs=("late_errs",)))
    assert catalog.get_table("late_errs").first_epoch == 1


def test_lineage_lists_every_edge(catalog):
    for name, kind in (("raw", "root"), ("errs", "rejects"), ("agg", "derived")):
        catalog.register_table(table(name, kind))
    catalog.register_job(JobSpec("ingest", "raw", source="topic", side_outputs=("errs",)))
    catalog.register_job(JobSpec("agg_job", "agg", inputs=("raw",)))
    assert set(catalog.lineage()) == {
        LineageEdge("topic", "ingest", "source"),
        LineageEdge("ingest", "raw", "output"),
        LineageEdge("ingest", "errs", "output"),
        LineageEdge("raw", "agg_job", "input"),
        LineageEdge("agg_job", "agg", "output"),
    }
    assert [j.name for j in catalog.list_jobs()] == ["agg_job", "ingest"]
    assert catalog.get_table("errs").writer_job == "ingest"


def test_unknown_lookups_raise(catalog):
    with pytest.raises(UnknownTableError) as raised:
        catalog.get_table("nope")
    assert raised.value.table == "nope"
    with pytest.raises(UnknownJobError) as raised_job:
        catalog.get_job("nope")
    assert raised_job.value.job == "nope"
