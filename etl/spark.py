"""The one place that builds the SparkSession."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pyspark import SparkConf, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from etl.delta.local import schema_kept

DEFAULT_MASTER = "local[*]"

# Delta readers disagree on INT96 and nanosecond timestamps; microseconds is what the
# Delta protocol's `timestamp` type means, so every reader sees the same instant.
_BASE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    # Every query's start describes its plan for the UI's SQL tab, even with the UI off; a
    # continuous run starts a few queries a batch. Spark's default ("formatted") description
    # was 12% of the driver JVM's samples in the ten-job chain (bench/PROFILE-issue28.md);
    # the simple one is the physical plan's tree, and the tab's plan graph is unchanged.
    "spark.sql.ui.explainMode": "simple",
}
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def build_spark(
    *,
    master: str | None = None,
    app_name: str = "delta-barrier",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return the SparkSession (creating it on first use).

    ``master`` defaults to ``$ETL_SPARK_MASTER`` or ``local[*]``; a cluster master runs the
    same code. Python workers use the driver's interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or os.environ.get("ETL_SPARK_MASTER") or DEFAULT_MASTER
    check_master(master)
    ui = os.environ.get("ETL_SPARK_UI")
    if ui is not None:
        # The etl command turns the UI off unless --spark-ui (a library user keeps Spark's default).
        conf = {"spark.ui.enabled": "true" if ui.lower() == "true" else "false", **(conf or {})}
    if master.startswith("local"):
        # Everything runs in this process: bind to loopback, not the host's first address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    driver_options = f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        **_BASE_CONF,
        "spark.driver.extraJavaOptions": driver_options,
        **(conf or {}),
    }
    # PySpark keeps its driver JVM for the life of the process: it is started only once.
    if SparkContext._gateway is None and SparkContext._active_spark_context is None:
        _start_driver_jvm(SparkConf().setAll(list(settings.items())))
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    answer_without_delay(spark)
    pass_scalars_through()
    url = spark.sparkContext.uiWebUrl
    if url and (ui or "").lower() == "true":
        print(f"Spark UI: {url}", file=sys.stderr)
    return spark


class _ScalarArguments:
    """A Py4J input converter that takes the arguments Py4J sends as they are (``str``,
    ``int``, ``float``, ``bool``, ``None``) before any other converter looks at them.

    PySpark's gateway tries every registered converter on every argument of every JVM
    call: ten of them, three of which look attributes up with ``inspect.getattr_static``.
    None converts a value of these exact types, so the answer is known at once: about 4%
    of the driver's Python in a 100-table pipeline went to asking (bench/RESULTS-issue28.md,
    session 56)."""

    _TYPES = frozenset({str, int, float, bool, type(None)})

    def can_convert(self, value: object) -> bool:
        return type(value) in self._TYPES

    def convert(self, value: object, gateway_client: object) -> object:
        return value


def pass_scalars_through() -> None:
    """Register :class:`_ScalarArguments` first among Py4J's input converters, once."""
    from py4j import protocol

    if not any(isinstance(c, _ScalarArguments) for c in protocol.INPUT_CONVERTER):
        protocol.register_input_converter(_ScalarArguments(), prepend=True)


_answering = threading.local()
"""Per Python thread: a weak reference to the Py4J connection :func:`answer_without_delay`
set up last."""


def answer_without_delay(spark: SparkSession) -> None:
    """Make the driver JVM send this thread's Py4J answers at once (``TCP_NODELAY`` on
    both ends of the thread's connection); a no-op once done for the connection.

    Py4J's JVM side writes an answer through an 8 KiB buffer, so a longer one (a batch's
    rows taken from Spark's plan, a wide schema) leaves in two writes. With Nagle's
    algorithm on, the second write waits for the first one's ACK, which this end delays
    by up to 40 ms (Linux's delayed ACK): a 326-row local relation took 44 ms to reach
    Python, 2.8 ms without the wait (bench/RESULTS-issue28.md, session 50). PySpark gives
    each Python thread a connection of its own: every thread that calls the JVM (a
    runner's batch threads) calls this first."""
    import socket

    gateway = spark.sparkContext._gateway
    client = getattr(gateway, "_gateway_client", None)
    thread_connection = getattr(client, "get_thread_connection", None)
    if thread_connection is None:  # not PySpark's pinned-thread mode: nothing to set
        return
    done = getattr(_answering, "connection", None)
    current = thread_connection()
    if current is not None and done is not None and done() is current:
        return
    from py4j.java_gateway import JavaObject
    from py4j.protocol import GATEWAY_SERVER_OBJECT_ID, Py4JError

    try:
        server = JavaObject(GATEWAY_SERVER_OBJECT_ID, client)
        # The call runs in the JVM thread serving this Python thread's connection, whose
        # own connection is the one Py4J keeps for that thread.
        server.getCallbackClient().getPerThreadConnection().getSocket().setTcpNoDelay(True)
        set_up = True
    except Py4JError:  # another Py4J: answers arrive, only later (and it is not asked again)
        set_up = False
    current = thread_connection()
    if current is not None:
        if set_up and current.socket is not None:
            current.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _answering.connection = weakref.ref(current)


