"""The Spark task of a Kafka read: consume offset ranges and decode them into Arrow batches.

A :class:`TaskPlan` is pickled to the executors; each task reads its pieces (offset ranges)
with its own consumer and yields one Arrow stream tagging every record as a row or a reject.
A :class:`SliceWriter` task reads them alike and writes the rows and the rejects as Parquet
files straight into their tables, yielding only the files' descriptors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etl.delta.log import EPOCH_COLUMN
from etl.sources.kafka.bounds import Range, iso
from etl.sources.kafka.bulk import bulk_parse_schema, decode_json_values
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

    from etl.delta.files import DataFile
    from etl.sources.base import DirectWrite, TableTarget

POLL_MS = 100
_OUTPUT_BATCH_ROWS = 16_384

REJECT_COLUMNS: Mapping[str, str] = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_reject_key",
    "value": "_reject_value",
    "reason": KIND_TAG,
    "detail": "_reject_detail",
}
"""The columns of a reject (before ``_epoch``), each from its column of the tagged stream."""
ROWS_TABLE, REJECTS_TABLE = "rows", "rejects"
"""How a :class:`SliceWriter` task tags the descriptors of the files it wrote."""


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
    """Collects the records of one partition and turns them into Arrow batches.

    ``add`` only keeps the record; ``flush`` decodes the batch and builds whole columns.
    JSON values of a flat schema are decoded in bulk by Arrow
    (:mod:`etl.sources.kafka.bulk`), and the records it is unsure of by the per-record
    decoder; ``bulk=False`` decodes every record one by one.
    """

    def __init__(self, plan: TaskPlan, topic: str, partition: int, *, bulk: bool = True):
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
        self.payload_schema = pa_schema_of(self.schema, self.payload_names)
        self.bulk_schema = (
            bulk_parse_schema(self.payload_schema) if bulk and self.members is not None else None
        )
        self.with_key = "_kafka_key" in self.schema.names
        self.with_headers = "_kafka_headers" in self.schema.names
        self.records: list[Any] = []

    @property
    def size(self) -> int:
        return len(self.records)

    def add(self, record: Any) -> None:
        self.records.append(record)

    def _decode_record(self, record: Any) -> list[object]:
        """The payload values of one record; raises Rejected or Invalid."""
        key = record.key
        if self.plan.key_format == "string" and key is not None:
            try:
                key.decode("utf-8")
            except UnicodeDecodeError:
                raise Rejected("decode", "the key is not UTF-8") from None
        return self._decode_value(record.value)

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

    def _payload(
        self, rejects: dict[int, tuple[bytes | None, bytes | None, RejectReason, str]]
    ) -> list[pa.Array]:
        """The payload columns of the batch; the records that are rejects go to ``rejects``
        (their payload is null)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        records = self.records
        size = len(records)
        if self.bulk_schema is not None:
            decoded = decode_json_values(
                [r.value for r in records],
                self.payload_schema,
                self.bulk_schema,
                [m[2] for m in self.members or ()],
            )
            columns = list(decoded.columns)
            unsure = decoded.unsure
            if self.event_index is not None:
                unsure |= self._event_time_unsure(columns[self.event_index])
            if self.plan.key_format == "string":
                # A key that is not UTF-8 makes the record a reject whatever its value.
                keyed = [i for i, r in enumerate(records) if r.key is not None]
                for i in keyed:
                    try:
                        records[i].key.decode("utf-8")
                    except UnicodeDecodeError:
                        unsure[i] = True
            decide = np.flatnonzero(unsure).tolist()
        else:
            columns = [pa.nulls(size, f.type) for f in self.payload_schema]
            decide = list(range(size))
        if not decide:
            return columns
        take: list[int | None] = list(range(size))
        decided: list[list[object]] = []
        for index in decide:
            record = records[index]
            try:
                values = self._decode_record(record)
            except Rejected as rejected:
                rejects[index] = (record.key, record.value, rejected.reason, rejected.detail)
                take[index] = None
                continue
            except Invalid as invalid:
                rejects[index] = (record.key, record.value, "schema", str(invalid))
                take[index] = None
                continue
            take[index] = size + len(decided)
            decided.append(values)
        patches = zip(*decided, strict=True) if decided else ([] for _ in self.payload_schema)
        indices = pa.array(take, pa.int64())
        return [
            pc.take(pa.concat_arrays([column, pa.array(list(patch), type=field.type)]), indices)
            for column, patch, field in zip(columns, patches, self.payload_schema, strict=True)
        ]

    def _event_time_unsure(self, event_time: pa.Array) -> Any:
        """Records whose event time the per-record decoder must judge: missing, or late
        under the reject policy."""
        import pyarrow as pa
        import pyarrow.compute as pc

        plan = self.plan
        doubtful = pc.is_null(event_time)
        if plan.late_before_us is not None and plan.reject_late:
            late = pc.less(
                pc.cast(event_time, pa.int64()), pa.scalar(plan.late_before_us, pa.int64())
            )
            doubtful = pc.or_(doubtful, pc.fill_null(late, False))
        return doubtful.to_numpy(zero_copy_only=False)

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        records = self.records
        size = len(records)
        rejects: dict[int, tuple[bytes | None, bytes | None, RejectReason, str]] = {}
        columns: dict[str, object] = dict(
            zip(self.payload_names, self._payload(rejects), strict=True)
        )
        columns["_kafka_topic"] = [self.topic] * size
        columns["_kafka_partition"] = [self.partition] * size
        columns["_kafka_offset"] = [r.offset for r in records]
        columns["_kafka_timestamp"] = [
            r.timestamp * 1000 if r.timestamp >= 0 else None for r in records
        ]
        if self.with_key:
            string_key = self.plan.key_format == "string"
            columns["_kafka_key"] = [
                None
                if i in rejects or r.key is None
                else (r.key.decode("utf-8") if string_key else r.key)
                for i, r in enumerate(records)
            ]
        if self.with_headers:
            columns["_kafka_headers"] = [
                None if i in rejects else [{"key": k, "value": v} for k, v in r.headers]
                for i, r in enumerate(records)
            ]
        rejected: tuple[list[object], ...] = tuple([None] * size for _ in range(4))
        for index, reject in rejects.items():
            for column, value in zip(rejected, reject, strict=True):
                column[index] = value
        (
            columns["_reject_key"],
            columns["_reject_value"],
            columns[KIND_TAG],
            columns["_reject_detail"],
        ) = rejected
        batch = pa.RecordBatch.from_arrays(
            [
                column if isinstance(column, pa.Array) else pa.array(column, type=f.type)
                for f in self.schema
                for column in (columns.get(f.name, [None] * size),)
            ],
            schema=self.schema,
        )
        self.records = []
        return batch


