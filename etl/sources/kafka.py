"""Kafka topics as a root source, read with kafka-python and spread over Spark tasks.

Slices
    The bounds of a slice are, for every partition of the topics, an offset range
    ``[start, end)``. ``start`` is the previous slice's ``end`` (a partition that is new
    to the source starts at its earliest offset), so consecutive slices are contiguous
    and nothing is read twice or skipped. If records the next slice needs were deleted
    (retention) the cut fails with :class:`KafkaDataLossError`: it never skips them.

Where a slice ends (both barrier kinds)
    The offsets are cut by record timestamp: a partition's range ends just after the
    *last* record, in offset order, whose timestamp is at or before the barrier timestamp
    (records without a timestamp count as before). When timestamps are in offset order,
    which they are for LogAppendTime topics and for each single producer, this is exactly
    "every record with timestamp <= barrier, and none after". With out-of-order
    timestamps a record stamped after the barrier but followed by one stamped before it
    joins the earlier slice; a record that arrives after the cut joins the next slice
    whatever its timestamp. For a ``--once`` run (barrier = now) every record that was in
    the topic when the cut started is in the slice.

    The log end is taken from the high watermark of Fetch responses: ListOffsets
    "latest" is only used as a lower bound to start reading from, because some brokers
    (tansu, see :mod:`etl.sources.kafka_broker`) report the base offset of the last
    batch there. The cut reads only the records between that lower bound and the log
    end, plus, if they are all after the barrier, earlier windows of growing size until
    it finds one that is not: it never reads the slice itself.

Event-time barriers
    The offset ranges are cut as above, so an idle or slow partition never stalls an
    epoch. The payload column ``event_time_column`` then decides lateness: every slice
    records ``late_before`` = (previous slice's barrier timestamp - ``allowed_lateness``).
    A record whose event time is before ``late_before`` belongs to an epoch that is
    already sealed; it is *late* and handled by ``late_records``: ``"next_epoch"`` keeps it
    as a row of the slice being read (the first epoch still open), ``"reject"`` sends it to
    the rejects with reason ``"late"``. The first slice has no late records. Because
    ``late_before`` is recorded in the bounds, a replay classifies every record alike.

Reading
    ``read`` splits each range into sub-ranges of at most ``max_records_per_task`` offsets,
    one Spark task each; a task assigns its partition, seeks to the start and consumes
    until its position reaches the end (compaction gaps and transaction markers are
    offsets without records, so the position, not the last record, decides). Each task
    decodes its records and returns one Arrow stream tagging every record as a row or a
    reject. That tagged result is locally checkpointed (on first use, in the executors'
    block managers) and split into ``rows`` and ``rejects``: writing both reads Kafka
    once, and nothing is collected on the driver. The checkpoint is freed when both
    DataFrames are garbage collected.

Micro-batches
    With ``max_records_per_micro_batch`` the engine commits a slice in consecutive pieces
    of at most that many offsets (ranges in bounds order, split where a piece is full),
    before sealing the epoch. The split depends on the recorded bounds only, so a replay
    after a crash splits alike.

Decoding
    ``value_format="json"`` parses each value and validates it against ``schema`` in the
    task: JSON types must match the Spark types (integers in range, strings for
    strings, ISO-8601 strings for timestamps and dates, base64 for binary), and fields
    declared NOT NULL must be present and non-null; unknown fields are ignored. A record
    that cannot be decoded or fails the schema becomes a reject (topic, partition,
    offset, timestamp, raw key, raw value, reason, detail): nothing crashes the job and
    nothing is dropped. Every offset in the bounds that holds a record appears exactly
    once, in the rows or in the rejects.
"""

from __future__ import annotations

import base64
import decimal
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

from catalog import validate_name
from etl.errors import SourceError
from etl.sources.base import SliceData, SliceRequest, Source

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka import KafkaConsumer, TopicPartition
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "KAFKA_REJECT_COLUMNS",
    "METADATA_COLUMNS",
    "KafkaDataLossError",
    "KafkaReadError",
    "KafkaSource",
    "KafkaTopicError",
]

