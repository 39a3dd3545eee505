"""Errors of the Kafka source: data loss, missing or recreated topics, reads that time out."""

from __future__ import annotations

from etl.errors import SourceError


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


__all__ = ["KafkaDataLossError", "KafkaReadError", "KafkaTopicError"]
