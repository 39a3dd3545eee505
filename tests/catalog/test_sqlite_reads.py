"""The SQLite snapshot reads (catalog.sqlite_reads) answer as the SQL catalog does.

Every read a snapshot makes is asked of both, over one history built through the SQL
catalog (two pipelines, every epoch state, a retired table, an expired epoch, a tag, a
revision), for every table subset, epoch, timestamp and pipeline that can tell them
apart. Pins go both ways: one made without SQLAlchemy protects its epoch from expiry as
one made by the SQL catalog does, under the same write lock.
"""

from __future__ import annotations

import inspect
import sqlite3
import threading
import time
from datetime import timedelta
from itertools import combinations

import pytest

import catalog.sqlite_reads as sqlite_reads
from catalog import (
    CatalogUnavailableError,
    EpochExpiredError,
    JobSpec,
    PinExpiredError,
    SchemaVersionError,
    SealRequest,
    SqlCatalog,
    TableSpec,
    UnknownEpochError,
    UnknownRevisionError,
    UnknownTableError,
    UnknownTagError,
    load_catalog,
    open_for_reads,
)
from catalog.reads import CatalogReads
from catalog.sqlite_reads import SqliteReads
from consistency import (
    EpochHistory,
    EpochNotReadableError,
    HistoryAt,
    Level,
    resolve_snapshot,
    switched_after,
)
from consistency.revisions import RevisionStore

TABLES = ("raw", "counts", "solo", "old")


@pytest.fixture
def built(tmp_path):
    """The SQL catalog over a history, and the SQLite reads of the same file."""
    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    sql = load_catalog(url)
    assert isinstance(sql, SqlCatalog)
    for name, kind in (("raw", "root"), ("counts", "derived"), ("old", "derived")):
        sql.register_table(TableSpec(name, str(tmp_path / name), kind=kind))
    sql.register_table(TableSpec("solo", str(tmp_path / "solo"), kind="root", pipeline="other"))
    sql.register_job(JobSpec("ingest", "raw", source="words"))
    sql.register_job(JobSpec("count", "counts", mode="overwrite", inputs=("raw",)))
    sql.register_job(JobSpec("solo_ingest", "solo", source="s2", pipeline="other"))
    sql.retire_table("old")
    ingest = sql.acquire_lease("ingest", "a", ttl_seconds=60).generation
    count = sql.acquire_lease("count", "a", ttl_seconds=60).generation
    solo = sql.acquire_lease("solo_ingest", "a", ttl_seconds=60).generation

    e1, e2, e3, e4 = (sql.open_epoch().id for _ in range(4))
    o1 = sql.open_epoch(pipeline="other").id
    e5 = sql.open_epoch().id
    sql.seal("ingest", ingest, [SealRequest("raw", e1, 0)])
    sql.seal("count", count, [SealRequest("counts", e1, 0)])
    sql.seal("ingest", ingest, [SealRequest("raw", e3, 1, first_epoch=e2)])  # e2 COALESCED
    sql.seal("count", count, [SealRequest("counts", e3, 1, first_epoch=e2)])
    sql.record_processed("raw", e4, delta_version=2, job="ingest", attempt=1, generation=ingest)
    sql.mark_rolled_back("raw", e4, job="ingest", generation=ingest, reason="test")
    sql.record_processed("raw", e5, delta_version=3, job="ingest", attempt=2, generation=ingest)
    sql.seal("ingest", ingest, [SealRequest("raw", e5, 3, attempt=2)])
    sql.record_processed("counts", e5, delta_version=2, job="count", attempt=1, generation=count)
    sql.seal("solo_ingest", solo, [SealRequest("solo", o1, 0)])
    sql.expire_epochs([e1], rule="keep-last-2")
    sql.create_tag("t3", epoch=e3, versions={"raw": 1, "counts": 1}, pipeline="default")
    fixed = sql.begin_revision(
        pipeline="default", tables=["counts"], from_epoch=e3, reason="fix", actor="me", owner="x"
    )
    sql.switch_revision(
        fixed.id, generations={"count": count}, seals=[SealRequest("counts", e5, 7, first_epoch=e3)]
    )
    sql.begin_revision(
        pipeline="default", tables=["raw"], from_epoch=e5, reason="again", actor="me", owner="x"
    )
    reads = SqliteReads.open(tmp_path / "catalog.sqlite")
    assert reads is not None
    yield sql, reads, [e1, e2, e3, e4, o1, e5]
    reads.close()
    sql.close()


