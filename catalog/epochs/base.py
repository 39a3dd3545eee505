"""Epochs (barriers) and the source slices recorded for them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime

from catalog.models import SourceSlice
from consistency.records import PIPELINE_DEFAULT, Epoch


class EpochStore(ABC):
    """Epochs (barriers) and the source slices recorded for them."""

    @abstractmethod
    def open_epoch(
        self, barrier_ts: datetime | None = None, *, pipeline: str = PIPELINE_DEFAULT
    ) -> Epoch:
        """Issue the next epoch for ``pipeline``: ids strictly increase across the catalog,
        barrier timestamps never decrease within the pipeline.

        ``barrier_ts`` defaults to now; an earlier timestamp than the pipeline's previous
        epoch's is raised to it. Safe when several processes ask at once. An unknown
        pipeline (other than the default) raises UnknownPipelineError.
        """

    @abstractmethod
    def get_epoch(self, epoch: int) -> Epoch:
        """Raises UnknownEpochError."""

    @abstractmethod
    def latest_epoch(self, *, pipeline: str | None = None) -> Epoch | None:
        """The newest epoch (of ``pipeline`` when given)."""

    @abstractmethod
    def epochs(
        self, *, after: int = 0, up_to: int | None = None, pipeline: str | None = None
    ) -> list[Epoch]:
        """Issued epochs with after < id <= up_to (of ``pipeline`` when given), oldest first."""

    @abstractmethod
    def epoch_at_or_before(self, ts: datetime, *, pipeline: str | None = None) -> Epoch | None:
        """The newest epoch (of ``pipeline`` when given) whose barrier timestamp is at or
        before ``ts``."""

    @abstractmethod
    def record_slice(
        self,
        source: str,
        epoch: int,
        bounds: Mapping[str, object],
        *,
        job: str,
        generation: int,
        catch_up: bool = False,
    ) -> SourceSlice:
        """Record the bounds of a source's slice for an epoch, once, for ``job``.

        Checks the job's lease generation (StaleLeaseError: zombie fencing) and that the
        epoch is one of the job's pipeline (ForeignEpochError). Recording the same bounds
        again returns the recorded slice; other bounds raise SliceConflictError, so that a
        replay always reads exactly the same input.
        """

    @abstractmethod
    def get_slice(self, source: str, epoch: int) -> SourceSlice | None: ...

    @abstractmethod
    def latest_slice(self, source: str) -> SourceSlice | None: ...

    @abstractmethod
    def slices(self, source: str, *, after: int = 0, up_to: int | None = None) -> list[SourceSlice]:
        """The source's recorded slices with after < epoch <= up_to, oldest first (one
        range scan of the primary key)."""
