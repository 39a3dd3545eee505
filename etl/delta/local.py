"""Arrow data into and out of Spark's driver through local relations, without a Spark job.

A batch's small inputs reach Spark as a local relation (:func:`local_frame`), and Spark's
optimizer evaluates a projection, filter or limit over a local relation while it plans
(its rule ``ConvertToLocalRelation``): the rows of such a plan are in the driver before
anything runs. :func:`local_rows` hands them over as Arrow, as Spark Connect answers a
plan that is a local table scan, where ``toArrow`` would run a Spark job for them.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_PYTHON_SQL_UTILS = "org.apache.spark.sql.api.python.PythonSQLUtils"
"""Spark's helpers behind PySpark's ``createDataFrame`` of Arrow data."""
_ARROW_CONVERTERS = "org.apache.spark.sql.execution.arrow.ArrowConverters$"
"""Spark's Arrow conversions of rows (a Scala object: its one instance is ``MODULE$``)."""
_DATASET = "org.apache.spark.sql.classic.Dataset"
"""Spark's classic Dataset; its ``ofRows`` gives a plan a DataFrame in another session."""
LOCAL_RELATION = "LocalRelation"
"""The name of Spark's logical node of rows held in the plan itself."""
LOCAL_ROWS_BYTES = 512 * 1024
"""Rows of a local relation that Spark estimates at most this many bytes are taken from
the plan (:func:`local_rows`); larger ones are collected by a Spark job. They cross Py4J
as bytes in its text protocol, about 3 us of the driver's Python a row: a job's fixed
cost is smaller from about 20,000 rows of five columns (an estimate of 1 MB) on
(bench/RESULTS-issue28.md, session 45)."""
_BATCH_BYTES = 1 << 30
"""No bound of its own on an Arrow batch's bytes: the rows are already in the driver."""


@dataclass(frozen=True)
class _Helpers:
    """Spark's static methods the conversions call, looked up once per Py4J gateway: each
    lookup by name is a round trip (a reflection call) before the call itself."""

    read_arrow_stream: Any
    to_data_frame: Any
    of_rows: Any
    to_arrow_batches: Any


_helpers: weakref.WeakKeyDictionary[Any, _Helpers] = weakref.WeakKeyDictionary()
"""Per Py4J gateway client."""
_helpers_lock = threading.Lock()


def _helpers_of(spark: SparkSession) -> _Helpers:
    from py4j.java_gateway import JavaClass

    gateway = spark.sparkContext._gateway
    assert gateway is not None  # a classic (non-Connect) session
    client = gateway._gateway_client
    with _helpers_lock:
        known = _helpers.get(client)
        if known is None:
            utils = JavaClass(_PYTHON_SQL_UTILS, client)
            converters = getattr(JavaClass(_ARROW_CONVERTERS, client), "MODULE$")
            known = _Helpers(
                read_arrow_stream=utils.readArrowStreamFromFile,
                to_data_frame=utils.toDataFrame,
                of_rows=JavaClass(_DATASET, client).ofRows,
                to_arrow_batches=converters.toBatchWithSchemaIterator,
            )
            _helpers[client] = known
        return known


@dataclass(frozen=True)
class _ArrowSettings:
    large_types: bool
    max_records: int
    time_zone: str


_arrow_settings: weakref.WeakKeyDictionary[SparkSession, _ArrowSettings] = (
    weakref.WeakKeyDictionary()
)
_arrow_settings_lock = threading.Lock()


def _arrow_settings_of(session: SparkSession) -> _ArrowSettings:
    """The session's settings of Arrow conversions, read at its first conversion: the
    engine's sessions never change them (a batch changes only :data:`etl.spark`'s
    small-batch settings; a Python transform has a new session each batch)."""
    with _arrow_settings_lock:
        known = _arrow_settings.get(session)
    if known is None:
        conf = session._jsparkSession.sessionState().conf()
        known = _ArrowSettings(
            large_types=bool(conf.arrowUseLargeVarTypes()),
            max_records=int(conf.arrowMaxRecordsPerBatch()),
            time_zone=str(conf.sessionLocalTimeZone()),
        )
        with _arrow_settings_lock:
            _arrow_settings[session] = known
    return known


def known_schema(frame: DataFrame, schema: StructType) -> DataFrame:
    """``frame`` with its schema known to PySpark: it asks the JVM for a frame's schema
    once (two Py4J round trips and a parse of its JSON) and keeps it, as a cached
    property, which a frame whose schema is known already is given here."""
    frame.__dict__["schema"] = schema
    return frame


def schema_kept(derived: DataFrame, source: DataFrame) -> DataFrame:
    """``derived`` (a frame of the same schema as ``source``: a limit, a coalesce) with the
    schema PySpark knows of ``source``, if it knows it."""
    known = source.__dict__.get("schema")
    return derived if known is None else known_schema(derived, known)


def local_frame(
    spark: SparkSession,
    batches: Sequence[pa.RecordBatch],
    arrow: pa.Schema,
    schema: StructType,
    *,
    schema_json: str | None = None,
) -> DataFrame:
    """``batches`` (of ``arrow``, ``schema``'s Arrow form in UTC) as a DataFrame: what
    ``spark.createDataFrame`` of their table builds (a local relation, or a parallelized
    one above ``spark.sql.execution.arrow.localRelationThreshold``), through three Py4J
    calls where it makes about forty (it reads eight settings, each element of their
    list a call, and looks Spark's helper class up by name, which the JVM first tries
    as a class of the default package, scanning every jar). ``schema_json``:
    ``schema.json()``, when the caller has it already."""
    from pyspark.sql.dataframe import DataFrame

    context = spark.sparkContext
    helpers = _helpers_of(spark)
    with tempfile.NamedTemporaryFile(dir=context._temp_dir, delete=False) as handle:
        path = handle.name
        if batches:  # as PySpark writes it: no stream at all for no batch
            with pa.ipc.new_stream(handle, arrow) as writer:
                for batch in batches:
                    writer.write_batch(batch)
    try:
        read = helpers.read_arrow_stream(path)
    finally:
        os.unlink(path)
    frame = DataFrame(
        helpers.to_data_frame(read, schema_json or schema.json(), spark._jsparkSession), spark
    )
    return known_schema(frame, schema)


