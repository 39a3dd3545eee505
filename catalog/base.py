"""The catalog interface: FLIP-276's MetaService.

One abstract class, two backends behind :func:`catalog.load_catalog`: SQLite (embedded
default, a file in the warehouse or in memory) and PostgreSQL (shared by many
processes). Every method that changes state is one database transaction.

:class:`Catalog` is the stores of its domains together, each an interface of its own in
``catalog/<domain>/base.py``: registry, epochs, states, leases, records, retention,
revisions. Callers hold the one Catalog.
"""

from __future__ import annotations

from abc import abstractmethod

from catalog.epochs.base import EpochStore
from catalog.leases.base import LeaseStore
from catalog.records.base import RecordStore
from catalog.registry.base import RegistryStore
from catalog.retention.base import RetentionStore
from catalog.revisions.base import RevisionStore
from catalog.states.base import StateStore

SCHEMA_VERSION = 3

META_SCHEMA_VERSION = "schema_version"
"""The key of the schema version in the catalog's ``meta`` table."""


class Catalog(
    RegistryStore, EpochStore, StateStore, LeaseStore, RecordStore, RetentionStore, RevisionStore
):
    """Tables, jobs, lineage, epochs, source slices, epoch states, commits and leases;
    pipelines, job failures, resolutions of blocked epochs, pins, tags and expiries.

    Pipelines: every table and job belongs to one named pipeline (PIPELINE_DEFAULT
    unless its spec says otherwise); a pipeline exists once its first table or job is
    registered ("default" always exists). Epoch ids are one sequence per catalog, but
    each epoch belongs to the pipeline that opened it, and a table's epochs are only
    those of its pipeline: states, validations and resolutions of a table at another
    pipeline's epoch are refused with ForeignEpochError.
    """

    url: str
    """The catalog URL with any password masked."""

    # -- lifecycle -------------------------------------------------------------------

    @abstractmethod
    def upgrade(self) -> int:
        """Migrate the schema to SCHEMA_VERSION; returns the version found before."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