JVM_BOOT_NOTICES = ("WARNING: Using incubator modules: jdk.incubator.vector",)
"""Lines the JVM prints on stderr at every start that say nothing about this run: Spark 4's
launcher always adds ``--add-modules=jdk.incubator.vector``, and no JVM option silences
the notice that follows."""


def _start_driver_jvm(conf: SparkConf) -> None:
    """Start the driver JVM (and its SparkContext) with its stderr passed through ``grep``
    minus :data:`JVM_BOOT_NOTICES`; every other line (errors above all) reaches our stderr.
    A separate process, not a thread: it relays what the JVM writes after we exit too."""
    from pyspark.java_gateway import launch_gateway

    patterns = [f"--regexp={notice}" for notice in JVM_BOOT_NOTICES]
    try:
        relay = subprocess.Popen(
            ["grep", "--line-buffered", "--invert-match", "--line-regexp", "--fixed-strings"]
            + patterns,
            stdin=subprocess.PIPE,
            stdout=sys.stderr.fileno(),
            # Ctrl-C is for us (and we finish the epochs in flight); the relay outlives it.
            preexec_fn=_ignore_sigint,
        )
    except (OSError, ValueError):  # no grep, or no real stderr: the JVM writes to ours
        gateway = launch_gateway(conf)
    else:
        assert relay.stdin is not None
        with relay.stdin:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": relay.stdin})
    SparkContext(conf=conf, gateway=gateway)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


MASTER_CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a standalone master's port before giving up (exit 2, one line)."""


def check_master(master: str) -> None:
    """Refuse, before any JVM starts, a master that cannot work: a malformed ``local``
    master, or a ``spark://`` master none of whose hosts accepts a connection within
    :data:`MASTER_CONNECT_TIMEOUT` seconds. Raises UsageError naming it."""
    import re
    import socket

    from etl.errors import UsageError

    if master.startswith("local"):
        if not re.fullmatch(r"local(\[(\*|\d+)(,\s*\d+)?\])?", master):
            raise UsageError(
                f"--master {master!r} is not a local master; use local, local[N] or local[*]"
            )
        return
    if not master.startswith("spark://"):
        return  # yarn, k8s://...: Spark checks them itself
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, sep, port = address.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--master {master!r}: give spark://HOST:PORT")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), MASTER_CONNECT_TIMEOUT):
                return
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc.strerror or exc}")
    raise UsageError(
        f"Spark master {master} is unreachable ({'; '.join(problems)}): start it, or check "
        "--master / ETL_SPARK_MASTER"
    )


SMALL_BATCH_BYTES = 8 * 1024 * 1024
"""A batch whose input tables hold at most this many bytes runs with
:data:`SMALL_BATCH_CONF`."""

SMALL_BATCH_CONF = {
    # On a few megabytes, fixed work per query and per task costs more CPU than the
    # optimisations behind it save (bench small_epoch, driver JVM CPU per derived-job
    # epoch: 410-690 ms with Spark's defaults, 280-370 ms with these four):
    # - adaptive execution submits every shuffle stage as a job of its own and re-plans
    #   in between;
    "spark.sql.adaptive.enabled": "false",
    # - code generation compiles (Janino), loads and JIT-compiles new classes for every
    #   query and every task's projections; the interpreted expressions it falls back to
    #   when a compilation fails are Spark's own, so the results are the same;
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # - and with adaptive execution off, a shuffle runs this many tasks (and, written by
    #   Spark, as many files): one is enough for a few megabytes;
    "spark.sql.shuffle.partitions": "1",
    # - a local relation (an input the driver read) is split into a task per core, so a
    #   union of 17 of them was 34 tasks before an aggregate's shuffle: one each
    #   (bench/RESULTS-issue28.md, session 46: 148 -> 100 ms, 272 -> 178 ms of JVM CPU for
    #   a group-by over 17 small inputs). File scans of these few megabytes read in one task.
    "spark.sql.leafNodeDefaultParallelism": "1",
}


