"""Helpers shared by the benchmarks (not a benchmark: the leading underscore hides it).

Public APIs, except where said: the ``etl``/``catalog`` package exports, SQLAlchemy's event
hooks, Spark's status tracker; :class:`ProcessCpu` reads the driver JVM's pid from pyspark's
gateway and :class:`Py4jCalls` wraps py4j's ``send_command`` (benchmarks only).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def env_ints(name: str, default: Sequence[int]) -> tuple[int, ...]:
    value = os.environ.get(name)
    if value in (None, ""):
        return tuple(default)
    return tuple(int(part.replace("_", "")) for part in value.split(",") if part.strip())


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cpus)"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class LoadSampler:
    """Samples the 1-minute load average every few seconds in a daemon thread."""

    def __init__(self, every: float = 5.0) -> None:
        self.samples: list[float] = []
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self._every)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        if not self.samples:
            return "load average: no samples"
        return (
            f"1-min load average during the run: mean {statistics.fmean(self.samples):.2f}, "
            f"max {max(self.samples):.2f} ({os.cpu_count()} cpus)"
        )


class StatementCounter:
    """Counts SQL statements sent by every SQLAlchemy engine of the process (catalog round
    trips), through SQLAlchemy's public event API."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _on_execute(self, *args: object, **kwargs: object) -> None:
        if getattr(self._local, "muted", False):
            return
        with self._lock:
            self.count += 1

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Statements of the calling thread are not counted inside the block."""
        self._local.muted = True
        try:
            yield
        finally:
            self._local.muted = False

    def __enter__(self) -> StatementCounter:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.listen(Engine, "before_cursor_execute", self._on_execute)
        return self

    def __exit__(self, *exc: object) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.remove(Engine, "before_cursor_execute", self._on_execute)


def sample_orders(spark, rows: int):
    """``rows`` rows of an order-like frame (id, name, amount, ts, _epoch 1), cached and
    counted: what the write benches write."""
    from pyspark.sql import functions as F

    df = (
        spark.range(rows)
        .select(
            F.col("id"),
            F.concat(F.lit("customer-"), (F.col("id") % 997).cast("string")).alias("name"),
            (F.col("id") * 0.37).alias("amount"),
            F.timestamp_micros(F.lit(1_700_000_000_000_000) + F.col("id") * 1000).alias("ts"),
            F.lit(1).cast("long").alias("_epoch"),
        )
        .cache()
    )
    df.count()
    return df


def append_epoch(df, location: str, schema) -> int:
    """One append epoch as the engine writes it: the files from Spark, one fenced commit."""
    from etl.delta import CommitRequest, Fence, commit_files, write_files

    files = write_files(df, location, file_prefix="1-1-0")
    return commit_files(
        location,
        CommitRequest(
            files,
            schema=schema,
            mode="append",
            fence=Fence("bench", generation=1),
            metadata={"delta_barrier.epoch": 1},
        ),
    )


def spark_job_count(spark) -> int:
    """How many Spark jobs the application has run so far (bounded by
    spark.ui.retainedJobs, 1000 by default: take differences over short spans)."""
    tracker = spark.sparkContext.statusTracker()
    return len(tracker.getJobIdsForGroup(None))


class ProcessCpu:
    """CPU seconds used so far by this Python process and by the driver JVM (Linux /proc).

    Under a shared machine's load, wall time moves with the neighbours; CPU per unit of
    work does not, so benchmarks report both.
    """

    def __init__(self, spark) -> None:
        gateway = spark.sparkContext._gateway
        process = getattr(gateway, "proc", None)
        self._jvm_stat = f"/proc/{process.pid}/stat" if process is not None else None
        self._tick = os.sysconf("SC_CLK_TCK")
        self._compilation = spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()

    def jvm(self) -> float:
        if self._jvm_stat is None:
            return float("nan")
        with open(self._jvm_stat) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick

    @staticmethod
    def python() -> float:
        return time.process_time()

    def jit(self) -> float:
        """Seconds the driver JVM's just-in-time compilers have spent so far (part of
        :meth:`jvm`): Spark's code is large, and on two cores compiling it takes about a
        core for the first minutes of a run."""
        return self._compilation.getTotalCompilationTime() / 1000


JIT_SETTLED = 0.1
"""JIT compilation, as a share of one core, below which a run's JVM counts as warm."""


def warm_up(cpu: ProcessCpu, minimum: float, maximum: float, *, step: float = 10.0) -> str:
    """Wait ``minimum`` seconds, then on until the driver JVM's JIT compilation over the
    last ``step`` seconds stays under :data:`JIT_SETTLED` of a core (at most ``maximum``
    seconds in all). A window measured while the JIT still compiles Spark's code counts
    that compilation against the work: on a slow 2-core host the JVM's CPU per batch fell
    from 27-69 ms to 14 ms between the first and the fifth minute of one run. Returns what
    the warm-up took, for the report."""
    started = time.monotonic()
    time.sleep(minimum)
    while True:
        before = cpu.jit()
        time.sleep(step)
        rate = (cpu.jit() - before) / step
        elapsed = time.monotonic() - started
        if rate < JIT_SETTLED or elapsed + step > maximum:
            return f"warm-up {elapsed:.0f} s (JIT compiling {rate:.0%} of a core at its end)"


def tree_cpu(root: int | None = None) -> dict[str, float]:
    """CPU seconds used so far by a process (default: this one, "this process") and its
    live descendants (Linux /proc), by command name: the driver JVM (``java``), Spark's
    Python workers (``python``) and any server the benchmark started (``moto_server``)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        if any(arg.endswith(b"moto_server") for arg in argv[:2]):
            name = "moto_server"
        stats[int(entry)] = (int(fields[1]), name, (int(fields[11]) + int(fields[12])) / tick)
    root = os.getpid() if root is None else root
    inside = {root}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _, _) in stats.items():
            if parent in inside and pid not in inside:
                inside.add(pid)
                grew = True
    totals: dict[str, float] = {}
    for pid in inside:
        if pid in stats:
            _, name, seconds = stats[pid]
            name = "this process" if pid == root else name
            totals[name] = totals.get(name, 0.0) + seconds
    return totals


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per command name between two :func:`tree_cpu` readings."""
    return {name: after[name] - before.get(name, 0.0) for name in sorted(after)}


class Py4jCalls:
    """Counts the py4j round trips from Python to the driver JVM (every method call, field
    access and object conversion is one), by wrapping py4j's ClientServerConnection."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._original = None

    def __enter__(self) -> Py4jCalls:
        from py4j.clientserver import ClientServerConnection

        original = ClientServerConnection.send_command
        counter = self

        def counted(connection, command, *args, **kwargs):
            with counter._lock:
                counter.count += 1
            return original(connection, command, *args, **kwargs)

        self._original = original
        ClientServerConnection.send_command = counted
        return self

    def __exit__(self, *exc: object) -> None:
        from py4j.clientserver import ClientServerConnection

        ClientServerConnection.send_command = self._original


def start_s3_server(bucket: str) -> subprocess.Popen:
    """moto's S3 server on a free port of 127.0.0.1 with ``bucket`` created, its endpoint
    and dummy credentials exported to this process (before Spark starts, so that its
    Python workers and ``etl`` subprocesses inherit them). Terminate it when done."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.05)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return proc


def plain_kafka_consumer(bootstrap: str):
    """The baselines' kafka-python consumer: no group, large fetches (as the source's),
    up to 20,000 records a poll."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        max_poll_records=20_000,
    )
