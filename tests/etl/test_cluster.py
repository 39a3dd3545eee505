"""The word-count chain on a Spark standalone cluster (master + one worker on loopback).

Executors run in the worker's JVMs and write the epoch's files; the driver (the ``etl``
process) commits them. The result is checked at repeatable-read, then the cluster stops.
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
from tests.support.cli_runner import REPO, etl

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
                "1",
                "--memory",
                "1g",
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
