"""moto's S3 server with its request log counted: how many round trips a run makes to
the store, by kind.

The server logs one line per request it answered (werkzeug's access log on stderr); it
goes to a file here, and :meth:`CountedS3Server.take` counts the lines written since the
last take.
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

_REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/[0-9.]+"')


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


class CountedS3Server:
    """moto's S3 server on a free port of 127.0.0.1, ``bucket`` created in it."""

    def __init__(self, bucket: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self._log = tempfile.NamedTemporaryFile(prefix="moto-requests-", suffix=".log")  # noqa: SIM115 - closed by close()
        self._proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("moto_server")),
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.close()
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="counted",
            aws_secret_access_key="counted-secret",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        self._read = 0
        self.take()

    def take(self) -> Counter[str]:
        """The requests answered since the last take, by kind."""
        with open(self._log.name, "rb") as log:
            log.seek(self._read)
            text = log.read()
        complete = text[: text.rfind(b"\n") + 1]
        self._read += len(complete)
        return Counter(
            request_kind(match.group(1), match.group(2))
            for match in _REQUEST.finditer(complete.decode(errors="replace"))
        )

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._log.close()


__all__ = ["KINDS", "LIST", "LOG_GET", "CountedS3Server", "request_kind"]
