"""The Spark/Delta runtime of Delta Barrier: pipelines, jobs, the runner and consistent reads.

Names are imported on first use, so that ``etl status`` and other commands that need no
Spark do not pay for importing PySpark.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# Eager: importing the submodule etl.snapshot would bind the package attribute `snapshot`
# to the module, shadowing the function.
from etl.snapshot import SnapshotReader, snapshot, tables_in_sql

if TYPE_CHECKING:
    from etl.engine import BatchResult, EpochEngine, RecoveryStep
    from etl.errors import (
        EtlError,
        JobError,
        JobExecutionError,
        OutputSchemaError,
        PipelineBusyError,
        PipelineDefinitionError,
        PipelineLoadError,
        SourceError,
        SqlTablesError,
        TransformError,
    )
    from etl.pipeline import EpochContext, Input, Job, Pipeline, param, parameters
    from etl.runner import JobFailure, Runner, RunResult
    from etl.sources.base import SliceData, SliceRequest, Source
    from etl.sources.files import FileSource
    from etl.spark import build_spark

# A library leaves logging to its user (no "No handlers" fallback printing to stderr).
logging.getLogger(__name__).addHandler(logging.NullHandler())

_EXPORTS = {
    "BatchResult": "etl.engine",
    "EpochContext": "etl.pipeline",
    "EpochEngine": "etl.engine",
    "EtlError": "etl.errors",
    "FileSource": "etl.sources.files",
    "Input": "etl.pipeline",
    "Job": "etl.pipeline",
    "JobError": "etl.errors",
    "JobExecutionError": "etl.errors",
    "JobFailure": "etl.runner",
    "OutputSchemaError": "etl.errors",
    "Pipeline": "etl.pipeline",
    "PipelineBusyError": "etl.errors",
    "PipelineDefinitionError": "etl.errors",
    "PipelineLoadError": "etl.errors",
    "RecoveryStep": "etl.engine",
    "RunResult": "etl.runner",
    "Runner": "etl.runner",
    "SliceData": "etl.sources.base",
    "SliceRequest": "etl.sources.base",
    "Source": "etl.sources.base",
    "SourceError": "etl.errors",
    "SqlTablesError": "etl.errors",
    "TransformError": "etl.errors",
    "build_spark": "etl.spark",
    "param": "etl.pipeline",
    "parameters": "etl.pipeline",
}

__all__ = [
    "BatchResult",
    "EpochContext",
    "EpochEngine",
    "EtlError",
    "FileSource",
    "Input",
    "Job",
    "JobError",
    "JobExecutionError",
    "JobFailure",
    "OutputSchemaError",
    "Pipeline",
    "PipelineBusyError",
    "PipelineDefinitionError",
    "PipelineLoadError",
    "RecoveryStep",
    "RunResult",
    "Runner",
    "SliceData",
    "SliceRequest",
    "SnapshotReader",
    "Source",
    "SourceError",
    "SqlTablesError",
    "TransformError",
    "build_spark",
    "param",
    "parameters",
    "snapshot",
    "tables_in_sql",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'etl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
