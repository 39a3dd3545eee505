"""A warehouse on S3-compatible object storage (moto's server, over HTTP): the conditional
writes Delta commits rely on, racing committers, and the word-count chain through the CLI
read by every engine, equal to the same chain on local disk."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from etl.errors import StorageError
from etl.storage import check_conditional_writes, put_if_absent, storage_options

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