ValueFormat = Literal["json", "string", "bytes"]
KeyFormat = Literal["string", "bytes", "none"]
BarrierKind = Literal["system_time", "event_time"]
LatePolicy = Literal["next_epoch", "reject"]
MetadataColumn = Literal["topic", "partition", "offset", "timestamp", "key", "headers"]
RejectReason = Literal["decode", "schema", "late"]
"""``decode``: not UTF-8 / not JSON / a null (tombstone) JSON value; ``schema``: does not
match the schema; ``late``: event time before the slice's ``late_before`` (policy reject)."""

METADATA_COLUMNS: Mapping[str, str] = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_kafka_key",
    "headers": "_kafka_headers",
}
"""Row column added for each entry of ``include``."""

KAFKA_REJECT_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "reason",
    "detail",
    "_epoch",
)
"""Columns of the rejects DataFrame, in order (``key``/``value`` are the raw bytes)."""

_BOUNDS_FORMAT = "kafka/1"
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
_POLL_MS = 100
_OUTPUT_BATCH_ROWS = 16_384
_WINDOW_FIRST = 1_024
_KIND_TAG = "_reject_reason"


# -- errors --------------------------------------------------------------------------


class KafkaDataLossError(SourceError):
    """Records a slice needs were deleted from the partition (retention, DeleteRecords)."""

    def __init__(
        self,
        *,
        source: str,
        topic: str,
        partition: int,
        expected_offset: int,
        earliest_offset: int,
        epoch: int | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.expected_offset = expected_offset
        self.earliest_offset = earliest_offset
        self.epoch = epoch
        at = f" for epoch {epoch}" if epoch is not None else ""
        super().__init__(
            source=source,
            problem=f"data loss on topic {topic!r} partition {partition}{at}: the slice needs "
            f"records from offset {expected_offset}, but the partition now starts at offset "
            f"{earliest_offset}, so {earliest_offset - expected_offset} records were deleted "
            "(retention or DeleteRecords) before they were ingested. Nothing was skipped. "
            "Give the topic a longer retention than the pipeline's worst lag; to accept the "
            "loss, reset the source's recorded offsets explicitly",
        )


class KafkaTopicError(SourceError):
    """A topic or partition is missing, or its offsets went backwards (recreated topic)."""

    def __init__(self, *, source: str, topic: str, partition: int | None, problem: str):
        self.topic = topic
        self.partition = partition
        where = f"topic {topic!r}" + (f" partition {partition}" if partition is not None else "")
        super().__init__(source=source, problem=f"{where}: {problem}")


class KafkaReadError(SourceError):
    """The broker did not deliver an offset range within the timeout."""

    def __init__(self, *, source: str, topic: str, partition: int, problem: str):
        self.topic = topic
        self.partition = partition
        super().__init__(source=source, problem=f"topic {topic!r} partition {partition}: {problem}")


# -- bounds --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Range:
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class _Bounds:
    barrier: BarrierKind
    barrier_ts: datetime
    late_before: datetime | None
    ranges: tuple[_Range, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "format": _BOUNDS_FORMAT,
            "barrier": self.barrier,
            "barrier_ts": self.barrier_ts.isoformat(),
            "late_before": self.late_before.isoformat() if self.late_before else None,
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end}
                for r in self.ranges
            ],
        }

    @classmethod
    def parse(cls, source: str, bounds: Mapping[str, object]) -> _Bounds:
        try:
            if bounds.get("format") != _BOUNDS_FORMAT:
                raise ValueError(f"format is {bounds.get('format')!r}, not {_BOUNDS_FORMAT!r}")
            barrier = bounds["barrier"]
            if barrier not in get_args(BarrierKind):
                raise ValueError(f"unknown barrier {barrier!r}")
            late = bounds.get("late_before")
            ranges = tuple(
                _Range(str(r["topic"]), int(r["partition"]), int(r["start"]), int(r["end"]))
                for r in bounds["ranges"]  # type: ignore[attr-defined]
            )
            return cls(
                barrier=barrier,  # type: ignore[arg-type]
                barrier_ts=datetime.fromisoformat(str(bounds["barrier_ts"])),
                late_before=datetime.fromisoformat(str(late)) if late else None,
                ranges=ranges,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(
                source=source,
                problem=f"recorded bounds {dict(bounds)!r} were not written by a KafkaSource "
                f"({type(exc).__name__}: {exc})",
            ) from exc


def _utc(ts: datetime) -> datetime:
    """Barrier timestamps without a zone are UTC (the session time zone of build_spark)."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_MICRO = timedelta(microseconds=1)


def _micros(ts: datetime) -> int:
    return (_utc(ts) - _EPOCH_UTC) // _MICRO


# -- the source ----------------------------------------------------------------------


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
            set(METADATA_COLUMNS.values()) | {_KIND_TAG, "_epoch"}
        )
        if reserved:
            raise SourceError(
                source=self.name, problem=f"schema fields {sorted(reserved)} are reserved names"
            )
        try:
            _struct_members(parsed, "")
        except _Unsupported as exc:
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

    # -- cutting -----------------------------------------------------------------------

    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        previous = (
            _Bounds.parse(self.name, request.previous_bounds) if request.previous_bounds else None
        )
        barrier_ts = _utc(request.barrier_ts)
        barrier_ms = _micros(barrier_ts) // 1000
        late_before = None
        if self.barrier == "event_time" and previous is not None:
            late_before = _utc(previous.barrier_ts) - self.allowed_lateness
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
            # batch's base offset + 1 on tansu): read on from one record before it.
            scan_from = {tp: max(starts[tp], reported_end[tp] - 1) for tp in partitions}
            tails = self._scan(consumer, {tp: (scan_from[tp], None) for tp in partitions})
            ranges = []
            for tp in partitions:
                tail = tails[tp]
                if tail.end < starts[tp]:
                    raise KafkaTopicError(
                        source=self.name,
                        topic=tp.topic,
                        partition=tp.partition,
                        problem=f"ends at offset {tail.end}, before offset {starts[tp]} where "
                        "the previous slice ended: the topic was recreated or truncated",
                    )
                end = self._barrier_end(consumer, tp, starts[tp], scan_from[tp], tail, barrier_ms)
                ranges.append(_Range(tp.topic, tp.partition, starts[tp], end))
        finally:
            consumer.close()
        return _Bounds(self.barrier, barrier_ts, late_before, tuple(ranges)).to_json()

    def _barrier_end(
        self,
        consumer: KafkaConsumer,
        tp: TopicPartition,
        start: int,
        scan_from: int,
        tail: _Scanned,
        barrier_ms: int,
    ) -> int:
        """One past the last record at or before the barrier, searching back from the end."""
        found = tail.last_at_or_before(barrier_ms)
        high, width = scan_from, _WINDOW_FIRST
        while found is None and high > start:
            low = max(start, high - width)
            found = self._scan(consumer, {tp: (low, high)})[tp].last_at_or_before(barrier_ms)
            high, width = low, width * 4
        return start if found is None else found + 1

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
                polled = consumer.poll(timeout_ms=_POLL_MS)
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
        previous = _Bounds.parse(self.name, previous_bounds)
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
        parsed = _Bounds.parse(self.name, bounds)
        if size is None or sum(r.end - r.start for r in parsed.ranges) <= size:
            return (bounds,)
        parts: list[list[_Range]] = [[]]
        room = size
        for r in parsed.ranges:
            low = r.start
            while low < r.end:
                if room == 0:
                    parts.append([])
                    room = size
                high = min(r.end, low + room)
                parts[-1].append(_Range(r.topic, r.partition, low, high))
                room -= high - low
                low = high
        return tuple(replace(parsed, ranges=tuple(part)).to_json() for part in parts)

    # -- reading -----------------------------------------------------------------------

    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        parsed = _Bounds.parse(self.name, bounds)
        pieces = [
            _Range(r.topic, r.partition, low, min(low + self.max_records_per_task, r.end))
            for r in parsed.ranges
            for low in range(r.start, r.end, self.max_records_per_task)
        ]
        if pieces:
            self._check_retained(pieces, epoch)
        union = self._union_schema()
        row_columns = [f.name for f in self._row_fields()]
        if pieces:
            plan = _TaskPlan(
                source=self.name,
                consumer=self._consumer_config(),
                pieces=tuple(pieces),
                value_format=self.value_format,
                key_format=self.key_format,
                payload=self._payload_schema(),
                event_time_column=self.event_time_column,
                late_before_us=_micros(parsed.late_before) if parsed.late_before else None,
                reject_late=self.late_records == "reject",
                arrow_schema=to_arrow_schema(
                    union, timezone=spark.conf.get("spark.sql.session.timeZone")
                ),
                timeout_s=self.timeout.total_seconds(),
            )
            tagged = (
                spark.range(0, len(pieces), 1, numPartitions=len(pieces))
                .mapInArrow(plan.run, union)
                .localCheckpoint(eager=False)
            )
        else:
            tagged = spark.createDataFrame([], union)
        rows = tagged.where(F.col(_KIND_TAG).isNull()).select(*row_columns)
        if not self.produces_rejects:
            return SliceData(rows=rows)
        rejects = tagged.where(F.col(_KIND_TAG).isNotNull()).select(
            F.col("_kafka_topic").alias("topic"),
            F.col("_kafka_partition").alias("partition"),
            F.col("_kafka_offset").alias("offset"),
            F.col("_kafka_timestamp").alias("timestamp"),
            F.col("_reject_key").alias("key"),
            F.col("_reject_value").alias("value"),
            F.col(_KIND_TAG).alias("reason"),
            F.col("_reject_detail").alias("detail"),
            F.lit(epoch).cast("long").alias("_epoch"),
        )
        return SliceData(rows=rows, rejects=rejects)

    def _check_retained(self, pieces: Sequence[_Range], epoch: int) -> None:
        """Fail on the driver, with a typed error, if a replay's records were deleted."""
        from kafka import TopicPartition

        firsts: dict[TopicPartition, int] = {}
        for piece in pieces:
            tp = TopicPartition(piece.topic, piece.partition)
            firsts[tp] = min(firsts.get(tp, piece.start), piece.start)
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
            StructField(_KIND_TAG, StringType(), True),
            StructField("_reject_detail", StringType(), True),
        ]
        return StructType(fields)


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