def outcome(call):
    """What a call gives: its value, or its error's type and message."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the error is the answer compared
        return (type(exc), str(exc))


def same(sql, reads, method, *args, **kwargs):
    expected = outcome(lambda: getattr(sql, method)(*args, **kwargs))
    got = outcome(lambda: getattr(reads, method)(*args, **kwargs))
    assert got == expected, (method, args, kwargs)
    return expected


def assert_same_reads(sql, reads, tables, epochs):
    """Every read of a snapshot, for every subset of ``tables`` (and an unknown one), every
    epoch of ``epochs`` and timestamps at, just before and just after their barriers."""
    subsets = [list(c) for n in (1, 2, 4) for c in combinations((*tables, "nope"), n)]
    for include_retired in (False, True):
        for pipeline in (None, "default", "other", "nope"):
            same(sql, reads, "list_tables", include_retired=include_retired, pipeline=pipeline)
    for name in (*tables, "nope"):
        same(sql, reads, "get_table", name)
    for tables in subsets:
        same(sql, reads, "latest_written", tables)
        for bound in (0, *epochs, 999):
            same(sql, reads, "latest_written", tables, at_or_before=bound)
        for epoch in (*epochs, 999):
            same(sql, reads, "states_at", tables, epoch)
    same(sql, reads, "latest_written", [])
    same(sql, reads, "states_at", [], epochs[0])
    for epoch in (*epochs, 0, 999):
        same(sql, reads, "get_epoch", epoch)
        same(sql, reads, "expiry_of", epoch)
    barriers = [sql.get_epoch(e).barrier_ts for e in epochs]
    step = timedelta(microseconds=1)
    for ts in {b + d for b in barriers for d in (-step, timedelta(0), step)}:
        for pipeline in (None, "default", "other", "nope"):
            same(sql, reads, "epoch_at_or_before", ts, pipeline=pipeline)
    for name in ("t3", "nope"):
        same(sql, reads, "get_tag", name)
    for pipeline in (None, "default", "other"):
        for table in (None, "counts", "raw"):
            same(sql, reads, "revisions", pipeline=pipeline, table=table)
    for revision in (*(r.id for r in sql.revisions()), 999):
        same(sql, reads, "superseded_states", revision)
    for name in (*tables, "nope"):
        for after in (0, *epochs):
            for up_to in (None, *epochs):
                for limit in (None, 0, 1, 2):
                    same(sql, reads, "table_epochs", name, after=after, up_to=up_to, limit=limit)


def test_every_read_of_a_snapshot_answers_as_the_sql_catalog(built):
    sql, reads, epochs = built
    assert_same_reads(sql, reads, TABLES, epochs)
    # The history shows every case: the comparisons above could tell the two apart.
    assert set(sql.latest_written(TABLES)) == {"raw", "counts", "solo"}
    assert sql.latest_written(["raw"], at_or_before=epochs[3])["raw"].epoch == epochs[2]
    assert {s.state.value for s in sql.states_at(["raw"], epochs[1]).values()} == {"COALESCED"}
    assert sql.states_at(["raw"], epochs[3])["raw"].state.value == "ROLLED_BACK"
    assert sql.expiry_of(epochs[0]) is not None and sql.revisions()
    assert same(sql, reads, "get_table", "nope")[0] is UnknownTableError
    assert same(sql, reads, "get_epoch", 999)[0] is UnknownEpochError
    assert same(sql, reads, "get_tag", "nope")[0] is UnknownTagError
    assert same(sql, reads, "superseded_states", 999)[0] is UnknownRevisionError
    assert len(sql.superseded_states(sql.revisions()[0].id)) == 2


def test_a_read_as_of_before_a_switch_resolves_as_the_sql_catalog(built):
    """A cut named before a recompute's switch (a tag, a time) reads the states the
    revision replaced, through either catalog."""
    sql, reads, epochs = built
    tag = sql.get_tag("t3")
    assert switched_after(sql.revisions(), tag.created_at)
    then = {
        catalog: resolve_snapshot(
            HistoryAt(catalog, tag.created_at),
            ["raw", "counts"],
            Level.REPEATABLE_READ,
            as_of_epoch=tag.epoch,
        )
        for catalog in (sql, reads)
    }
    assert then[sql] == then[reads]
    assert then[sql].versions == {"raw": 1, "counts": 1}
    # Read as the catalog is now, the epoch is coalesced into the revision's last one.
    with pytest.raises(EpochNotReadableError):
        resolve_snapshot(sql, ["raw", "counts"], Level.REPEATABLE_READ, as_of_epoch=tag.epoch)


def test_a_pin_is_a_pin_whichever_side_made_it(built):
    sql, reads, epochs = built
    e3, e5 = epochs[2], epochs[5]
    pin = reads.create_pin(
        pipeline="default", epoch=e5, versions={"raw": 3}, holder="me", ttl_seconds=60
    )
    (seen,) = sql.active_pins()
    assert seen == pin
    assert sql.expire_epochs([e5], rule="keep-last-0") == []  # the pin protects its epoch
    renewed = reads.renew_pin(pin, ttl_seconds=120)
    assert renewed.expires_at > pin.expires_at
    assert sql.active_pins() == [renewed]
    reads.release_pin(renewed)
    assert sql.active_pins() == []
    with pytest.raises(PinExpiredError):
        reads.renew_pin(renewed, ttl_seconds=60)
    assert sql.expire_epochs([e5], rule="keep-last-0") == [e5]  # unpinned, it expires

    theirs = sql.create_pin(pipeline="default", epoch=e3, versions={}, holder="x", ttl_seconds=60)
    assert reads.renew_pin(theirs, ttl_seconds=90) == sql.active_pins()[0]
    reads.release_pin(theirs)
    assert sql.active_pins() == []

    for epoch in (epochs[0], e5):  # expired by the rule, then by the test
        with pytest.raises(EpochExpiredError) as raised:
            reads.create_pin(pipeline=None, epoch=epoch, versions={}, holder="me", ttl_seconds=1)
        assert raised.value.epoch == epoch
    with pytest.raises(UnknownEpochError):
        reads.create_pin(pipeline=None, epoch=999, versions={}, holder="me", ttl_seconds=1)
    assert sql.active_pins() == []  # a refused pin leaves nothing behind

    short = reads.create_pin(
        pipeline=None, epoch=None, versions={"raw": 1}, holder="me", ttl_seconds=0.05
    )
    time.sleep(0.1)
    assert sql.active_pins() == []  # expired as the catalog's clock sees it
    with pytest.raises(PinExpiredError):
        reads.renew_pin(short, ttl_seconds=60)


def test_a_closed_reads_is_an_unavailable_catalog(built):
    """A pin's renewal thread may outlive the command's catalog: it then hears a catalog
    error (logged; the pin lapses by itself), never a driver's."""
    sql, reads, epochs = built
    pin = reads.create_pin(pipeline=None, epoch=epochs[2], versions={}, holder="me", ttl_seconds=60)
    reads.close()
    with pytest.raises(CatalogUnavailableError):
        reads.renew_pin(pin, ttl_seconds=60)
    with pytest.raises(CatalogUnavailableError):
        reads.list_tables()
    assert sql.active_pins() == [pin]  # nothing half-done