@dataclass(frozen=True)
class SliceWriter:
    """A Spark task that reads its pieces as :class:`TaskPlan` does and writes the rows
    (``row_columns``) and the rejects (:data:`REJECT_COLUMNS`), each with ``_epoch``, as
    Parquet files into their tables (pickled); it yields one descriptor per file, tagged
    :data:`ROWS_TABLE` or :data:`REJECTS_TABLE`, in the columns ``table`` and
    :data:`etl.delta.files.WRITTEN_FILE`."""

    plan: TaskPlan
    target: DirectWrite
    row_columns: tuple[str, ...]

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from etl.delta.files import file_record

        tagged = pa.Table.from_batches(list(self.plan.run(batches)), self.plan.arrow_schema)
        rejected = pc.is_valid(tagged.column(KIND_TAG))
        described = [
            {"table": ROWS_TABLE, **file_record(f)}
            for f in self._write(
                tagged.filter(pc.invert(rejected)).select(list(self.row_columns)),
                self.target.rows,
            )
        ]
        if self.target.rejects is not None:
            rejects = (
                tagged.filter(rejected)
                .select(list(REJECT_COLUMNS.values()))
                .rename_columns(list(REJECT_COLUMNS))
            )
            described += [
                {"table": REJECTS_TABLE, **file_record(f)}
                for f in self._write(rejects, self.target.rejects)
            ]
        if described:
            yield pa.RecordBatch.from_pylist(described)

    def _write(self, rows: pa.Table, table: TableTarget) -> list[DataFile]:
        import pyarrow as pa

        from etl.delta.files import write_arrow

        stamped = rows.append_column(
            EPOCH_COLUMN, pa.repeat(pa.scalar(self.target.epoch, pa.int64()), rows.num_rows)
        ).cast(table.schema)
        return write_arrow(
            stamped,
            table.location,
            partition_by=table.partition_by,
            file_prefix=self.target.file_prefix,
        )


def pa_schema_of(schema: pa.Schema, names: list[str]) -> pa.Schema:
    """The fields ``names`` of ``schema``, in that order."""
    import pyarrow as pa

    return pa.schema([schema.field(name) for name in names])


__all__ = [
    "POLL_MS",
    "REJECTS_TABLE",
    "REJECT_COLUMNS",
    "ROWS_TABLE",
    "BatchBuilder",
    "SliceWriter",
    "TaskPlan",
]
