"""The word-count chain on a Spark standalone cluster (master + one worker on loopback).

Executors run in the worker's JVMs and write the epoch's files; the driver (the ``etl``
process) commits them. The result is checked at repeatable-read, then the cluster stops.
On the S3 server with a PostgreSQL catalog, two runners of different pipelines share the
cluster and the catalog; executors reach the object store through the environment they
inherit from the worker, as on a real cluster.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyspark
import pytest

from catalog import load_catalog
from etl.reader import snapshot
from tests.support.cli_runner import REPO, etl, start

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 1):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _wait_worker(ui_port: int, timeout: float = 120) -> None:
    """Until the master counts a live worker (its web UI's JSON status says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as page:
                if json.load(page).get("aliveworkers", 0) >= 1:
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError("no worker registered with the master")


@pytest.fixture
def cluster(tmp_path):
    yield from _cluster(tmp_path, cores=1, memory="1g")


@pytest.fixture
def shared_cluster(tmp_path):
    """A worker with a core and an executor's memory for each of two applications."""
    yield from _cluster(tmp_path, cores=2, memory="2g")


def _cluster(tmp_path, *, cores: int, memory: str):
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    port, ui_port = _free_port(), _free_port()
    logs = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 - closed below
    master = subprocess.Popen(
        [
            str(SPARK_CLASS),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        env=env,
        stdout=logs,
        stderr=subprocess.STDOUT,
    )
    worker = None
    try:
        _wait_port(port)
        worker = subprocess.Popen(
            [
                str(SPARK_CLASS),
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                str(_free_port()),
                f"spark://127.0.0.1:{port}",
            ],
            env=env,
            stdout=logs,
            stderr=subprocess.STDOUT,
        )
        _wait_worker(ui_port)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in (worker, master):
            if process is not None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        logs.close()


def test_wordcount_chain_on_a_standalone_cluster(cluster, tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    words = ["apple", "pear", "apple", "fig"]
    (incoming / "a.txt").write_text("\n".join(words) + "\n")
    warehouse = tmp_path / "warehouse"
    result = etl(
        "run",
        REPO / "examples" / "wordcount" / "pipeline.py",
        "--once",
        "--param",
        f"input_dir={incoming}",
        "--warehouse",
        warehouse,
        "--master",
        cluster,
        cwd=tmp_path,
        timeout=900,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    catalog = load_catalog(warehouse=warehouse, create=False)
    with snapshot(catalog, ["words", "word_counts", "cnt_counts"]) as snap:
        assert snap.epoch == 1
        counts = dict(snap.duckdb().execute("SELECT word, cnt FROM word_counts").fetchall())
        assert counts == dict(Counter(words))
        assert snap.arrow("words").num_rows == len(words)


ORDERS_PIPELINE = """
from pyspark.sql import functions as F

from etl import Pipeline, param
from etl.sources.kafka import KafkaSource

pipeline = Pipeline("orders")
pipeline.ingest(
    "ingest_orders",
    source=KafkaSource(
        "orders_src",
        topics=[param("topic")],
        bootstrap_servers=param("bootstrap"),
        schema="id long not null, customer string, amount double",
    ),
    output="orders",
    rejects="orders_rejects",
)


@pipeline.job("customer_totals", output="customer_totals", inputs=["orders"], mode="overwrite")
def customer_totals(ctx):
    return ctx["orders"].groupBy("customer").agg(F.sum("amount").alias("total"))
"""
"""A Kafka chain: ``orders`` (bad records to ``orders_rejects``) -> ``customer_totals``."""

APPLICATION_DEFAULTS = "spark.cores.max 1\nspark.executor.memory 512m\n"
"""One core and a small executor per application, so two runners share one worker."""


@pytest.mark.s3
@pytest.mark.postgres
@pytest.mark.kafka
def test_two_pipelines_share_a_cluster_and_a_postgresql_catalog_on_s3(
    shared_cluster, tmp_path, s3_bucket, postgres_url, kafka_bootstrap, kafka_topic, kafka_produce
):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    words = ["apple", "pear", "apple", "fig"]
    (incoming / "a.txt").write_text("\n".join(words) + "\n")
    topic = kafka_topic(partitions=2)
    orders = [{"id": i, "customer": "xy"[i % 2], "amount": float(i)} for i in range(6)]
    kafka_produce(topic, [b"{not json"] + [json.dumps(o).encode() for o in orders], partitions=2)
    (tmp_path / "orders.py").write_text(ORDERS_PIPELINE)
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(APPLICATION_DEFAULTS)
    warehouse = f"{s3_bucket}/warehouse"
    shared = ("--warehouse", warehouse, "--catalog", postgres_url, "--master", shared_cluster)
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(conf_dir)}
    runners = [
        start(
            "run",
            REPO / "examples" / "wordcount" / "pipeline.py",
            "--once",
            "--param",
            f"input_dir={incoming}",
            *shared,
            cwd=tmp_path,
            env=env,
        ),
        start(
            "run",
            tmp_path / "orders.py",
            "--once",
            "--param",
            f"topic={topic}",
            "--param",
            f"bootstrap={kafka_bootstrap}",
            *shared,
            cwd=tmp_path,
            env=env,
        ),
    ]
    for runner in runners:
        _, err = runner.communicate(timeout=900)
        assert runner.returncode == 0, err[-3000:]
        assert "Traceback" not in err, err[-3000:]

    catalog = load_catalog(postgres_url, create=False)
    assert {catalog.get_table(t).location.split("/")[2] for t in ("words", "orders")} == {
        s3_bucket.removeprefix("s3://")
    }
    with snapshot(catalog, ["words", "word_counts", "cnt_counts"]) as snap:
        counts = dict(snap.duckdb().execute("SELECT word, cnt FROM word_counts").fetchall())
        assert counts == dict(Counter(words))
        # The two pipelines open their epochs from one catalog, in whichever order they
        # start: this run's one epoch is the snapshot's, whatever its number.
        assert sorted(snap.arrow("cnt_counts").to_pylist(), key=lambda r: r["cnt"]) == [
            {"cnt": 1, "words": 2, "_epoch": snap.epoch},
            {"cnt": 2, "words": 1, "_epoch": snap.epoch},
        ]
    with snapshot(catalog, ["orders", "orders_rejects", "customer_totals"]) as snap:
        assert sorted(snap.arrow("orders").column("id").to_pylist()) == list(range(6))
        assert snap.arrow("orders_rejects").num_rows == 1
        totals = {r["customer"]: r["total"] for r in snap.arrow("customer_totals").to_pylist()}
        assert totals == {"x": 0.0 + 2 + 4, "y": 1.0 + 3 + 5}
