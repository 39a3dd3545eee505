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
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3_requests import RequestLog, start_moto


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


@pytest.fixture(scope="session")
def s3_access_log(tmp_path_factory) -> Path:
    """The file the server logs every request it answers to."""
    return tmp_path_factory.mktemp("moto") / "access.log"


@pytest.fixture(scope="session")
def s3_server(s3_access_log: Path) -> Iterator[str]:
    """The endpoint of a running S3-compatible server (stopped after the session)."""
    with open(s3_access_log, "wb") as stream:
        proc = start_moto(int(ENDPOINT.rsplit(":", 1)[1]), stream)
    try:
        yield ENDPOINT
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def s3_requests(s3_access_log: Path, s3_bucket: str) -> RequestLog:
    """The requests the server answers for ``s3_bucket`` from now on, by kind."""
    return RequestLog(s3_access_log, bucket=s3_bucket.removeprefix("s3://"))


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A fresh bucket's URL, ``s3://<bucket>``."""
    import boto3

    name = f"wh-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return f"s3://{name}"