ONE_TASK_CONF = {
    **SMALL_BATCH_CONF,
    # A batch whose inputs are each one partition (single_partition) joins them by
    # sort-merge in the same task, without an exchange; a broadcast is a job of its own
    # (a small join and aggregate: 140 -> 99 ms of driver JVM, bench/RESULTS-issue28.md,
    # session 49). Only where every relation is a small input: a large one (the output a
    # query reads back) would be sorted in one task.
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}

BatchSize = Literal["default", "small", "one_task"]
"""A batch's Spark settings: Spark's (``default``), :data:`SMALL_BATCH_CONF`, or
:data:`ONE_TASK_CONF` (its inputs read in one partition each)."""
_SIZE_CONF: Mapping[BatchSize, Mapping[str, str]] = {
    "default": {},
    "small": SMALL_BATCH_CONF,
    "one_task": ONE_TASK_CONF,
}


def configure_small_batch(session: SparkSession) -> None:
    """Set :data:`SMALL_BATCH_CONF` on a batch's own session (``newSession``, or one of
    :class:`BatchSessions`: the settings stay with that batch, other sessions keep theirs)."""
    for key, value in SMALL_BATCH_CONF.items():
        session.conf.set(key, value)


def single_partition(frame: DataFrame) -> DataFrame:
    """``frame`` in one partition, read by one task (``coalesce(1)``, no shuffle).

    A query over inputs of one partition each needs no exchange: a union of them is one
    partition (``spark.sql.unionOutputPartitioning``), and an aggregate, window, sort or
    join over one partition is computed in the task that reads it. A small batch's
    aggregate over five inputs was a job of six tasks in two stages, each task a fixed
    cost (its deserialization above all): one task, 69 -> 29 ms of driver JVM
    (bench/RESULTS-issue28.md, session 49). The schema PySpark knows of ``frame`` is
    kept: asking Spark for it again is two Py4J round trips and a parse."""
    return schema_kept(frame.coalesce(1), frame)


_EVALUATED_WHILE_PLANNING = frozenset(
    {"Project", "Filter", "LocalLimit", "GlobalLimit", "SubqueryAlias", "View", "LocalRelation"}
)
"""Logical operators Spark's optimizer evaluates over a local relation while it plans
(``ConvertToLocalRelation``; aliases and views are gone by then)."""


def sql_frame(session: SparkSession, query: str) -> DataFrame:
    """``session.sql(query)`` for a query without arguments: PySpark's own first formats
    the text and converts an empty list of arguments into the JVM's (three Py4J round
    trips more, about 0.3 ms of the driver's Python a query)."""
    return DataFrame(session._jsparkSession.sql(query), session)


def evaluated_while_planning(plan: Any) -> bool:
    """Whether a query's analyzed ``plan`` (a Py4J object) holds, above the views it
    reads and in the subqueries of its expressions, only operators the optimizer
    evaluates over local relations (:data:`_EVALUATED_WHILE_PLANNING`): over inputs the
    driver read, such a query's rows come out of its plan without a Spark job. The views'
    own plans are not looked at: a query is the same whether this batch's inputs are
    local relations or larger ones Spark reads. A few Py4J calls per operator."""
    pending = [plan]
    while pending:
        node = pending.pop()
        name = node.nodeName()
        if name not in _EVALUATED_WHILE_PLANNING:
            return False
        if name == "View":
            continue
        for nested in (node.children(), node.subqueries()):
            pending.extend(nested.apply(i) for i in range(nested.size()))
    return True