def test_a_pin_waits_for_the_catalog_write_lock(built, tmp_path, monkeypatch):
    """Pins are made under the catalog's write lock: never inside another writer's
    transaction (the expiry's check of pins relies on it), and not at all when the
    lock stays taken past the busy timeout."""
    sql, reads, epochs = built
    holder = sqlite3.connect(
        tmp_path / "catalog.sqlite", isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    released_at = []

    def release_later():
        time.sleep(0.5)
        released_at.append(time.monotonic())
        holder.execute("COMMIT")

    thread = threading.Thread(target=release_later)
    thread.start()
    reads.create_pin(pipeline=None, epoch=epochs[2], versions={}, holder="me", ttl_seconds=60)
    made_at = time.monotonic()
    thread.join()
    assert released_at and made_at >= released_at[0]

    monkeypatch.setattr(sqlite_reads, "BUSY_TIMEOUT_SECONDS", 0.1)
    impatient = SqliteReads.open(tmp_path / "catalog.sqlite")
    assert impatient is not None
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CatalogUnavailableError, match="database is locked"):
            impatient.create_pin(pipeline=None, epoch=None, versions={}, holder="me", ttl_seconds=1)
    finally:
        holder.execute("ROLLBACK")
        impatient.close()
    assert len(sql.active_pins()) == 1


