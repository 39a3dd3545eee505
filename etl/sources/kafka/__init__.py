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
    (tansu) report the base offset of the last
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

    A root job that copies the slice as it is (no transform, append mode) builds no
    DataFrame (``read_direct``): the same tasks write the rows and the rejects, with
    ``_epoch``, as Parquet files straight into both tables (laid out and described as
    :func:`etl.delta.files.write_arrow` does), and the driver collects only the files'
    descriptors, in one Spark job per micro-batch, and commits them (it used to plan the
    frames too, for nothing: 0.17 s of a small batch).

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

    For a flat schema (integers, doubles, booleans, strings, timestamps, dates) a task
    decodes each batch of values at once with Arrow (:mod:`etl.sources.kafka.bulk`) and
    leaves to the per-record decoder only the records Arrow's verdict might differ on, so
    rows and rejects (reasons and details) are the same either way.
"""

from etl.sources.kafka.bounds import BarrierKind
from etl.sources.kafka.decode import (
    KAFKA_REJECT_COLUMNS,
    METADATA_COLUMNS,
    KeyFormat,
    MetadataColumn,
    RejectReason,
    ValueFormat,
)
from etl.sources.kafka.errors import KafkaDataLossError, KafkaReadError, KafkaTopicError
from etl.sources.kafka.source import KafkaSource, LatePolicy

__all__ = [
    "KAFKA_REJECT_COLUMNS",
    "METADATA_COLUMNS",
    "BarrierKind",
    "KafkaDataLossError",
    "KafkaReadError",
    "KafkaSource",
    "KafkaTopicError",
    "KeyFormat",
    "LatePolicy",
    "MetadataColumn",
    "RejectReason",
    "ValueFormat",
]