# -- decoding JSON against a Spark schema (runs in the tasks) --------------------------


class _Invalid(Exception):
    """A JSON value does not match the schema; the message says where and why."""


class _Unsupported(Exception):
    """The schema has a type that JSON values cannot be decoded into (a configuration error)."""

    def __init__(self, path: str, data_type: DataType):
        super().__init__(
            f"field {path!r} has type {data_type.simpleString()}, which JSON values cannot be "
            "decoded into"
        )


def _kind(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )


_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_FLOAT_MAX = 3.4028234663852886e38


def _converter(data_type: DataType, path: str) -> Callable[[object], object]:
    """A function turning a decoded JSON value into what Arrow takes for ``data_type``.

    Raises :class:`_Invalid` (per record) for values that do not fit, and
    :class:`_Unsupported` (at configuration) for types JSON cannot carry.
    """
    from pyspark.sql import types as T

    def fail(expected: str, value: object) -> _Invalid:
        return _Invalid(f"{path}: expected {expected}, got {_kind(value)} {str(value)[:40]!r}")

    if isinstance(data_type, T.StringType | T.CharType | T.VarcharType):

        def to_string(value: object) -> object:
            if type(value) is str:
                return value
            raise fail("a string", value)

        return to_string
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        low, high = _INT_RANGES[data_type.typeName()]

        def to_int(value: object) -> object:
            if type(value) is int and low <= value <= high:
                return value
            raise fail(f"an integer in [{low}, {high}]", value)

        return to_int
    if isinstance(data_type, T.FloatType | T.DoubleType):
        single = isinstance(data_type, T.FloatType)

        def to_float(value: object) -> object:
            kind = type(value)
            if kind is float or kind is int:
                try:
                    number = float(value)  # type: ignore[arg-type]
                except OverflowError:
                    raise fail("a number", value) from None
                if single and math.isfinite(number) and abs(number) > _FLOAT_MAX:
                    raise fail("a number within the float range", value)
                return number
            raise fail("a number", value)

        return to_float
    if isinstance(data_type, T.BooleanType):

        def to_bool(value: object) -> object:
            if type(value) is bool:
                return value
            raise fail("true or false", value)

        return to_bool
    if isinstance(data_type, T.DecimalType):
        precision, scale = data_type.precision, data_type.scale
        context = decimal.Context(prec=precision + 40)
        quantum = decimal.Decimal(1).scaleb(-scale)
        limit = decimal.Decimal(10) ** (precision - scale)

        def to_decimal(value: object) -> object:
            kind = type(value)
            if kind not in (int, float, str):
                raise fail(f"a decimal({precision},{scale})", value)
            try:
                number = context.create_decimal(str(value))
                exact = number.quantize(quantum, context=context)
            except decimal.InvalidOperation:
                raise fail(f"a decimal({precision},{scale})", value) from None
            if not number.is_finite() or exact != number or abs(exact) >= limit:
                raise fail(f"a decimal({precision},{scale}) without rounding", value)
            return exact

        return to_decimal
    if isinstance(data_type, T.TimestampType):

        def to_timestamp(value: object) -> object:
            if type(value) is str:
                try:
                    return _micros(datetime.fromisoformat(value))
                except ValueError:
                    pass
            raise fail("an ISO-8601 timestamp string", value)

        return to_timestamp
    if isinstance(data_type, T.TimestampNTZType):

        def to_timestamp_ntz(value: object) -> object:
            if type(value) is str:
                try:
                    parsed = datetime.fromisoformat(value)
                except ValueError:
                    parsed = None
                if parsed is not None and parsed.tzinfo is None:
                    return (parsed - _EPOCH_NAIVE) // _MICRO
            raise fail("an ISO-8601 timestamp string without a time zone", value)

        return to_timestamp_ntz
    if isinstance(data_type, T.DateType):

        def to_date(value: object) -> object:
            if type(value) is str:
                try:
                    return date.fromisoformat(value)
                except ValueError:
                    pass
            raise fail("an ISO-8601 date string", value)

        return to_date
    if isinstance(data_type, T.BinaryType):

        def to_binary(value: object) -> object:
            if type(value) is str:
                try:
                    return base64.b64decode(value, validate=True)
                except ValueError:
                    pass
            raise fail("a base64 string", value)

        return to_binary
    if isinstance(data_type, T.ArrayType):
        element = _converter(data_type.elementType, f"{path}[]")
        nulls = data_type.containsNull

        def to_list(value: object) -> object:
            if type(value) is not list:
                raise fail("an array", value)
            out: list[object] = []
            for item in value:
                if item is None:
                    if not nulls:
                        raise _Invalid(f"{path}: null element in an array of non-null elements")
                    out.append(None)
                else:
                    out.append(element(item))
            return out

        return to_list
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, T.StringType):
            raise _Unsupported(path, data_type)
        map_value = _converter(data_type.valueType, f"{path}{{}}")
        nulls = data_type.valueContainsNull

        def to_map(value: object) -> object:
            if type(value) is not dict:
                raise fail("an object", value)
            out: list[tuple[str, object]] = []
            for key, item in value.items():
                if item is None:
                    if not nulls:
                        raise _Invalid(f"{path}.{key}: null value in a map of non-null values")
                    out.append((key, None))
                else:
                    out.append((key, map_value(item)))
            return out

        return to_map
    if isinstance(data_type, T.StructType):
        members = _struct_members(data_type, f"{path}.")
        names = [m[0] for m in members]

        def to_struct(value: object) -> object:
            if type(value) is not dict:
                raise fail("an object", value)
            return dict(zip(names, _decode_members(members, value), strict=True))

        return to_struct
    raise _Unsupported(path, data_type)