class BatchSessions:
    """Spark sessions reused batch after batch, one per key (a job).

    A new session builds its own state (catalog, analyzer, settings) at its first query:
    about 18 ms of driver JVM CPU, per batch when every batch has a session of its own. A
    reused session is handed out without temporary views (all of the session's are
    dropped); :meth:`size` then gives it the settings of a :data:`BatchSize`, setting only
    what its last batch left otherwise (each setting is a Py4J round trip, and most
    batches are the size of the one before). Only for batches that change nothing else in
    their session (the engine's own views and settings: a SQL transform's, none); a Python
    transform may change anything (settings, functions, cached tables) and gets a new
    session.

    One batch at a time per key: a job runs one batch at a time.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._sessions: dict[str, tuple[SparkSession, Any, Mapping[str, str | None]]] = {}
        self._sizes: dict[str, BatchSize] = {}
        """Per key, the settings its session has now."""
        self._lock = threading.Lock()

    def session(self, key: str) -> SparkSession:
        """``key``'s session, without temporary views (call :meth:`size` before a query)."""
        with self._lock:
            kept = self._sessions.get(key)
            if kept is None:
                session = self._spark.newSession()
                # The session's catalog of temporary views (one py4j round trip to clear).
                views = session._jsparkSession.sessionState().catalog()
                # None: a setting without a default value, unset in a new session.
                defaults = {k: session.conf.get(k) for k in ONE_TASK_CONF}
                self._sessions[key] = (session, views, defaults)
                self._sizes[key] = "default"
                return session
        session, views, _ = kept
        views.clearTempTables()
        return session

    def size(self, key: str, size: BatchSize) -> None:
        """Give ``key``'s session the settings of ``size`` (a new session's values of every
        other key of :data:`ONE_TASK_CONF`)."""
        session, _, defaults = self._sessions[key]
        if self._sizes[key] == size:
            return
        wanted = _SIZE_CONF[size]
        for name, default in defaults.items():
            value = wanted.get(name, default)
            if value is None:
                session.conf.unset(name)
            else:
                session.conf.set(name, value)
        self._sizes[key] = size


_SCALA_SOME = "scala.Some"


@dataclass(frozen=True)
class _ViewDefinition:
    """A view :func:`replace_temp_view` made: its schema, its definition (a Py4J
    ``TemporaryViewRelation``) and the definition's description (``tableMeta``)."""

    schema: StructType
    relation: Any
    description: Any


class _ViewDefinitions:
    """Per session, the definition of each view :func:`replace_temp_view` made, and the
    session's catalog of temporary views."""

    def __init__(self) -> None:
        self._by_session: weakref.WeakKeyDictionary[
            SparkSession, tuple[Any, dict[str, _ViewDefinition]]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, session: SparkSession) -> tuple[Any, dict[str, _ViewDefinition]]:
        with self._lock:
            known = self._by_session.get(session)
            if known is None:
                known = self._by_session[session] = (
                    session._jsparkSession.sessionState().catalog(),
                    {},
                )
            return known


_view_definitions = _ViewDefinitions()


def replace_temp_view(frame: DataFrame, name: str) -> None:
    """``frame.createOrReplaceTempView(name)``, in one catalog call when ``frame``'s
    session made a view ``name`` of the same schema before.

    Spark runs a view's creation as a command: an analysis of the frame's plan, a SQL
    execution and its listener events, about 10 ms of driver JVM per view, every input of
    every batch (a SQL transform reads its inputs as views). A view of a DataFrame is kept
    as its analyzed plan, with a description of the view (name, schema, properties) that
    only depends on the name and schema: this session's earlier definition is copied with
    the new plan and put in the session's catalog, as the command would put it there."""
    from py4j.java_gateway import JavaClass

    session = frame.sparkSession
    schema = frame.schema
    catalog, definitions = _view_definitions.of(session)
    known = definitions.get(name)
    if known is None or known.schema != schema:
        frame.createOrReplaceTempView(name)
        created = catalog.getRawTempView(name)
        if not created.isEmpty():
            relation = created.get()
            definitions[name] = _ViewDefinition(schema, relation, relation.tableMeta())
        return
    client = session.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    # The frame's plan as the view command takes it (for a query, its analyzed plan).
    plan = JavaClass(_SCALA_SOME, client)(frame._jdf.logicalPlan())
    catalog.createTempView(name, known.relation.copy(known.description, plan), True)


__all__ = [
    "BatchSessions",
    "BatchSize",
    "JVM_BOOT_NOTICES",
    "MASTER_CONNECT_TIMEOUT",
    "answer_without_delay",
    "check_master",
    "replace_temp_view",
    "DEFAULT_MASTER",
    "SMALL_BATCH_BYTES",
    "ONE_TASK_CONF",
    "SMALL_BATCH_CONF",
    "build_spark",
    "configure_small_batch",
    "evaluated_while_planning",
    "pass_scalars_through",
    "single_partition",
    "sql_frame",
]
