"""The bounds of a Kafka slice: per partition an offset range, plus the barrier it was cut at.

Recorded in the catalog as JSON (:meth:`Bounds.to_json`) before anything of the slice is
committed, and parsed back (:meth:`Bounds.parse`) for every read and replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from catalog import as_utc
from etl.errors import SourceError

BarrierKind = Literal["system_time", "event_time"]
BOUNDS_FORMAT = "kafka/1"
EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
MICRO = timedelta(microseconds=1)


@dataclass(frozen=True)
class Range:
    """Offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class Bounds:
    """A slice: the barrier it was cut at, where late records begin, and the offset ranges."""

    barrier: BarrierKind
    barrier_ts: datetime
    late_before: datetime | None
    ranges: tuple[Range, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "format": BOUNDS_FORMAT,
            "barrier": self.barrier,
            "barrier_ts": self.barrier_ts.isoformat(),
            "late_before": self.late_before.isoformat() if self.late_before else None,
            "ranges": [
                {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end}
                for r in self.ranges
            ],
        }

    @classmethod
    def parse(cls, source: str, bounds: Mapping[str, object]) -> Bounds:
        try:
            if bounds.get("format") != BOUNDS_FORMAT:
                raise ValueError(f"format is {bounds.get('format')!r}, not {BOUNDS_FORMAT!r}")
            barrier = bounds["barrier"]
            if barrier not in get_args(BarrierKind):
                raise ValueError(f"unknown barrier {barrier!r}")
            late = bounds.get("late_before")
            ranges = tuple(
                Range(str(r["topic"]), int(r["partition"]), int(r["start"]), int(r["end"]))
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


def micros(ts: datetime) -> int:
    """Microseconds since the Unix epoch; a naive ``ts`` is UTC (the Spark session time zone)."""
    return (as_utc(ts) - EPOCH_UTC) // MICRO


def iso(micros: int) -> str:
    return (EPOCH_UTC + micros * MICRO).isoformat()


__all__ = [
    "BOUNDS_FORMAT",
    "EPOCH_UTC",
    "MICRO",
    "BarrierKind",
    "Bounds",
    "Range",
    "iso",
    "micros",
]