SHARED_RELATIONS_KEPT = 16
"""Local relations :func:`shared_local_frame` keeps (and at most
:data:`SHARED_RELATION_BYTES` of their Arrow rows in all)."""
SHARED_RELATION_BYTES = 64 * 1024 * 1024


class _SharedRelation:
    """A local relation kept for reuse: the Py4J Dataset first built over it, and its
    logical plan once a second session asked for it (most relations are read once: a
    fan-in's inputs; asking for the plan of each is a round trip for nothing)."""

    __slots__ = ("dataset", "plan")

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.plan: Any = None

    def logical_plan(self) -> Any:
        if self.plan is None:
            self.plan = self.dataset.logicalPlan()
        return self.plan


class _SharedRelations:
    """Local relations by what they hold, least recently used dropped first."""

    def __init__(self) -> None:
        self._plans: OrderedDict[Hashable, tuple[_SharedRelation, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> _SharedRelation | None:
        with self._lock:
            kept = self._plans.get(key)
            if kept is None:
                return None
            self._plans.move_to_end(key)
            return kept[0]

    def put(self, key: Hashable, dataset: Any, size: int) -> None:
        with self._lock:
            if key in self._plans:
                return
            self._plans[key] = (_SharedRelation(dataset), size)
            self._bytes += size
            while self._plans and (
                len(self._plans) > SHARED_RELATIONS_KEPT or self._bytes > SHARED_RELATION_BYTES
            ):
                _, (_, dropped) = self._plans.popitem(last=False)
                self._bytes -= dropped


_shared = _SharedRelations()


def shared_local_frame(
    spark: SparkSession,
    key: Hashable,
    read: Callable[[], Sequence[pa.RecordBatch]],
    arrow: pa.Schema,
    schema: StructType,
    *,
    schema_json: str | None = None,
) -> DataFrame:
    """:func:`local_frame` of the batches ``read`` returns, which ``key`` identifies (say,
    immutable files): the local relation built for ``key`` is kept and given to the next
    session that asks for it, so the rows are read, converted and checked by Spark once.

    A fan-out's jobs all read their input's newest epoch: converting its rows into a local
    relation, and Spark's analysis of it, cost the driver JVM about 2.5 ms a thousand rows
    each time (bench/RESULTS-issue28.md, session 47)."""
    from pyspark.sql.dataframe import DataFrame

    kept = _shared.get(key)
    if kept is None:
        batches = read()
        frame = local_frame(spark, batches, arrow, schema, schema_json=schema_json)
        _shared.put(key, frame._jdf, sum(b.nbytes for b in batches))
        return frame
    plan = kept.logical_plan()
    frame = DataFrame(_helpers_of(spark).of_rows(spark._jsparkSession, plan), spark)
    return known_schema(frame, schema)


def local_rows(
    frame: DataFrame, plan=None, *, node: str | None = None, estimate: int | None = None
) -> pa.Table | None:
    """``frame``'s rows as ``frame.toArrow()`` gives them (timestamps in UTC), without a
    Spark job, when its optimized plan (``plan``, a Py4J object, when the caller has it)
    is a local relation that Spark estimates at most :data:`LOCAL_ROWS_BYTES`; None
    otherwise. ``node`` and ``estimate``: the plan's node name and
    :func:`estimated_bytes`, when the caller asked Spark for them already."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if plan is None:
        plan = frame._jdf.queryExecution().optimizedPlan()
    if (node or plan.nodeName()) != LOCAL_RELATION:
        return None
    if (estimated_bytes(plan) if estimate is None else estimate) > LOCAL_ROWS_BYTES:
        return None
    session = frame.sparkSession
    settings = _arrow_settings_of(session)
    # Each element is an Arrow IPC stream of its own (schema and one batch), as toArrow's
    # job writes per partition, with the session's time zone, duplicate field names refused.
    streams = _helpers_of(session).to_arrow_batches(
        plan.data().iterator(),
        frame._jdf.schema(),
        settings.max_records,
        _BATCH_BYTES,
        settings.time_zone,
        True,
        settings.large_types,
    )
    try:
        tables = []
        while streams.hasNext():
            tables.append(pa.ipc.open_stream(bytes(streams.next())).read_all())
    finally:
        streams.close()
    schema = to_arrow_schema(
        frame.schema,
        error_on_duplicated_field_names_in_struct=True,
        timezone="UTC",
        prefers_large_types=settings.large_types,
    )
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables).cast(schema)


def estimated_bytes(plan) -> int:
    """Spark's estimate of the bytes of a logical ``plan`` (a Py4J object)."""
    # A Scala BigInt: py4j hands over a Python int or an object whose str is the number.
    return int(str(plan.stats().sizeInBytes()))


__all__ = [
    "LOCAL_RELATION",
    "LOCAL_ROWS_BYTES",
    "SHARED_RELATIONS_KEPT",
    "SHARED_RELATION_BYTES",
    "estimated_bytes",
    "known_schema",
    "local_frame",
    "local_rows",
    "schema_kept",
    "shared_local_frame",
]
