"""The Spark task of a Kafka read: consume offset ranges and decode them into Arrow batches.

A :class:`TaskPlan` is pickled to the executors; each task reads its pieces (offset ranges)
with its own consumer and yields one Arrow stream tagging every record as a row or a reject.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etl.sources.kafka.bounds import Range, iso
from etl.sources.kafka.decode import (
    KIND_TAG,
    Invalid,
    KeyFormat,
    Rejected,
    RejectReason,
    ValueFormat,
    decode_members,
    kind,
    struct_members,
)
from etl.sources.kafka.errors import KafkaDataLossError, KafkaReadError

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka import KafkaConsumer
    from pyspark.sql.types import StructType

POLL_MS = 100
_OUTPUT_BATCH_ROWS = 16_384


@dataclass(frozen=True)
class TaskPlan:
    """Everything a Spark task needs to read and decode its offset ranges (pickled)."""

    source: str
    consumer: Mapping[str, object]
    pieces: tuple[Range, ...]
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

    def _read_piece(self, consumer: KafkaConsumer, piece: Range) -> Iterator[pa.RecordBatch]:
        from kafka import TopicPartition
        from kafka.errors import OffsetOutOfRangeError

        tp = TopicPartition(piece.topic, piece.partition)
        consumer.assign([tp])
        consumer.seek(tp, piece.start)
        builder = BatchBuilder(self, piece.topic, piece.partition)
        position = piece.start
        deadline = time.monotonic() + self.timeout_s
        while position < piece.end:
            try:
                polled = consumer.poll(timeout_ms=POLL_MS).get(tp, ())
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


class BatchBuilder:
    """Collects the decoded records of one partition and turns them into Arrow batches.

    Per record it keeps only what varies (payload values, offset, timestamp; key and
    headers if included) and a reject entry for rejects; whole columns are built at
    ``flush``, which is much cheaper per record than filling every column one by one.
    """

    def __init__(self, plan: TaskPlan, topic: str, partition: int):
        self.plan = plan
        self.topic = topic
        self.partition = partition
        self.schema = plan.arrow_schema
        payload = plan.payload
        self.members = struct_members(payload, "") if payload is not None else None
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
                    raise Rejected("decode", "the key is not UTF-8") from None
            values: list[object] | None = self._decode_value(record.value)
        except Rejected as rejected:
            values = None
            self.rejects[len(self.offsets)] = (key, record.value, rejected.reason, rejected.detail)
        except Invalid as invalid:
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
            raise Rejected("decode", "the value is null (a tombstone), not a JSON object")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Rejected("decode", "the value is not UTF-8") from None
        if self.members is None:
            return [text]
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise Rejected("decode", f"the value is not JSON: {exc}") from None
        if type(obj) is not dict:
            raise Invalid(f"the value is a JSON {kind(obj)}, not an object")
        values = decode_members(self.members, obj)
        if self.event_index is not None:
            event_us = values[self.event_index]
            if event_us is None:
                raise Invalid(f"{plan.event_time_column}: the event time is missing or null")
            if (
                plan.late_before_us is not None
                and event_us < plan.late_before_us  # type: ignore[operator]
                and plan.reject_late
            ):
                raise Rejected(
                    "late",
                    f"{plan.event_time_column} {iso(event_us)} is before {iso(plan.late_before_us)}, "  # type: ignore[arg-type]
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
            columns[KIND_TAG],
            columns["_reject_detail"],
        ) = rejected
        batch = pa.RecordBatch.from_arrays(
            [pa.array(columns[f.name], type=f.type) for f in self.schema], schema=self.schema
        )
        self._reset()
        return batch


__all__ = [
    "POLL_MS",
    "BatchBuilder",
    "TaskPlan",
]