_Member = tuple[str, Callable[[object], object], bool, str]
"""A struct field: name, value converter, NOT NULL, path (for messages)."""


def _struct_members(struct: StructType, prefix: str) -> list[_Member]:
    return [
        (f.name, _converter(f.dataType, prefix + f.name), not f.nullable, prefix + f.name)
        for f in struct.fields
    ]


def _decode_members(members: Sequence[_Member], obj: dict[str, object]) -> list[object]:
    out: list[object] = []
    for name, convert, required, path in members:
        value = obj.get(name)
        if value is None:
            if required:
                raise _Invalid(f"{path}: required (NOT NULL) but missing or null")
            out.append(None)
        else:
            out.append(convert(value))
    return out


# -- the Spark task ------------------------------------------------------------------


@dataclass(frozen=True)
class _TaskPlan:
    """Everything a Spark task needs to read and decode its offset ranges (pickled)."""

    source: str
    consumer: Mapping[str, object]
    pieces: tuple[_Range, ...]
    value_format: ValueFormat
    key_format: KeyFormat
    payload: StructType | None
    event_time_column: str | None
    late_before_us: int | None
    reject_late: bool
    arrow_schema: pa.Schema
    timeout_s: float

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**self.consumer)
        try:
            for batch in batches:
                for index in batch.column("id").to_pylist():
                    yield from self._read_piece(consumer, self.pieces[index])
        finally:
            consumer.close()

    def _read_piece(self, consumer: KafkaConsumer, piece: _Range) -> Iterator[pa.RecordBatch]:
        from kafka import TopicPartition
        from kafka.errors import OffsetOutOfRangeError

        tp = TopicPartition(piece.topic, piece.partition)
        consumer.assign([tp])
        consumer.seek(tp, piece.start)
        builder = _BatchBuilder(self, piece.topic, piece.partition)
        position = piece.start
        deadline = time.monotonic() + self.timeout_s
        while position < piece.end:
            try:
                polled = consumer.poll(timeout_ms=_POLL_MS).get(tp, ())
            except OffsetOutOfRangeError as exc:
                earliest = consumer.beginning_offsets([tp])[tp]
                if earliest > position:
                    raise KafkaDataLossError(
                        source=self.source,
                        topic=tp.topic,
                        partition=tp.partition,
                        expected_offset=position,
                        earliest_offset=earliest,
                    ) from exc
                raise KafkaReadError(
                    source=self.source,
                    topic=tp.topic,
                    partition=tp.partition,
                    problem=f"offset {position} is beyond the log end: the topic was recreated "
                    "or truncated",
                ) from exc
            for record in polled:
                if record.offset >= piece.end:
                    break
                builder.add(record)
                if builder.size >= _OUTPUT_BATCH_ROWS:
                    yield builder.flush()
            if polled:
                deadline = time.monotonic() + self.timeout_s
            position = consumer.position(tp)
            if position >= piece.end:
                break
            highwater = consumer.highwater(tp)
            if highwater is not None and position >= highwater:
                raise KafkaReadError(
                    source=self.source,
                    topic=tp.topic,
                    partition=tp.partition,
                    problem=f"the log ends at offset {highwater}, before the recorded slice end "
                    f"{piece.end}: the topic was recreated or truncated",
                )
            if time.monotonic() > deadline:
                raise KafkaReadError(
                    source=self.source,
                    topic=tp.topic,
                    partition=tp.partition,
                    problem=f"no records for {self.timeout_s:.0f}s at offset {position} while "
                    f"reading up to {piece.end}",
                )
        if builder.size:
            yield builder.flush()


