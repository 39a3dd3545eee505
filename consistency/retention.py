"""Retention: which epochs (cuts) a policy keeps, as pure functions over a clock.

PRODUCT.md, "Retention, pins and tags". A policy keeps every epoch for a duration, then
one cut per interval (the newest epoch of each interval bucket, buckets aligned on the
Unix epoch) for a longer duration, tier by tier. The latest cut is always kept. A live
pin or a tag keeps its epoch whatever the policy says: :func:`expirable` is that rule,
which ``Catalog.expire_epochs`` applies to the pins and tags it reads under its write
lock, so a pin or tag made concurrently either protects its epoch or fails.

The selection is monotone: an epoch expired at time t is never kept at a later time
(a bucket's newest epoch only moves to newer epochs, and ages only grow), so expiring
is never undone by a later run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from consistency.errors import ConsistencyError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdwy])\s*$")


class RetentionPolicyError(ConsistencyError, ValueError):
    """A retention policy that cannot be understood (the message says what and where)."""


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"7d"``, ``"2w"``, ``"1y"`` (365 days), seconds as a
    number, or a timedelta."""
    if isinstance(text, timedelta):
        value = text
    elif isinstance(text, int | float) and not isinstance(text, bool):
        value = timedelta(seconds=text)
    elif isinstance(text, str) and (match := _DURATION.match(text)):
        value = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    else:
        raise RetentionPolicyError(
            f"duration {text!r} is not understood; write e.g. '90s', '15m', '1h', '7d', '1y'"
        )
    if value <= timedelta(0):
        raise RetentionPolicyError(f"duration {text!r} must be positive")
    return value


def format_duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit in ("y", "w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Tier:
    """One cut per ``every`` is kept until it is ``keep_for`` old."""

    every: timedelta
    keep_for: timedelta

    @property
    def rule(self) -> str:
        return f"one cut per {format_duration(self.every)} for {format_duration(self.keep_for)}"


@dataclass(frozen=True)
class Retention:
    """A retention policy: keep every epoch for ``every_epoch_for``, then the tiers.

    ``Retention(every_epoch_for="1d", tiers=[("1h", "7d"), ("1d", "365d")])`` keeps every
    epoch for a day, the newest epoch of each hour for a week and of each day for a year.
    ``every_epoch_for=None`` with no tiers keeps everything (no expiry).
    """

    every_epoch_for: timedelta | None = None
    tiers: tuple[Tier, ...] = field(default_factory=tuple)

    def __init__(
        self,
        every_epoch_for: str | float | timedelta | None = None,
        tiers: Iterable[Tier | tuple[object, object]] = (),
    ) -> None:
        every = None if every_epoch_for is None else parse_duration(every_epoch_for)
        parsed: list[Tier] = []
        for tier in tiers:
            if isinstance(tier, Tier):
                parsed.append(tier)
                continue
            try:
                step, keep = tier
            except (TypeError, ValueError):
                raise RetentionPolicyError(
                    f"tier {tier!r} must be a pair (every, keep_for), e.g. ('1h', '7d')"
                ) from None
            parsed.append(Tier(parse_duration(step), parse_duration(keep)))  # type: ignore[arg-type]
        for tier in parsed:
            if tier.keep_for < tier.every:
                raise RetentionPolicyError(
                    f"tier {tier.rule!r}: keep_for must be at least the interval"
                )
        object.__setattr__(self, "every_epoch_for", every)
        object.__setattr__(self, "tiers", tuple(parsed))

    @property
    def keeps_everything(self) -> bool:
        return self.every_epoch_for is None and not self.tiers

    @property
    def rule(self) -> str:
        """The policy in words; the rule an epoch expired under names it."""
        if self.keeps_everything:
            return "keep every epoch"
        parts = []
        if self.every_epoch_for is not None:
            parts.append(f"every epoch for {format_duration(self.every_epoch_for)}")
        parts += [t.rule for t in self.tiers]
        return ", then ".join(parts)

    def to_json(self) -> str:
        return json.dumps(
            {
                "every_epoch_for": None
                if self.every_epoch_for is None
                else format_duration(self.every_epoch_for),
                "tiers": [
                    [format_duration(t.every), format_duration(t.keep_for)] for t in self.tiers
                ],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> Retention | None:
        if text is None:
            return None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RetentionPolicyError(f"retention policy is not JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise RetentionPolicyError(f"retention policy must be an object, got {data!r}")
        unknown = set(data) - {"every_epoch_for", "tiers"}
        if unknown:
            raise RetentionPolicyError(f"retention policy has unknown keys {sorted(unknown)}")
        return cls(every_epoch_for=data.get("every_epoch_for"), tiers=data.get("tiers") or ())


@dataclass(frozen=True)
class EpochPoint:
    """An epoch as retention sees it: its id and barrier timestamp."""

    id: int
    barrier_ts: datetime


def _bucket(ts: datetime, every: timedelta) -> int:
    return int(_utc(ts).timestamp() // every.total_seconds())


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


def retained_epochs(
    epochs: Sequence[EpochPoint], policy: Retention, *, now: datetime
) -> dict[int, str]:
    """Epoch id -> the reason it is kept (a rule's words, or ``latest``).

    ``epochs`` are the candidate cuts (e.g. a pipeline's COMMIT epochs); the newest is
    always kept.
    """
    now = _utc(now)
    kept: dict[int, str] = {}
    if not epochs:
        return kept
    ordered = sorted(epochs, key=lambda e: e.id)
    kept[ordered[-1].id] = "latest"
    if policy.keeps_everything:
        return {e.id: "keep every epoch" for e in ordered} | kept
    for point in ordered:
        age = now - _utc(point.barrier_ts)
        if policy.every_epoch_for is not None and age <= policy.every_epoch_for:
            kept.setdefault(point.id, f"every epoch for {format_duration(policy.every_epoch_for)}")
    for tier in policy.tiers:
        newest: dict[int, EpochPoint] = {}
        for point in ordered:
            newest[_bucket(point.barrier_ts, tier.every)] = point
        for point in newest.values():
            if now - _utc(point.barrier_ts) <= tier.keep_for:
                kept.setdefault(point.id, tier.rule)
    return kept


def expired_epochs(epochs: Sequence[EpochPoint], policy: Retention, *, now: datetime) -> list[int]:
    """The epochs of ``epochs`` the policy no longer keeps at ``now``, oldest first."""
    kept = retained_epochs(epochs, policy, now=now)
    return sorted(e.id for e in epochs if e.id not in kept)


def expirable(
    epochs: Iterable[int], *, pinned: Collection[int], tagged: Collection[int]
) -> list[int]:
    """The epochs of ``epochs`` that may expire, oldest first: all but those a live pin
    (``pinned``) or a tag (``tagged``) holds."""
    return sorted({epoch for epoch in epochs if epoch not in pinned and epoch not in tagged})


__all__ = [
    "EpochPoint",
    "Retention",
    "RetentionPolicyError",
    "Tier",
    "expirable",
    "expired_epochs",
    "format_duration",
    "parse_duration",
    "retained_epochs",
]
