"""The Kafka source: cut slices (offset ranges up to the barrier) and read them in Spark tasks.

The rules are in :mod:`etl.sources.kafka` (slices, barriers, reading, decoding).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

from catalog import as_utc, validate_name
from etl.delta.log import EPOCH_COLUMN
from etl.errors import SourceError
from etl.sources.base import (
    DirectSlice,
    DirectWrite,
    SliceData,
    SliceRequest,
    Source,
    WrittenSlice,
    WrittenTable,
)
from etl.sources.kafka.bounds import BarrierKind, Bounds, Range, micros
from etl.sources.kafka.decode import (
    KIND_TAG,
    METADATA_COLUMNS,
    KeyFormat,
    MetadataColumn,
    Unsupported,
    ValueFormat,
    struct_members,
)
from etl.sources.kafka.errors import KafkaDataLossError, KafkaReadError, KafkaTopicError
from etl.sources.kafka.task import (
    POLL_MS,
    REJECT_COLUMNS,
    REJECTS_TABLE,
    ROWS_TABLE,
    SliceWriter,
    TaskPlan,
)

if TYPE_CHECKING:
    from kafka import KafkaConsumer, TopicPartition
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

LatePolicy = Literal["next_epoch", "reject"]

_CONSUMER_DEFAULTS: Mapping[str, object] = {
    "isolation_level": "read_committed",
    # An empty fetch waits this long; a cut waits for one on every partition with nothing new.
    "fetch_max_wait_ms": 100,
    "max_partition_fetch_bytes": 8 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "max_poll_records": 20_000,
}

_CONSUMER_FIXED_KEYS = frozenset(
    {
        "bootstrap_servers",
        "group_id",
        "enable_auto_commit",
        "auto_offset_reset",
        "allow_auto_create_topics",
        "key_deserializer",
        "value_deserializer",
    }
)

# Under read_committed an open transaction holds the readable end (the last stable
# offset) below the high watermark, and kafka-python does not report the LSO: a
# partition that returns nothing for this long is taken to end at the consumer position.
_STABLE_END_IDLE_S = 1.0
_WINDOW_FIRST = 1_024
_REACH_TIMEOUT_S = 3.0
"""How long validation waits for the brokers (``KafkaSource.unreachable``)."""


class KafkaSource(Source):
    """Kafka topics as a root source. See the module documentation for the rules."""

    def __init__(
        self,
        name: str,
        *,
        topics: Sequence[str],
        bootstrap_servers: str,
        value_format: ValueFormat = "json",
        schema: StructType | str | None = None,
        key_format: KeyFormat = "string",
        include: frozenset[MetadataColumn] | set[MetadataColumn] = frozenset(),
        barrier: BarrierKind = "system_time",
        event_time_column: str | None = None,
        allowed_lateness: timedelta = timedelta(0),
        late_records: LatePolicy = "next_epoch",
        backlog_records: int | None = None,
        max_records_per_task: int = 100_000,
        max_records_per_micro_batch: int | None = None,
        consumer_options: Mapping[str, object] | None = None,
        timeout: timedelta = timedelta(seconds=60),
    ) -> None:
        self.name = validate_name(name, kind="source")

        def bad(problem: str) -> SourceError:
            return SourceError(source=name, problem=problem)

        if isinstance(topics, str) or not topics:
            raise bad("topics must be a non-empty sequence of topic names")
        if value_format not in get_args(ValueFormat):
            raise bad(f"unknown value_format {value_format!r}; use json, string or bytes")
        if key_format not in get_args(KeyFormat):
            raise bad(f"unknown key_format {key_format!r}; use string, bytes or none")
        if barrier not in get_args(BarrierKind):
            raise bad(f"unknown barrier {barrier!r}; use system_time or event_time")
        if late_records not in get_args(LatePolicy):
            raise bad(f"unknown late_records policy {late_records!r}; use next_epoch or reject")
        unknown = set(include) - set(METADATA_COLUMNS)
        if unknown:
            raise bad(f"unknown include columns {sorted(unknown)}; use {list(METADATA_COLUMNS)}")
        if "key" in include and key_format == "none":
            raise bad('include has "key" but key_format is "none"')
        if value_format == "json" and schema is None:
            raise bad("json values need a schema (a StructType or a DDL string)")
        if value_format != "json" and schema is not None:
            raise bad(f"a schema only applies to json values, not {value_format}")
        if barrier == "event_time" and (value_format != "json" or not event_time_column):
            raise bad("event_time barriers need json values and an event_time_column")
        if barrier == "system_time" and event_time_column:
            raise bad('event_time_column is only used with barrier="event_time"')
        if allowed_lateness < timedelta(0):
            raise bad("allowed_lateness cannot be negative")
        if backlog_records is not None and backlog_records < 1:
            raise bad("backlog_records must be at least 1 (or None)")
        if max_records_per_task < 1:
            raise bad("max_records_per_task must be at least 1")
        if max_records_per_micro_batch is not None and max_records_per_micro_batch < 1:
            raise bad("max_records_per_micro_batch must be at least 1 (or None)")
        fixed = _CONSUMER_FIXED_KEYS & set(consumer_options or {})
        if fixed:
            raise bad(f"consumer_options may not set {sorted(fixed)}: the source controls them")

        self.topics = tuple(dict.fromkeys(topics))
        self.bootstrap_servers = bootstrap_servers
        self.value_format: ValueFormat = value_format
        self.schema = schema
        self.key_format: KeyFormat = key_format
        self.include = frozenset(include)
        self.barrier: BarrierKind = barrier
        self.event_time_column = event_time_column
        self.allowed_lateness = allowed_lateness
        self.late_records: LatePolicy = late_records
        self.backlog_records = backlog_records
        self.max_records_per_task = max_records_per_task
        self.max_records_per_micro_batch = max_records_per_micro_batch
        self.consumer_options = dict(consumer_options or {})
        self.timeout = timeout
        self.produces_rejects = (
            value_format != "bytes" or key_format == "string" or barrier == "event_time"
        )
        self._struct: StructType | None = None
        self._columns: tuple[StructType, StructType | None] | None = None
        if not isinstance(schema, str) or _spark_is_active():
            self._payload_schema()  # validate now; a DDL string needs a running Spark

    # -- configuration helpers ---------------------------------------------------------

    def _payload_schema(self) -> StructType | None:
        """The JSON schema as a StructType (parsed and validated once)."""
        from pyspark.sql.types import DataType, StructType, TimestampNTZType, TimestampType

        if self.schema is None or self._struct is not None:
            return self._struct
        parsed = (
            self.schema if isinstance(self.schema, StructType) else DataType.fromDDL(self.schema)
        )
        if not isinstance(parsed, StructType):
            raise SourceError(source=self.name, problem=f"schema {self.schema!r} is not a struct")
        reserved = {f.name for f in parsed.fields} & (
            set(METADATA_COLUMNS.values()) | {KIND_TAG, EPOCH_COLUMN}
        )
        if reserved:
            raise SourceError(
                source=self.name, problem=f"schema fields {sorted(reserved)} are reserved names"
            )
        try:
            struct_members(parsed, "")
        except Unsupported as exc:
            raise SourceError(source=self.name, problem=str(exc)) from exc
        if self.event_time_column is not None:
            found = [f for f in parsed.fields if f.name == self.event_time_column]
            if not found or not isinstance(found[0].dataType, TimestampType | TimestampNTZType):
                raise SourceError(
                    source=self.name,
                    problem=f"event_time_column {self.event_time_column!r} must be a top-level "
                    "timestamp field of the schema",
                )
        self._struct = parsed
        return parsed

    def _consumer_config(self) -> dict[str, object]:
        return {
            **_CONSUMER_DEFAULTS,
            **self.consumer_options,
            "bootstrap_servers": self.bootstrap_servers,
            "group_id": None,
            "enable_auto_commit": False,
            "auto_offset_reset": "none",
            "allow_auto_create_topics": False,
        }

    def _consumer(self) -> KafkaConsumer:
        from kafka import KafkaConsumer

        try:
            return KafkaConsumer(**self._consumer_config())
        except Exception as exc:  # noqa: BLE001 - reported with its cause
            raise SourceError(
                source=self.name,
                problem=f"cannot connect to Kafka at {self.bootstrap_servers}: "
                f"{type(exc).__name__}: {exc}",
            ) from exc

    def _partitions(self, consumer: KafkaConsumer) -> list[TopicPartition]:
        from kafka import TopicPartition

        found: list[TopicPartition] = []
        for topic in self.topics:
            ids = consumer.partitions_for_topic(topic)
            if not ids:
                raise KafkaTopicError(
                    source=self.name,
                    topic=topic,
                    partition=None,
                    problem="does not exist (or is not visible to this client); create it, "
                    "or fix the source's topics",
                )
            found.extend(TopicPartition(topic, p) for p in sorted(ids))
        return found

    def unreachable(self) -> str | None:
        """Whether the brokers answer and every topic exists, asked in a daemon thread that
        is given up after a few seconds (a metadata request to an unreachable broker can
        wait much longer)."""
        found: list[str | None] = []

        def ask() -> None:
            from kafka import KafkaConsumer

            try:
                consumer = KafkaConsumer(
                    **{
                        **self._consumer_config(),
                        "request_timeout_ms": int(_REACH_TIMEOUT_S * 1000),
                        "bootstrap_timeout_ms": int(_REACH_TIMEOUT_S * 1000),
                    }
                )
            except Exception as exc:  # noqa: BLE001 - reported with its cause
                found.append(
                    f"cannot reach Kafka at {self.bootstrap_servers} ({type(exc).__name__}): "
                    "start the broker, or fix bootstrap_servers"
                )
                return
            try:
                topics = consumer.topics()
                missing = [t for t in self.topics if t not in topics]
                found.append(
                    f"topic(s) {missing} do not exist at {self.bootstrap_servers} (or are not "
                    "visible to this client): create them, or fix the source's topics"
                    if missing
                    else None
                )
            finally:
                consumer.close()

        thread = threading.Thread(target=ask, name=f"reach-{self.name}", daemon=True)
        thread.start()
        thread.join(_REACH_TIMEOUT_S + 1.0)
        if not found:
            return (
                f"Kafka at {self.bootstrap_servers} did not answer within "
                f"{_REACH_TIMEOUT_S + 1.0:.0f} s: start the broker, or fix bootstrap_servers"
            )
        return found[0]

    # -- cutting -----------------------------------------------------------------------

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        previous = (
            Bounds.parse(self.name, request.previous_bounds) if request.previous_bounds else None
        )
        barrier_ts = as_utc(request.barrier_ts)
        barrier_ms = micros(barrier_ts) // 1000
        late_before = None
        if self.barrier == "event_time" and previous is not None:
            late_before = as_utc(previous.barrier_ts) - self.allowed_lateness
        previous_ends = {(r.topic, r.partition): r.end for r in previous.ranges} if previous else {}

        consumer = self._consumer()
        try:
            partitions = self._partitions(consumer)
            vanished = sorted(set(previous_ends) - {(tp.topic, tp.partition) for tp in partitions})
            if vanished:
                topic, partition = vanished[0]
                raise KafkaTopicError(
                    source=self.name,
                    topic=topic,
                    partition=partition,
                    problem="was in the previous slice but no longer exists (the topic was "
                    "deleted or recreated); its records after offset "
                    f"{previous_ends[(topic, partition)]} cannot be read",
                )
            earliest = consumer.beginning_offsets(partitions)
            reported_end = consumer.end_offsets(partitions)
            starts: dict[TopicPartition, int] = {}
            for tp in partitions:
                start = previous_ends.get((tp.topic, tp.partition), earliest[tp])
                if earliest[tp] > start:
                    raise KafkaDataLossError(
                        source=self.name,
                        topic=tp.topic,
                        partition=tp.partition,
                        expected_offset=start,
                        earliest_offset=earliest[tp],
                    )
                starts[tp] = start
            # ListOffsets "latest" is a lower bound of the log end (exact on Kafka, the last
            # batch's base offset + 1 on tansu): read on from one record before it, or from
            # one before where the records after the barrier probably begin if that is lower.
            hints = self._after_barrier_hints(consumer, partitions, barrier_ms)
            scan_from = {
                tp: max(starts[tp], min(reported_end[tp], hints.get(tp, reported_end[tp])) - 1)
                for tp in partitions
            }
            tails = self._scan(consumer, {tp: (scan_from[tp], None) for tp in partitions})
            for tp in partitions:
                if tails[tp].end < starts[tp]:
                    raise KafkaTopicError(
                        source=self.name,
                        topic=tp.topic,
                        partition=tp.partition,
                        problem=f"ends at offset {tails[tp].end}, before offset {starts[tp]} "
                        "where the previous slice ended: the topic was recreated or truncated",
                    )
            ends = self._barrier_ends(consumer, starts, scan_from, tails, barrier_ms)
            ranges = [Range(tp.topic, tp.partition, starts[tp], ends[tp]) for tp in partitions]
        finally:
            consumer.close()
        return Bounds(self.barrier, barrier_ts, late_before, tuple(ranges)).to_json()

    def _after_barrier_hints(
        self, consumer: KafkaConsumer, partitions: list[TopicPartition], barrier_ms: int
    ) -> dict[TopicPartition, int]:
        """Per partition, the broker's first offset with a timestamp after the barrier.

        Only a hint of where to start reading: timestamps need not grow with offsets, and
        brokers answer coarsely (tansu per batch, by append time). The cut is exact
        whatever it is. Answers whose timestamp is not after the barrier (tansu's offset 0
        past the end) are dropped: reading from them would cost, not help.
        """
        from kafka.errors import KafkaError

        try:
            answers = consumer.offsets_for_times({tp: barrier_ms + 1 for tp in partitions})
        except KafkaError:
            return {}
        return {
            tp: answer.offset
            for tp, answer in answers.items()
            if answer is not None and answer.timestamp > barrier_ms
        }

    def _barrier_ends(
        self,
        consumer: KafkaConsumer,
        starts: Mapping[TopicPartition, int],
        scan_from: Mapping[TopicPartition, int],
        tails: Mapping[TopicPartition, _Scanned],
        barrier_ms: int,
    ) -> dict[TopicPartition, int]:
        """One past the last record at or before the barrier, per partition: in its tail
        (read from ``scan_from`` to the end), else searching back below it in windows that
        grow fourfold, the partitions still searching read together."""
        found = {tp: tail.last_at_or_before(barrier_ms) for tp, tail in tails.items()}
        high, width = dict(scan_from), _WINDOW_FIRST
        while searching := [tp for tp, at in found.items() if at is None and high[tp] > starts[tp]]:
            low = {tp: max(starts[tp], high[tp] - width) for tp in searching}
            windows = self._scan(consumer, {tp: (low[tp], high[tp]) for tp in searching})
            for tp in searching:
                found[tp] = windows[tp].last_at_or_before(barrier_ms)
                high[tp] = low[tp]
            width *= 4
        return {tp: starts[tp] if at is None else at + 1 for tp, at in found.items()}

    def _scan(
        self, consumer: KafkaConsumer, plan: Mapping[TopicPartition, tuple[int, int | None]]
    ) -> dict[TopicPartition, _Scanned]:
        """Read (offset, timestamp) of the records in ``[low, high)`` for each partition.

        ``high=None`` reads to the log end: the high watermark of the first Fetch response.
        """
        from kafka.errors import OffsetOutOfRangeError

        consumer.assign(list(plan))
        scans = {tp: _Scanned(end=low, target=high) for tp, (low, high) in plan.items()}
        for tp, (low, _) in plan.items():
            consumer.seek(tp, low)
        read_committed = self._consumer_config()["isolation_level"] == "read_committed"
        pending = set(plan)
        patience = self.timeout.total_seconds()
        while pending:
            try:
                polled = consumer.poll(timeout_ms=POLL_MS)
            except OffsetOutOfRangeError as exc:
                tp = next(iter(exc.args[0])) if exc.args and isinstance(exc.args[0], dict) else None
                raise KafkaTopicError(
                    source=self.name,
                    topic=tp.topic if tp else ",".join(self.topics),
                    partition=tp.partition if tp else None,
                    problem="an offset the previous slice reached is beyond the log end: the "
                    "topic was recreated or truncated",
                ) from exc
            now = time.monotonic()
            for tp, records in polled.items():
                scan = scans[tp]
                for record in records:
                    if scan.target is not None and record.offset >= scan.target:
                        break
                    scan.stamps.append((record.offset, record.timestamp))
                scan.last_progress = now
            for tp in sorted(pending):
                scan = scans[tp]
                if scan.target is None:
                    scan.target = consumer.highwater(tp)
                position = consumer.position(tp)
                if scan.target is None:
                    done = False
                elif position >= scan.target:
                    done, position = True, scan.target
                else:
                    done = (
                        read_committed
                        and plan[tp][1] is None
                        and (now - scan.last_progress > _STABLE_END_IDLE_S)
                    )
                if done:
                    scan.end = position
                    pending.discard(tp)
                    consumer.pause(tp)
                elif now - scan.last_progress > patience:
                    raise KafkaReadError(
                        source=self.name,
                        topic=tp.topic,
                        partition=tp.partition,
                        problem=f"the broker did not deliver offsets {plan[tp][0]}.."
                        f"{scan.target if scan.target is not None else 'end'} within "
                        f"{self.timeout} (reached {position})",
                    )
        consumer.resume(*plan)
        return scans

    def is_backlogged(self, previous_bounds: Mapping[str, object] | None) -> bool:
        """More than ``backlog_records`` records wait beyond the previous slice (a lower bound)."""
        if self.backlog_records is None or previous_bounds is None:
            return False
        previous = Bounds.parse(self.name, previous_bounds)
        ends = {(r.topic, r.partition): r.end for r in previous.ranges}
        consumer = self._consumer()
        try:
            partitions = self._partitions(consumer)
            earliest = consumer.beginning_offsets(partitions)
            latest = consumer.end_offsets(partitions)
        finally:
            consumer.close()
        behind = sum(
            max(0, latest[tp] - ends.get((tp.topic, tp.partition), earliest[tp]))
            for tp in partitions
        )
        return behind > self.backlog_records

    def micro_batches(self, bounds: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        """Consecutive pieces of at most ``max_records_per_micro_batch`` offsets, in range order."""
        size = self.max_records_per_micro_batch
        parsed = Bounds.parse(self.name, bounds)
        if size is None or sum(r.end - r.start for r in parsed.ranges) <= size:
            return (bounds,)
        parts: list[list[Range]] = [[]]
        room = size
        for r in parsed.ranges:
            low = r.start
            while low < r.end:
                if room == 0:
                    parts.append([])
                    room = size
                high = min(r.end, low + room)
                parts[-1].append(Range(r.topic, r.partition, low, high))
                room -= high - low
                low = high
        return tuple(replace(parsed, ranges=tuple(part)).to_json() for part in parts)

    # -- reading -----------------------------------------------------------------------

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        self.check_replayable(bounds, epoch=epoch)
        plan = self._task_plan(spark, Bounds.parse(self.name, bounds))
        union = self._union_schema()
        if plan is None:
            return self._split(spark.createDataFrame([], union), epoch=epoch)
        return self._split(
            spark.range(0, len(plan.pieces), 1, numPartitions=len(plan.pieces))
            .mapInArrow(plan.run, union)
            .localCheckpoint(eager=False),
            epoch=epoch,
        )

    def _split(self, tagged: DataFrame, *, epoch: int) -> SliceData:
        """The rows and the rejects of the tasks' tagged records."""
        from pyspark.sql import functions as F

        rows = tagged.where(F.col(KIND_TAG).isNull()).select(*(f.name for f in self._row_fields()))
        if not self.produces_rejects:
            return SliceData(rows=rows)
        rejects = tagged.where(F.col(KIND_TAG).isNotNull()).select(
            *(F.col(column).alias(name) for name, column in REJECT_COLUMNS.items()),
            F.lit(epoch).cast("long").alias(EPOCH_COLUMN),
        )
        return SliceData(rows=rows, rejects=rejects)

    def read_direct(
        self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int
    ) -> DirectSlice:
        self.check_replayable(bounds, epoch=epoch)
        plan = self._task_plan(spark, Bounds.parse(self.name, bounds))
        if self._columns is None:
            # The columns of read's frames, as Spark analyses them (a filter makes the
            # columns it requires non-null), once: they depend on the source's settings only.
            empty = self._split(spark.createDataFrame([], self._union_schema()), epoch=epoch)
            self._columns = (
                empty.rows.schema,
                empty.rejects.schema if empty.rejects is not None else None,
            )
        rows, rejects = self._columns
        row_columns = tuple(rows.fieldNames())

        def write(target: DirectWrite) -> WrittenSlice:
            return _write_directly(spark, plan, row_columns, target)

        return DirectSlice(rows=rows, rejects=rejects, write=write)

    def _task_plan(self, spark: SparkSession, bounds: Bounds) -> TaskPlan | None:
        """What the slice's Spark tasks read, one task per piece of at most
        ``max_records_per_task`` offsets; None for an empty slice."""
        from pyspark.sql.pandas.types import to_arrow_schema

        pieces = [
            Range(r.topic, r.partition, low, min(low + self.max_records_per_task, r.end))
            for r in bounds.ranges
            for low in range(r.start, r.end, self.max_records_per_task)
        ]
        if not pieces:
            return None
        return TaskPlan(
            source=self.name,
            consumer=self._consumer_config(),
            pieces=tuple(pieces),
            value_format=self.value_format,
            key_format=self.key_format,
            payload=self._payload_schema(),
            event_time_column=self.event_time_column,
            late_before_us=micros(bounds.late_before) if bounds.late_before else None,
            reject_late=self.late_records == "reject",
            arrow_schema=to_arrow_schema(
                self._union_schema(), timezone=spark.conf.get("spark.sql.session.timeZone")
            ),
            timeout_s=self.timeout.total_seconds(),
        )

    def check_replayable(self, bounds: Mapping[str, object], *, epoch: int) -> None:
        """KafkaDataLossError (on the driver) if records of the slice were deleted."""
        from kafka import TopicPartition

        firsts = {
            TopicPartition(r.topic, r.partition): r.start
            for r in Bounds.parse(self.name, bounds).ranges
            if r.start < r.end
        }
        if not firsts:
            return
        consumer = self._consumer()
        try:
            earliest = consumer.beginning_offsets(list(firsts))
        finally:
            consumer.close()
        for tp, first in firsts.items():
            if earliest[tp] > first:
                raise KafkaDataLossError(
                    source=self.name,
                    topic=tp.topic,
                    partition=tp.partition,
                    expected_offset=first,
                    earliest_offset=earliest[tp],
                    epoch=epoch,
                )

    def _row_fields(self) -> list[Any]:
        from pyspark.sql.types import BinaryType, StringType, StructField

        payload = self._payload_schema()
        if payload is not None:
            fields = [StructField(f.name, f.dataType, True, f.metadata) for f in payload.fields]
        else:
            value_type = StringType() if self.value_format == "string" else BinaryType()
            fields = [StructField("value", value_type, True)]
        metadata = _metadata_fields(self.key_format)
        return fields + [metadata[c] for c in METADATA_COLUMNS if c in self.include]

    def _union_schema(self) -> StructType:
        """One row per record: the row columns, plus reject columns set for rejects only."""
        from pyspark.sql.types import BinaryType, StringType, StructField, StructType

        fields = self._row_fields()
        present = {f.name for f in fields}
        metadata = _metadata_fields(self.key_format)
        fields += [
            metadata[c]
            for c in ("topic", "partition", "offset", "timestamp")
            if metadata[c].name not in present
        ]
        fields += [
            StructField("_reject_key", BinaryType(), True),
            StructField("_reject_value", BinaryType(), True),
            StructField(KIND_TAG, StringType(), True),
            StructField("_reject_detail", StringType(), True),
        ]
        return StructType(fields)


