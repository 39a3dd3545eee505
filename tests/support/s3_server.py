"""An S3-compatible server (moto's) on 127.0.0.1 for the tests, reached through the
standard AWS environment variables.

The endpoint and dummy credentials are exported when pytest configures this plugin
(``tests/conftest.py``), before the session's Spark starts: Spark's Python workers and
``etl`` subprocesses inherit them, as executors of a real deployment inherit theirs. The
server itself starts with the first test that asks for ``s3_server``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ENDPOINT = f"http://127.0.0.1:{_free_port()}"
ENVIRONMENT = {
    "AWS_ENDPOINT_URL": ENDPOINT,
    "AWS_ACCESS_KEY_ID": "delta-barrier-test",
    "AWS_SECRET_ACCESS_KEY": "delta-barrier-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def pytest_configure(config) -> None:
    """Point every AWS client of this process and its children at the test server (never
    at a real account)."""
    os.environ.update(ENVIRONMENT)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        os.environ.pop(name, None)


def _wait_until_up(proc: subprocess.Popen) -> None:
    host, port = ENDPOINT.removeprefix("http://").split(":")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}")
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"moto_server did not listen on {ENDPOINT}")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint of a running S3-compatible server (stopped after the session)."""
    moto = Path(sys.executable).with_name("moto_server")
    host, port = ENDPOINT.removeprefix("http://").split(":")
    proc = subprocess.Popen(
        [str(moto), "-H", host, "-p", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_up(proc)
        yield ENDPOINT
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A fresh bucket's URL, ``s3://<bucket>``."""
    import boto3

    name = f"wh-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return f"s3://{name}"
