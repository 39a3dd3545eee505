"""Every instant Delta Barrier handles is UTC: catalog timestamps, barrier timestamps, Kafka
record times, and the Spark session time zone (``etl.spark``)."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(ts: datetime) -> datetime:
    """``ts`` as an aware UTC datetime; a naive datetime is taken to be UTC already."""
    if ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC)


__all__ = ["as_utc"]
