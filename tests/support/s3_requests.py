"""A counting proxy in front of an S3-compatible server: every request is passed on
unchanged and counted by kind, to see how many round trips a run makes to the store.

Point a client at :attr:`RequestCounter.endpoint` (``AWS_ENDPOINT_URL``) instead of the
server's. Only the clients that read the environment after that see it: the driver's
delta-rs and pyarrow file systems do (:func:`etl.storage.object_store` reads it on every
call); Spark's Python workers, started earlier, keep the server's.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from collections import Counter
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


class RequestCounter:
    """A proxy on 127.0.0.1 passing every request to ``upstream`` and counting it."""

    def __init__(self, upstream: str) -> None:
        host, port = urlsplit(upstream).netloc.split(":")
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        counter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self._body()
                connection = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("transfer-encoding", "content-length", "connection")
                }
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                try:
                    connection.request(self.command, self.path, body=body or None, headers=headers)
                    response = connection.getresponse()
                    payload = response.read()
                finally:
                    connection.close()
                counter._count(request_kind(self.command, self.path))
                self.send_response(response.status)
                # A HEAD's Content-Length is the object's size: passed on as it is.
                passed = ("transfer-encoding", "connection")
                if self.command != "HEAD":
                    passed += ("content-length",)
                    self.send_header("Content-Length", str(len(payload)))
                for key, value in response.getheaders():
                    if key.lower() not in passed:
                        self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline().strip():  # trailers
                        pass
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def take(self) -> Counter[str]:
        """The requests counted since the last take, by kind; the count starts again."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
        return counts

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["KINDS", "LIST", "LOG_GET", "RequestCounter", "request_kind"]