class _BatchBuilder:
    """Collects the decoded records of one partition and turns them into Arrow batches.

    Per record it keeps only what varies (payload values, offset, timestamp; key and
    headers if included) and a reject entry for rejects; whole columns are built at
    ``flush``, which is much cheaper per record than filling every column one by one.
    """

    def __init__(self, plan: _TaskPlan, topic: str, partition: int):
        self.plan = plan
        self.topic = topic
        self.partition = partition
        self.schema = plan.arrow_schema
        payload = plan.payload
        self.members = _struct_members(payload, "") if payload is not None else None
        self.event_index = (
            [m[0] for m in self.members].index(plan.event_time_column)
            if self.members is not None and plan.event_time_column
            else None
        )
        self.payload_names = [m[0] for m in self.members] if self.members is not None else ["value"]
        self.with_key = "_kafka_key" in self.schema.names
        self.with_headers = "_kafka_headers" in self.schema.names
        self._reset()

    def _reset(self) -> None:
        self.values: list[list[object] | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.keys: list[object] = []
        self.headers: list[object] = []
        self.rejects: dict[int, tuple[bytes | None, bytes | None, RejectReason, str]] = {}

    @property
    def size(self) -> int:
        return len(self.offsets)

    def add(self, record: Any) -> None:
        key = record.key
        decoded_key: object = key
        try:
            if self.plan.key_format == "string" and key is not None:
                try:
                    decoded_key = key.decode("utf-8")
                except UnicodeDecodeError:
                    raise _Rejected("decode", "the key is not UTF-8") from None
            values: list[object] | None = self._decode_value(record.value)
        except _Rejected as rejected:
            values = None
            self.rejects[len(self.offsets)] = (key, record.value, rejected.reason, rejected.detail)
        except _Invalid as invalid:
            values = None
            self.rejects[len(self.offsets)] = (key, record.value, "schema", str(invalid))
        self.values.append(values)
        self.offsets.append(record.offset)
        timestamp = record.timestamp
        self.timestamps.append(timestamp * 1000 if timestamp >= 0 else None)
        if self.with_key:
            self.keys.append(decoded_key if values is not None else None)
        if self.with_headers:
            self.headers.append(
                [{"key": k, "value": v} for k, v in record.headers] if values is not None else None
            )

    def _decode_value(self, raw: bytes | None) -> list[object]:
        plan = self.plan
        if plan.value_format == "bytes":
            return [raw]
        if raw is None:
            if plan.value_format == "string":
                return [None]
            raise _Rejected("decode", "the value is null (a tombstone), not a JSON object")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Rejected("decode", "the value is not UTF-8") from None
        if self.members is None:
            return [text]
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise _Rejected("decode", f"the value is not JSON: {exc}") from None
        if type(obj) is not dict:
            raise _Invalid(f"the value is a JSON {_kind(obj)}, not an object")
        values = _decode_members(self.members, obj)
        if self.event_index is not None:
            event_us = values[self.event_index]
            if event_us is None:
                raise _Invalid(f"{plan.event_time_column}: the event time is missing or null")
            if (
                plan.late_before_us is not None
                and event_us < plan.late_before_us  # type: ignore[operator]
                and plan.reject_late
            ):
                raise _Rejected(
                    "late",
                    f"{plan.event_time_column} {_iso(event_us)} is before {_iso(plan.late_before_us)}, "  # type: ignore[arg-type]
                    "the previous barrier minus the allowed lateness",
                )
        return values

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        size = self.size
        nulls: list[object] = [None] * len(self.payload_names)
        rows = [v if v is not None else nulls for v in self.values]
        columns: dict[str, object] = {name: [] for name in self.payload_names}
        if rows:
            columns.update(zip(self.payload_names, zip(*rows, strict=True), strict=True))
        columns["_kafka_topic"] = [self.topic] * size
        columns["_kafka_partition"] = [self.partition] * size
        columns["_kafka_offset"] = self.offsets
        columns["_kafka_timestamp"] = self.timestamps
        columns["_kafka_key"] = self.keys
        columns["_kafka_headers"] = self.headers
        rejected: tuple[list[object], ...] = tuple([None] * size for _ in range(4))
        for index, reject in self.rejects.items():
            for column, value in zip(rejected, reject, strict=True):
                column[index] = value
        (
            columns["_reject_key"],
            columns["_reject_value"],
            columns[_KIND_TAG],
            columns["_reject_detail"],
        ) = rejected
        batch = pa.RecordBatch.from_arrays(
            [pa.array(columns[f.name], type=f.type) for f in self.schema], schema=self.schema
        )
        self._reset()
        return batch


class _Rejected(Exception):
    def __init__(self, reason: RejectReason, detail: str):
        super().__init__(detail)
        self.reason: RejectReason = reason
        self.detail = detail


def _iso(micros: int) -> str:
    return (_EPOCH_UTC + micros * _MICRO).isoformat()
