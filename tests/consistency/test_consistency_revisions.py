"""Time travel across a recompute: a read as of a time before a revision's switch resolves
the states readers saw then, never a mix of the two revisions."""

from __future__ import annotations

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from consistency import HistoryAt, resolve_snapshot, switched_after


def test_a_read_as_of_before_a_switch_resolves_the_old_revision(tmp_path):
    catalog = load_catalog("memory://")
    for name in ("a", "b"):
        catalog.register_table(TableSpec(name, str(tmp_path / name)))
    catalog.register_job(JobSpec("ja", "a", source="src"))
    catalog.register_job(JobSpec("jb", "b", inputs=("a",)))
    leases = {j: catalog.acquire_lease(j, "me", ttl_seconds=60) for j in ("ja", "jb")}
    for epoch in (1, 2):
        catalog.open_epoch()
        for job, table in (("ja", "a"), ("jb", "b")):
            catalog.seal(job, leases[job].generation, [SealRequest(table, epoch, epoch)])
    revision = catalog.begin_revision(
        pipeline="default", tables=["a", "b"], from_epoch=1, reason="", actor="me", owner="o"
    )
    before = revision.started_at
    catalog.switch_revision(
        revision.id,
        generations={j: lease.generation for j, lease in leases.items()},
        seals=[SealRequest(t, 2, 10, first_epoch=1) for t in ("a", "b")],
    )
    now = resolve_snapshot(catalog, ["a", "b"])
    assert (now.epoch, dict(now.versions)) == (2, {"a": 10, "b": 10})
    assert switched_after(catalog.revisions(), before)
    then = HistoryAt(catalog, before)
    old = resolve_snapshot(then, ["a", "b"], as_of_time=before)
    assert (old.epoch, dict(old.versions)) == (2, {"a": 2, "b": 2})
    assert dict(resolve_snapshot(then, ["a", "b"], as_of_epoch=1).versions) == {"a": 1, "b": 1}