def test_an_upgraded_catalog_is_read_as_the_sql_catalog_reads_it(tmp_path):
    """Columns a migration added sit in another order than a new catalog's."""
    from test_catalog_migration import build_v1_catalog

    url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    build_v1_catalog(url)
    assert SqliteReads.open(tmp_path / "catalog.sqlite") is None  # v1: not this version
    SqlCatalog.open_for_upgrade(url).upgrade()
    with load_catalog(url) as sql, open_for_reads(url) as reads:
        assert isinstance(reads, SqliteReads)
        assert_same_reads(sql, reads, ("raw", "counts"), [1, 2])
        assert reads.latest_written(["raw", "counts"]) == sql.latest_written(["raw", "counts"])
        assert reads.latest_written(["raw"])["raw"].epoch == 2
        pin = reads.create_pin(
            pipeline=None, epoch=1, versions={"raw": 1}, holder="me", ttl_seconds=60
        )
        assert sql.active_pins() == [pin]


def test_only_a_current_writable_sqlite_file_is_read_without_sqlalchemy(built, tmp_path):
    sql, reads, _ = built
    path = tmp_path / "catalog.sqlite"
    with open_for_reads(f"sqlite:///{path}") as opened:
        assert isinstance(opened, SqliteReads)
    with open_for_reads(f"sqlite:///{path}?timeout=5") as opened:
        assert isinstance(opened, SqlCatalog)  # URL options are SQLAlchemy's to read
    with pytest.raises(Exception, match="no catalog found"):
        open_for_reads(f"sqlite:///{tmp_path / 'missing.sqlite'}")
    assert not (tmp_path / "missing.sqlite").exists()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    assert SqliteReads.open(path) is None
    with pytest.raises(SchemaVersionError):
        open_for_reads(f"sqlite:///{path}")


def test_a_warehouse_names_its_embedded_catalog(tmp_path):
    load_catalog(None, warehouse=tmp_path / "wh").close()
    with open_for_reads(warehouse=tmp_path / "wh") as opened:
        assert isinstance(opened, SqliteReads)
        assert opened.url == f"sqlite:///{(tmp_path / 'wh' / '_catalog.sqlite').resolve()}"


@pytest.mark.postgres
def test_postgresql_is_read_through_the_sql_catalog(postgres_url):
    load_catalog(postgres_url).close()
    with open_for_reads(postgres_url) as opened:
        assert isinstance(opened, SqlCatalog)


def _reads(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }


def test_the_sqlite_reads_answer_every_read_a_snapshot_resolution_asks():
    """What resolving a cut asks of the catalog (``EpochHistory``, and ``RevisionStore``
    for a read as of a time before a recompute) is in ``CatalogReads``, which the SQLite
    reads implement with the same signatures: a read added to one and not the other fails
    here, not at a user's first read as of a tag."""
    wanted = _reads(CatalogReads)
    for protocol in (EpochHistory, RevisionStore):
        asked = _reads(protocol)
        assert set(asked) <= set(wanted), (protocol.__name__, set(asked) - set(wanted))
    for name, signature in wanted.items():
        implemented = getattr(SqliteReads, name, None)
        assert implemented is not None, name
        assert inspect.signature(implemented) == signature, name
