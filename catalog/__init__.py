"""The catalog: FLIP-276's MetaService, in SQLite (embedded) or PostgreSQL (shared).

Open one with :func:`load_catalog`; every state change is one database transaction.
A command that only reads snapshots opens it with :func:`open_for_reads` (a SQLite file
without SQLAlchemy, which ``import catalog`` does not import until ``load_catalog`` or
``SqlCatalog`` is first used).
"""

from typing import TYPE_CHECKING

from catalog.base import SCHEMA_VERSION, Catalog
from catalog.errors import (
    CatalogError,
    CatalogNotFoundError,
    CatalogReadOnlyError,
    CatalogUnavailableError,
    CatalogUrlError,
    DeltaBarrierError,
    DuplicateWriterError,
    EpochExpiredError,
    EpochStateError,
    ForeignEpochError,
    InvalidNameError,
    InvalidRetentionPolicyError,
    LeaseError,
    LeaseHeldError,
    LineageCycleError,
    NameOwnedError,
    PinExpiredError,
    PipelineMismatchError,
    RegistrationError,
    RetentionError,
    RetiredError,
    RetirementBlockedError,
    RevisionStateError,
    SchemaVersionError,
    SliceConflictError,
    StaleLeaseError,
    TableConflictError,
    TagExistsError,
    UnknownEpochError,
    UnknownJobError,
    UnknownPipelineError,
    UnknownRevisionError,
    UnknownTableError,
    UnknownTagError,
    WriterMismatchError,
)
from catalog.models import (
    FAILURE_MESSAGE_MAX_CHARS,
    BatchStart,
    CommitManifest,
    EpochExpiry,
    JobFailureRecord,
    JobInfo,
    JobProgress,
    JobSpec,
    Lease,
    LineageEdge,
    Pin,
    PipelineInfo,
    ProgressRequest,
    RenewedLeases,
    Resolution,
    ResolutionAction,
    RetiredPipeline,
    SealRequest,
    SourceSlice,
    TableInfo,
    TableKind,
    TableSpec,
    TableStatus,
    Tag,
    ValidationRecord,
    WriteMode,
    validate_name,
)
from catalog.reads import CatalogReads, open_for_reads
from catalog.urls import CATALOG_FILE_NAME, mask_url, url_password
from catalog.write_gate import writes_held
from consistency.records import (
    PIPELINE_DEFAULT,
    Epoch,
    EpochState,
    Revision,
    RevisionState,
    TableEpoch,
)
from consistency.states import LEGAL_TRANSITIONS, check_transition
from consistency.timestamps import as_utc

if TYPE_CHECKING:
    from catalog.factory import load_catalog
    from catalog.sql import SqlCatalog

_SQLALCHEMY_EXPORTS = {"SqlCatalog": "catalog.sql", "load_catalog": "catalog.factory"}
"""Imported on first use: they bring SQLAlchemy, which a snapshot read of a SQLite
catalog does without (see :mod:`catalog.sqlite_reads`)."""


def __getattr__(name: str) -> object:
    module = _SQLALCHEMY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'catalog' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "as_utc",
    "writes_held",
    "BatchStart",
    "CATALOG_FILE_NAME",
    "CatalogReads",
    "FAILURE_MESSAGE_MAX_CHARS",
    "LEGAL_TRANSITIONS",
    "PIPELINE_DEFAULT",
    "SCHEMA_VERSION",
    "Catalog",
    "CatalogError",
    "CatalogNotFoundError",
    "CatalogReadOnlyError",
    "CatalogUnavailableError",
    "CatalogUrlError",
    "CommitManifest",
    "DeltaBarrierError",
    "DuplicateWriterError",
    "Epoch",
    "EpochExpiredError",
    "EpochExpiry",
    "EpochState",
    "EpochStateError",
    "ForeignEpochError",
    "InvalidNameError",
    "InvalidRetentionPolicyError",
    "JobFailureRecord",
    "JobInfo",
    "JobProgress",
    "JobSpec",
    "Lease",
    "LeaseError",
    "LeaseHeldError",
    "LineageCycleError",
    "NameOwnedError",
    "LineageEdge",
    "Pin",
    "PinExpiredError",
    "PipelineInfo",
    "ProgressRequest",
    "RetiredPipeline",
    "PipelineMismatchError",
    "RegistrationError",
    "RenewedLeases",
    "Resolution",
    "ResolutionAction",
    "RetentionError",
    "RetiredError",
    "RetirementBlockedError",
    "Revision",
    "RevisionState",
    "RevisionStateError",
    "SchemaVersionError",
    "SealRequest",
    "SliceConflictError",
    "SourceSlice",
    "SqlCatalog",
    "StaleLeaseError",
    "TableConflictError",
    "TableEpoch",
    "TableInfo",
    "TableKind",
    "TableSpec",
    "TableStatus",
    "Tag",
    "TagExistsError",
    "UnknownEpochError",
    "UnknownJobError",
    "UnknownPipelineError",
    "UnknownRevisionError",
    "UnknownTableError",
    "UnknownTagError",
    "ValidationRecord",
    "WriteMode",
    "WriterMismatchError",
    "check_transition",
    "load_catalog",
    "mask_url",
    "open_for_reads",
    "url_password",
    "validate_name",
]