def _write_directly(
    spark: SparkSession, plan: TaskPlan | None, row_columns: tuple[str, ...], target: DirectWrite
) -> WrittenSlice:
    """The slice of ``plan`` written by its tasks (:class:`SliceWriter`) in one Spark job
    that collects only the files' descriptors; nothing when the slice is empty."""
    from etl.delta.files import WRITTEN_FILE, record_file

    found: dict[str, list[Any]] = {ROWS_TABLE: [], REJECTS_TABLE: []}
    if plan is not None:
        task = SliceWriter(plan=plan, target=target, row_columns=row_columns)
        described = (
            spark.range(0, len(plan.pieces), 1, numPartitions=len(plan.pieces))
            .mapInArrow(task.run, f"table string, {WRITTEN_FILE}")
            .collect()
        )
        for row in described:
            found[row["table"]].append(record_file(row.asDict()))

    def written(table: str, schema: Any) -> WrittenTable:
        return WrittenTable(schema, tuple(sorted(found[table], key=lambda f: f.path)))

    return WrittenSlice(
        rows=written(ROWS_TABLE, target.rows.schema),
        rejects=written(REJECTS_TABLE, target.rejects.schema) if target.rejects else None,
    )


def _spark_is_active() -> bool:
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _metadata_fields(key_format: KeyFormat) -> dict[str, Any]:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType(
        [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
    )
    return {
        "topic": StructField(METADATA_COLUMNS["topic"], StringType(), True),
        "partition": StructField(METADATA_COLUMNS["partition"], IntegerType(), True),
        "offset": StructField(METADATA_COLUMNS["offset"], LongType(), True),
        "timestamp": StructField(METADATA_COLUMNS["timestamp"], TimestampType(), True),
        "key": StructField(
            METADATA_COLUMNS["key"], StringType() if key_format == "string" else BinaryType(), True
        ),
        "headers": StructField(METADATA_COLUMNS["headers"], ArrayType(header, True), True),
    }


@dataclass
class _Scanned:
    """What a cut-time scan of one partition saw."""

    end: int
    target: int | None
    stamps: list[tuple[int, int]] = field(default_factory=list)
    last_progress: float = field(default_factory=time.monotonic)

    def last_at_or_before(self, barrier_ms: int) -> int | None:
        for offset, timestamp in reversed(self.stamps):
            if timestamp <= barrier_ms:  # -1: no timestamp, never holds a slice back
                return offset
        return None


__all__ = [
    "KafkaSource",
    "LatePolicy",
]
