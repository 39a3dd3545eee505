"""moto's S3 server with its request log counted: how many round trips a run makes to
the store, by kind.

The server logs one line per request it answered (werkzeug's access log on stderr); it
goes to a file, and :meth:`RequestLog.take` counts the lines written since the last take.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from etl.delta.logfile import LOG_DIR

LOG_GET = "GET log"
"""A read of one object under a table's ``_delta_log`` (a commit, a checkpoint, a .crc)."""
LIST = "LIST"
DATA_GET = "GET data"
WRITE = "PUT/POST"
HEAD = "HEAD"
DELETE = "DELETE"
KINDS = (LOG_GET, LIST, DATA_GET, WRITE, HEAD, DELETE)

# werkzeug colours the request of an error response (a 404, a 412) with ANSI escapes.
_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)?(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/[0-9.]+')


def request_kind(method: str, target: str) -> str:
    """The kind of one S3 request (method, path and query as sent)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    if method == "GET":
        if "list-type" in query or "prefix" in query or parts.path.strip("/").count("/") == 0:
            return LIST
        return LOG_GET if f"/{LOG_DIR}/" in unquote(parts.path) else DATA_GET
    if method == "HEAD":
        return HEAD
    if method == "DELETE":
        return DELETE
    return WRITE


class RequestLog:
    """The requests moto's access log at ``path`` shows, counted from where the last
    :meth:`take` stopped; only those to ``bucket`` when given."""

    def __init__(self, path: str | Path, bucket: str | None = None) -> None:
        self._path = Path(path)
        self._bucket = bucket
        self._read = self._path.stat().st_size if self._path.exists() else 0

    def take(self) -> Counter[str]:
        """The requests answered since the last take, by kind."""
        with open(self._path, "rb") as log:
            log.seek(self._read)
            text = log.read()
        complete = text[: text.rfind(b"\n") + 1]
        self._read += len(complete)
        return Counter(
            request_kind(method, target)
            for method, target in _REQUEST.findall(complete.decode(errors="replace"))
            if self._bucket is None or urlsplit(target).path.split("/")[1] == self._bucket
        )


class CountedS3Server:
    """moto's S3 server on a free port of 127.0.0.1 with ``bucket`` created in it, its
    access log in a temporary file counted by :attr:`requests`. Close it when done."""

    def __init__(self, bucket: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self._log = tempfile.NamedTemporaryFile(prefix="moto-requests-", suffix=".log")  # noqa: SIM115 - closed by close()
        self._proc = start_moto(port, self._log)
        self.endpoint = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="counted",
            aws_secret_access_key="counted-secret",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        self.requests = RequestLog(self._log.name)

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._log.close()


def start_moto(port: int, log) -> subprocess.Popen:
    """moto's S3 server on ``port`` of 127.0.0.1, its access log written to ``log`` (a
    file), once it listens."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not listen on port {port}") from None
            time.sleep(0.05)


__all__ = [
    "KINDS",
    "LIST",
    "LOG_GET",
    "CountedS3Server",
    "RequestLog",
    "request_kind",
    "start_moto",
]
