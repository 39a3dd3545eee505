"""What a root source must provide to the runner.

A source cuts epoch slices and reads them. The runner records the bounds of a slice
in the catalog *before* anything of it is committed, and a replay reads the recorded
bounds again, so ``read`` must return exactly the same records for the same bounds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from etl.delta.files import DataFile


@dataclass(frozen=True)
class SealedTable:
    """A table of the catalog a source reads, and the Delta version of its newest WRITTEN
    epoch (None: nothing sealed yet)."""

    table: str
    version: int | None


@dataclass(frozen=True)
class SliceRequest:
    """Cut the slice of epochs ``first_epoch``..``epoch`` (one batch) of a source."""

    epoch: int
    first_epoch: int
    barrier_ts: datetime
    previous_bounds: Mapping[str, object] | None
    """Bounds of the source's previous recorded slice; None for the first slice."""
    catch_up: bool = False
    recorded: Callable[[int], Sequence[Mapping[str, object]]] = field(
        default=lambda after: (), compare=False, repr=False
    )
    """The bounds of the source's slices recorded after an epoch, oldest first (a source
    that must know everything it ever took, such as a directory of files, asks for them)."""
    sealed: SealedTable | None = None
    """Set when the source's :attr:`Source.table_location` is the location of a table of
    this catalog: the slice must not read beyond its sealed version (a version after it
    may hold rows of an epoch its pipeline has not sealed, which a recovery may still roll
    back). None for every other source."""


@dataclass(frozen=True)
class TableTarget:
    """A table the tasks of a direct write (:attr:`DirectSlice.write`) write files into."""

    location: str
    schema: pa.Schema
    """The rows' Arrow schema, ``_epoch`` included: what the files hold and the commit
    records (the engine derives it from the slice's columns as it does from a frame it
    writes, so that a table written both ways has one schema)."""
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class DirectWrite:
    """What the tasks of a direct write need: where each table's files go, and how they
    are named and stamped."""

    epoch: int
    """The batch's last epoch: every row and reject gets it as ``_epoch``."""
    file_prefix: str
    """``<epoch>-<attempt>-<micro-batch>``, as the engine names every file of a commit."""
    rows: TableTarget
    rejects: TableTarget | None
    """None: the job has no rejects table (the source's rejects are not kept)."""


@dataclass(frozen=True)
class WrittenTable:
    """Parquet files a direct write put into one table, not committed yet."""

    schema: pa.Schema
    files: tuple[DataFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class WrittenSlice:
    """What a direct write returns: the files of the rows' table and of the rejects'
    (None when :attr:`DirectWrite.rejects` was None)."""

    rows: WrittenTable
    rejects: WrittenTable | None


@dataclass(frozen=True)
class SliceData:
    """The rows of a slice, and the records that could not be decoded (or None)."""

    rows: DataFrame
    rejects: DataFrame | None = None
    """Written to the job's rejects table; the engine adds ``_epoch`` (the batch's epoch)
    when the source does not tag them itself."""


@dataclass(frozen=True)
class DirectSlice:
    """A slice that the source's Spark tasks write themselves (:meth:`Source.read_direct`):
    the columns of the frames :meth:`Source.read` returns for the same bounds, and the
    write."""

    rows: StructType
    """The columns of :attr:`SliceData.rows`."""
    rejects: StructType | None
    """The columns of :attr:`SliceData.rejects` (None: the source has no rejects)."""
    write: Callable[[DirectWrite], WrittenSlice] = field(compare=False, repr=False)
    """Writes the rows (exactly ``read``'s rows plus ``_epoch``) and the rejects (exactly
    ``read``'s rejects, with ``_epoch``) as Parquet files straight into the tables, laid
    out, named and described as :func:`etl.delta.files.write_arrow` does, in one Spark job
    that hands the driver only the files' descriptors. A failed task attempt's files are
    never committed (orphans, removed by ``etl maintain``)."""


class Source(ABC):
    """A root source: Kafka topics, a directory of files, a foreign Delta table."""

    name: str
    produces_rejects: bool = False
    """True if ``read`` returns rejects: the job then also writes a rejects table."""
    table_location: str | None = None
    """The normalized location of the Delta table the source reads, if it reads one: when
    a table of the catalog is there, its slices are cut with :attr:`SliceRequest.sealed`."""

    @abstractmethod
    def cut(self, request: SliceRequest) -> Mapping[str, object]:
        """Return JSON-able bounds of the slice: what ``read`` will read for this epoch."""

    @abstractmethod
    def read(self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int) -> SliceData:
        """Read exactly the records inside ``bounds``, spread over Spark tasks."""

    def read_direct(
        self, spark: SparkSession, bounds: Mapping[str, object], *, epoch: int
    ) -> DirectSlice | None:
        """The slice inside ``bounds`` as the source's own Spark tasks write it, or None
        when they cannot (the default): the engine then writes the frames of ``read``.

        The engine asks for it instead of ``read`` when the job copies the slice as it is
        (no transform, append mode) and does not resume a crashed batch. It builds no
        frame, so it costs no query planning: only the write's own Spark job."""
        return None

    def check_replayable(self, bounds: Mapping[str, object], *, epoch: int) -> None:
        """Raise SourceError, saying what is missing, when the slice recorded for ``epoch``
        can no longer be read again exactly (its files deleted, its offsets expired).
        ``read`` checks it before reading; a recompute before it changes anything."""
        return None

    def unreachable(self) -> str | None:
        """Why the source cannot be read now (what is missing, and what to do), or None.
        Validation asks before anything runs (:mod:`etl.validation`): it must answer in a
        few seconds at most."""
        return None

    def is_backlogged(self, previous_bounds: Mapping[str, object] | None) -> bool:
        """True when the source is far behind and should catch up in one large slice."""
        return False

    def micro_batches(self, bounds: Mapping[str, object]) -> Sequence[Mapping[str, object]]:
        """Split a slice into micro-batches, committed one by one before the epoch is sealed.

        The split must be a pure function of ``bounds`` so that a replay splits alike.
        """
        return (bounds,)

    def slice_bytes(self, bounds: Mapping[str, object]) -> int | None:
        """How many bytes the slice holds, if the source knows without reading it; None
        when it does not. A batch whose slice is known to be small runs with the small-batch
        Spark settings (:data:`etl.spark.SMALL_BATCH_CONF`); an unknown size never does."""
        return None


__all__ = [
    "DirectSlice",
    "DirectWrite",
    "SealedTable",
    "SliceData",
    "SliceRequest",
    "Source",
    "TableTarget",
    "WrittenSlice",
    "WrittenTable",
]
