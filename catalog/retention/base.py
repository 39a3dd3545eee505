"""Retention: pins, tags, expired epochs and retention policies."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime

from catalog.models import EpochExpiry, Pin, Tag


class RetentionStore(ABC):
    """Retention: pins, tags, expired epochs and retention policies.

    A pin or tag created before an expiry protects its epoch (the expiry skips it); one
    created after it fails with EpochExpiredError.
    """

    @abstractmethod
    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin:
        """Protect a cut while the pin lives (its holder renews it).

        ``epoch`` None: a read-committed/uncommitted cut, whose versions alone need
        protection. An expired epoch raises EpochExpiredError (naming the rule), an
        unissued one UnknownEpochError.
        """

    @abstractmethod
    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin:
        """Extend a live pin; PinExpiredError if it expired or was released."""

    @abstractmethod
    def release_pin(self, pin: Pin) -> None:
        """Remove a pin (no-op if already gone)."""

    @abstractmethod
    def active_pins(self, *, now: datetime | None = None) -> list[Pin]:
        """Pins not expired at ``now`` (default: the catalog's clock), oldest first."""

    @abstractmethod
    def remove_expired_pins(self, *, dry_run: bool = False) -> int:
        """Delete the pins expired at the catalog's clock (a reader that died leaves its
        pin behind); how many. They protect nothing already; renewing one fails as before.
        ``dry_run``: count them only."""

    @abstractmethod
    def create_tag(
        self, name: str, *, epoch: int, versions: Mapping[str, int], pipeline: str | None
    ) -> Tag:
        """Name a cut until deleted. Raises InvalidNameError, TagExistsError,
        UnknownEpochError, EpochExpiredError."""

    @abstractmethod
    def get_tag(self, name: str) -> Tag:
        """Raises UnknownTagError."""

    @abstractmethod
    def list_tags(self) -> list[Tag]:
        """Every tag, by name."""

    @abstractmethod
    def delete_tag(self, name: str) -> None:
        """Raises UnknownTagError."""

    @abstractmethod
    def expire_epochs(
        self, epochs: Sequence[int], *, rule: str, pipeline: str | None = None
    ) -> list[int]:
        """Record ``epochs`` expired under ``rule``, in one write transaction; returns
        those actually expired now.

        Skips epochs that hold an active pin or a tag at that moment, and epochs already
        expired. Raises UnknownEpochError for an unissued epoch, ForeignEpochError for an
        epoch not of ``pipeline`` (when given). Nothing is deleted: maintenance uses the
        record to decide which files may go.
        """

    @abstractmethod
    def expiry_of(self, epoch: int) -> EpochExpiry | None:
        """The expiry of an epoch, if it expired."""

    @abstractmethod
    def expired_epochs(self, *, pipeline: str | None = None) -> list[EpochExpiry]:
        """Expired epochs (of ``pipeline`` when given), oldest first."""

    @abstractmethod
    def set_retention_policy(self, pipeline: str | None, policy_json: str | None) -> None:
        """Store a pipeline's retention policy (JSON text; None removes it). Pipeline None
        sets the catalog-wide default. The runtime defines the policy's format. Raises
        InvalidRetentionPolicyError (not JSON), UnknownPipelineError."""

    @abstractmethod
    def retention_policy(self, pipeline: str | None) -> str | None:
        """The pipeline's retention policy, else the catalog-wide default, else None."""
