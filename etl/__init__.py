"""The Spark/Delta runtime of Delta Barrier: pipelines, jobs, the runner and consistent reads."""

from etl.engine import BatchResult, EpochEngine, RecoveryStep
from etl.errors import (
    EtlError,
    JobError,
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
from etl.snapshot import SnapshotReader, snapshot, tables_in_sql
from etl.sources.base import SliceData, SliceRequest, Source
from etl.sources.files import FileSource
from etl.spark import build_spark

__all__ = [
    "BatchResult",
    "EpochContext",
    "EpochEngine",
    "EtlError",
    "FileSource",
    "Input",
    "Job",
    "JobError",
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
