"""A warehouse on S3-compatible object storage (moto's server, over HTTP): the conditional
writes Delta commits rely on, racing committers, and the word-count chain through the CLI
read by every engine, equal to the same chain on local disk."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from catalog import load_catalog
from etl import FileSource, Retention, Runner, snapshot
from etl.delta import (
    CommitRequest,
    Fence,
    commit_files,
    merge_files,
    open_table,
    read_arrow,
    read_table,
    restore_table,
    write_files,
)
from etl.delta.layout import filesystem
from etl.delta.logfile import log_versions
from etl.delta.maintenance import log_upkeep
from etl.errors import SourceError, StorageError
from etl.retention.maintain import maintain
from etl.storage import check_conditional_writes, put_if_absent, storage_options
from examples.wordcount.pipeline import build
from tests.support.cli_runner import REPO, etl, etl_here
from tests.support.notebooks import NOTEBOOKS, run_notebook
from tests.support.retention_env import BASE, Env
from tests.support.wordcount_env import make_chain

pytestmark = [pytest.mark.s3]


class _IgnoresConditions(http.server.BaseHTTPRequestHandler):
    """An S3 look-alike that stores every PUT, If-None-Match or not (as some do)."""

    objects: dict[str, bytes] = {}

    def do_PUT(self):  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        self.objects[self.path] = self.rfile.read(length)
        self.send_response(200)
        self.send_header("ETag", '"0"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self):  # noqa: N802
        self.objects.pop(self.path, None)
        self.send_response(204)
        self.end_headers()

    def do_HEAD(self):  # noqa: N802
        self.send_response(200 if self.path in self.objects else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def careless_endpoint(monkeypatch) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _IgnoresConditions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        yield endpoint
    finally:
        server.shutdown()


def test_put_if_absent_creates_a_key_once(s3_bucket):
    location = f"{s3_bucket}/table"
    put_if_absent(location, "_delta_log/00000000000000000000.json", b"first\n")
    with pytest.raises(FileExistsError):
        put_if_absent(location, "_delta_log/00000000000000000000.json", b"second\n")
    check_conditional_writes(location)  # moto honours If-None-Match: *


def test_a_store_that_ignores_conditional_writes_is_refused(careless_endpoint):
    with pytest.raises(StorageError, match="ignores conditional writes"):
        check_conditional_writes("s3://bucket/warehouse")


def test_an_unreachable_store_is_refused_saying_so(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(StorageError, match="cannot write there"):
        check_conditional_writes("s3://bucket/warehouse")


WORKER = Path(__file__).parents[1] / "support" / "delta_race_worker.py"


@pytest.mark.slow
def test_two_processes_racing_commits_on_s3_lose_none(s3_bucket):
    location = f"{s3_bucket}/raced"
    write_deltalake(
        location,
        pa.table({"id": pa.array([], pa.int64())}),
        storage_options=storage_options(location),
    )
    start_at = str(time.time() + 3.0)
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), location, job, "1", job, "15", start_at],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in ("left", "right")
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out))
    history = {int(e["version"]): e for e in DeltaTable(location).history()}
    for report in reports:
        assert len(report["versions"]) == 15
        for index, version in enumerate(report["versions"]):
            assert (history[version]["race.worker"], history[version]["race.index"]) == (
                report["name"],
                index,
            )
    # Two claims and thirty commits, one per version, no gaps.
    assert sorted(history) == list(range(33))


LEVELS = ("read-uncommitted", "read-committed", "repeatable-read")
CHAIN = ["words", "word_counts", "cnt_counts"]
DROPS = [("a.txt", ["apple", "pear", "apple"]), ("b.txt", ["pear", "fig", "kiwi"])]


def _every_engine(
    catalog, spark, level: str, tables: list[str] = CHAIN
) -> dict[str, dict[str, list[tuple]]]:
    """Per engine, per table, its rows (sorted) at ``level``; Spark only when given."""
    read: dict[str, dict[str, list[tuple]]] = {}
    with snapshot(catalog, tables, level, spark=spark) as snap:
        con = snap.duckdb()
        for name in tables:
            columns = snap.arrow(name).column_names
            engines = {
                "duckdb": con.sql(f"SELECT * FROM {name}").fetchall(),
                "polars": snap.polars(name).select(columns).rows(),
                "delta-rs": [tuple(r.values()) for r in snap.arrow(name).to_pylist()],
            }
            if spark is not None:
                engines["spark"] = [tuple(r) for r in snap.table(name).select(*columns).collect()]
            for engine, rows in engines.items():
                read.setdefault(engine, {})[name] = sorted(rows)
    return read


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.spark
def test_the_word_count_chain_on_s3_equals_it_on_local_disk_at_every_level_in_every_engine(
    tmp_path, spark, s3_bucket, postgres_url
):
    """Epoch 1 through ``etl run``, epoch 2 (a merge into the existing table) by a runner in
    this process; ``etl sql`` and ``etl snapshot`` read the bucket and print no secret."""
    warehouse = f"{s3_bucket}/warehouse"
    local = make_chain(tmp_path / "local", spark)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    where = ("--warehouse", warehouse, "--catalog", postgres_url)
    (first, first_words), (second, second_words) = DROPS
    (incoming / first).write_text("\n".join(first_words) + "\n")
    local.drop(first, first_words)
    assert local.runner.run_once().ok
    ran = etl(
        "run", REPO / "examples/wordcount/pipeline.py", "--once",
        "--param", f"input_dir={incoming}", *where, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    (incoming / second).write_text("\n".join(second_words) + "\n")
    local.drop(second, second_words)
    assert local.runner.run_once().ok
    on_s3 = load_catalog(postgres_url, create=False)
    runner = Runner(build(str(incoming)), catalog=on_s3, warehouse=warehouse, spark=spark)
    assert runner.run_once().ok
    assert all(on_s3.get_table(t).location.startswith(f"{warehouse}/") for t in CHAIN)

    for level in LEVELS:
        with_spark = spark if level == "repeatable-read" else None
        expected = _every_engine(local.catalog, None, level)["delta-rs"]
        for engine, tables in _every_engine(on_s3, with_spark, level).items():
            assert tables == expected, (level, engine)

    sql = etl(
        "sql", "SELECT cnt, words FROM cnt_counts ORDER BY cnt", "--format", "json", *where,
        cwd=tmp_path,
    )  # fmt: skip
    assert sql.returncode == 0, sql.stderr
    assert json.loads(sql.stdout) == [{"cnt": 1, "words": 2}, {"cnt": 2, "words": 2}]
    on_spark = etl_here(
        "sql", "SELECT cnt, words FROM cnt_counts ORDER BY cnt", "--engine", "spark",
        "--format", "json", *where, cwd=tmp_path,
    )  # fmt: skip
    assert on_spark.returncode == 0, on_spark.stderr
    assert json.loads(on_spark.stdout) == json.loads(sql.stdout)
    cut = etl("snapshot", *CHAIN, "--format", "json", *where, cwd=tmp_path)
    assert cut.returncode == 0, cut.stderr
    assert json.loads(cut.stdout)["object_store"]["endpoint"] == os.environ["AWS_ENDPOINT_URL"]
    for output in (ran.stderr, sql.stdout, sql.stderr, cut.stdout, cut.stderr):
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in output
        assert os.environ["AWS_ACCESS_KEY_ID"] not in output


DV_SCHEMA = "id long, v string, _epoch long"
DV_FENCE = Fence("dv-on-s3", generation=1)


@pytest.mark.slow
@pytest.mark.spark
def test_deletion_vector_merges_restore_and_log_upkeep_on_s3(spark, s3_bucket):
    """Our own log writer on S3: a merge whose deletion vectors it commits, a RESTORE of
    it, checkpoints and dropped log entries; Spark (through Arrow, in its tasks), delta-rs
    and Polars read every version alike."""
    location = f"{s3_bucket}/dv"
    schema = to_arrow_schema(spark.createDataFrame([], DV_SCHEMA).schema, timezone="UTC")

    def commit(files, epoch, **options) -> int:
        return commit_files(
            location, CommitRequest(files, schema=schema, mode="append", fence=DV_FENCE,
            metadata={"delta_barrier.epoch": epoch}, **options),
        )  # fmt: skip

    base_rows = [(i, f"v{i}", 1) for i in range(200)]
    frame = spark.createDataFrame(base_rows, DV_SCHEMA).repartition(2)
    base = commit(
        write_files(frame, location, file_prefix="base", collect_rows=0), 1, deletion_vectors=True
    )
    updates = spark.createDataFrame([(5, "new", 2), (150, "new", 2), (900, "new", 2)], DV_SCHEMA)
    merged = merge_files(
        spark, location, version=base, updates=updates, keys=["id"], file_prefix="m2",
        rewrite_all_bytes=0,
    )  # fmt: skip
    assert merged.deletes and not merged.removes, "the merge deletes by deletion vector"
    after = commit(merged.adds, 2, deletes=merged.deletes)
    expected = {r[0]: r for r in base_rows} | {r[0]: r for r in updates.collect()}

    def readers(version: int) -> dict[str, list[tuple]]:
        arrow = read_arrow(location, version=version)
        options = storage_options(location)
        return {
            "spark": sorted(
                tuple(r) for r in read_table(spark, location, version=version).collect()
            ),
            "delta-rs": sorted(tuple(r.values()) for r in arrow.to_pylist()),
            "polars": sorted(
                pl.read_delta(location, version=version, storage_options=options)
                .select("id", "v", "_epoch")
                .rows()
            ),
        }

    for name, rows in readers(after).items():
        assert rows == sorted(expected.values()), name
    restored = restore_table(
        location, to_version=base, planned_at=after, fence=DV_FENCE, metadata={}
    )
    for name, rows in readers(restored).items():
        assert rows == sorted(base_rows), name
    for epoch in range(3, 6):  # a few more commits, then the log kept from the latest
        commit([], epoch)
    latest = open_table(location).version()
    upkeep = log_upkeep(location, keep_from_version=latest, grace=timedelta(0))
    assert upkeep.entries_removed > 0
    fs, root = filesystem(location)
    commits, checkpoints = log_versions(fs, root)
    assert latest in checkpoints and min(commits) >= latest - 1
    for name, rows in readers(latest).items():
        assert rows == sorted(base_rows), name


@pytest.mark.slow
@pytest.mark.retention
@pytest.mark.spark
def test_a_pinned_reader_on_s3_survives_maintenance_which_then_removes_files(
    tmp_path, spark, s3_bucket
):
    """``maintain`` (expiry, compaction, vacuum, orphans, log upkeep) on a bucket, with an
    explicit local SQLite catalog: a pinned cut reads the same before and after; once it
    is closed, its files go."""
    env = Env(
        tmp_path,
        spark,
        Retention(every_epoch_for="1h"),
        catalog_url=f"sqlite:///{tmp_path / 'catalog.sqlite'}",
        warehouse=f"{s3_bucket}/warehouse",
    )
    first = env.epoch(0)
    env.epoch(1)
    pinned = snapshot(env.catalog, ["orders", "big"], as_of_epoch=first, spark=spark)

    def rows(reader) -> dict[str, list]:
        return {
            "spark": sorted(tuple(r) for r in reader.table("orders").collect()),
            "delta-rs": sorted(tuple(r.values()) for r in reader.arrow("orders").to_pylist()),
            "duckdb": sorted(reader.duckdb().sql("SELECT * FROM orders").fetchall()),
        }

    before = rows(pinned)
    assert before["spark"] == before["delta-rs"] == before["duckdb"] and before["spark"]
    for i in range(2):
        env.epoch(2 + i)
        report = maintain(
            env.catalog, now=BASE + timedelta(hours=10 + i), orphan_age=timedelta(0), min_files=2
        )
        assert first not in report.epochs_expired
        assert rows(pinned) == before
    pinned.close()
    env.epoch(5)
    report = maintain(env.catalog, now=BASE + timedelta(hours=20), orphan_age=timedelta(0))
    assert first in report.epochs_expired and report.files_removed > 0
    with snapshot(env.catalog, ["orders"], spark=spark) as latest:
        now = rows(latest)
        assert now["spark"] == now["delta-rs"] == now["duckdb"]
        assert len(now["spark"]) == 2 * 5


def _put(location: str, name: str, data: bytes) -> None:
    fs, root = filesystem(location)
    with fs.open_output_stream(f"{root}/{name}") as out:
        out.write(data)


@pytest.mark.slow
@pytest.mark.spark
def test_a_file_source_on_an_s3_prefix_takes_new_files_epoch_by_epoch_and_each_once(
    tmp_path, spark, s3_bucket
):
    """The word-count chain reading text files dropped under a bucket prefix, into a
    warehouse on the bucket: each epoch takes the files that arrived since the last one;
    a runner started afresh on the same catalog takes none of them again."""
    incoming, warehouse = f"{s3_bucket}/incoming", f"{s3_bucket}/warehouse"
    catalog_url = f"sqlite:///{tmp_path / 'catalog.sqlite'}"

    def run_once() -> None:
        catalog = load_catalog(catalog_url, warehouse=warehouse)
        runner = Runner(build(incoming), catalog=catalog, warehouse=warehouse, spark=spark)
        assert runner.run_once().ok

    def counts() -> tuple[int, dict[str, int]]:
        catalog = load_catalog(catalog_url, create=False)
        with snapshot(catalog, ["words", "word_counts"]) as snap:
            words = snap.arrow("words").num_rows
            return words, dict(snap.duckdb().sql("SELECT word, cnt FROM word_counts").fetchall())

    (first, first_words), (second, second_words) = DROPS
    _put(incoming, first, ("\n".join(first_words) + "\n").encode())
    _put(incoming, "_b.txt.tmp", b"in flight\n")  # a producer's hidden name: not taken
    run_once()
    assert counts() == (3, {"apple": 2, "pear": 1})
    _put(incoming, second, ("\n".join(second_words) + "\n").encode())
    run_once()
    expected = (6, {"apple": 2, "pear": 2, "fig": 1, "kiwi": 1})
    assert counts() == expected
    run_once()  # nothing new: no file is read twice
    assert counts() == expected
    recorded = load_catalog(catalog_url, create=False)
    taken = [name for s in recorded.slices("word_files") for name in s.bounds["files"]]
    assert taken == [first, second]


@pytest.mark.spark
def test_a_file_source_on_an_s3_prefix_reads_csv_json_and_parquet_in_spark_tasks(spark, s3_bucket):
    incoming = f"{s3_bucket}/formats"
    _put(incoming, "a.csv", b"id,name\n1,one\n2,two\n")
    _put(incoming, "a.json", b'{"id": 1, "name": "one"}\r\n{"id": 2, "name": "two"}')
    _put(incoming, "b.json", b'[{"id": 1,\n  "name": "one"},\n {"id": 2, "name": "two"}]\n')
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table({"name": ["one", "two"], "id": pa.array([1, 2], pa.int64())}), buffer)
    _put(incoming, "a.parquet", buffer.getvalue().to_pybytes())
    sources = {
        "a.csv": FileSource(
            "csv", path=incoming, format="csv", schema="id LONG, name STRING",
            options={"header": "true"},
        ),
        "a.json": FileSource("json", path=incoming, format="json", schema="id LONG, name STRING"),
        "b.json": FileSource(
            "json", path=incoming, format="json", schema="id LONG, name STRING",
            options={"multiLine": "true"},
        ),
        "a.parquet": FileSource("parquet", path=incoming, format="parquet"),
    }  # fmt: skip
    for name, source in sources.items():
        rows = source.read(spark, {"files": [name]}, epoch=1).rows
        assert sorted((r["id"], r["name"]) for r in rows.collect()) == [(1, "one"), (2, "two")]
    multiline_csv = FileSource(
        "csv", path=incoming, format="csv", schema="id LONG", options={"multiLine": "True"}
    )
    with pytest.raises(SourceError, match="records must fit on one line"):
        multiline_csv.read(spark, {"files": ["a.csv"]}, epoch=1)


@pytest.mark.spark
def test_a_file_of_a_recorded_slice_gone_from_the_prefix_is_named(spark, s3_bucket):
    incoming = f"{s3_bucket}/incoming"
    _put(incoming, "kept.txt", b"apple\n")
    source = FileSource("drops", path=incoming)
    assert source.unreachable() is None
    assert [
        r["value"] for r in source.read(spark, {"files": ["kept.txt"]}, epoch=1).rows.collect()
    ] == ["apple"]
    with pytest.raises(SourceError, match=rf"epoch 2 are gone: \['{incoming}/lost.txt'\]"):
        source.read(spark, {"files": ["kept.txt", "lost.txt"]}, epoch=2)
    assert source.slice_bytes({"files": ["kept.txt", "lost.txt"]}) is None
    assert source.slice_bytes({"files": ["kept.txt"]}) == len(b"apple\n")


def test_a_file_source_on_a_bucket_that_does_not_exist_says_it_cannot_list_it(s3_server):
    source = FileSource("drops", path="s3://no-such-bucket-here/incoming")
    assert "cannot list 's3://no-such-bucket-here/incoming'" in (source.unreachable() or "")


SHOP = ["orders", "orders_rejects", "order_facts", "customer_totals", "tier_counts"]


def _shop_orders(first: int, count: int) -> list[bytes]:
    return [
        json.dumps(
            {"order_id": i, "customer": f"c{i % 3}", "amount": f"{i * 17.25:.2f}", "items": i % 4}
        ).encode()
        for i in range(first, first + count)
    ]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.kafka
def test_the_shop_chain_from_kafka_on_s3_equals_it_on_local_disk_at_every_level_in_every_engine(
    tmp_path,
    spark,
    s3_bucket,
    postgres_url,
    kafka_bootstrap,
    kafka_topic,
    kafka_produce,
    monkeypatch,
):
    """The shop chain (Kafka ingest with a rejects side output, an append, a merge, an
    overwrite) run by ``etl run`` into a bucket with PostgreSQL, and by a runner on local
    disk, from one topic: every table equal at every level in every engine, and the root
    table holds exactly the topic's well-formed orders."""
    from examples.shop.pipeline import build as build_shop

    topic = kafka_topic(partitions=2)
    warehouse = f"{s3_bucket}/warehouse"
    where = ("--warehouse", warehouse, "--catalog", postgres_url)
    params = ("--param", f"bootstrap_servers={kafka_bootstrap}", "--param", f"topic={topic}")
    local_catalog = load_catalog(None, warehouse=tmp_path / "local")
    local = Runner(
        build_shop(kafka_bootstrap, topic),
        catalog=local_catalog,
        warehouse=str(tmp_path / "local"),
        spark=spark,
    )
    first, second = _shop_orders(0, 8) + [b"{not json"], _shop_orders(8, 6)
    for values in (first, second):  # epoch 2 merges into totals that epoch 1 made
        kafka_produce(topic, values, partitions=2)
        ran = etl(
            "run", REPO / "examples/shop/pipeline.py", "--once", *params, *where, cwd=tmp_path
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert local.run_once().ok
    on_s3 = load_catalog(postgres_url, create=False)
    assert all(on_s3.get_table(t).location.startswith(f"{warehouse}/") for t in SHOP)

    for level in LEVELS:
        with_spark = spark if level == "repeatable-read" else None
        expected = _every_engine(local_catalog, with_spark, level, SHOP)
        for engine, tables in _every_engine(on_s3, with_spark, level, SHOP).items():
            assert tables == expected[engine], (level, engine)

    with snapshot(on_s3, ["orders", "orders_rejects"], "repeatable-read") as snap:
        con = snap.duckdb()
        orders = con.sql("SELECT order_id, customer, amount::VARCHAR, items FROM orders").fetchall()
        rejects = con.sql("SELECT count(*) FROM orders_rejects").fetchone()
    well_formed = [json.loads(v) for v in first[:-1] + second]
    assert sorted(orders) == sorted(
        (o["order_id"], o["customer"], o["amount"], o["items"]) for o in well_formed
    )
    assert rejects == (1,)
    for output in (ran.stdout, ran.stderr):
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in output

    # The notebook explores the warehouse on S3 as it explores the demo's on local disk.
    monkeypatch.setenv("ETL_WAREHOUSE", warehouse)
    monkeypatch.setenv("ETL_CATALOG_URL", postgres_url)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    for notebook in NOTEBOOKS:
        run_notebook(notebook)
