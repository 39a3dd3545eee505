"""The Spark/Delta runtime of Delta Barrier: pipelines, jobs, the runner and consistent reads.

Names are imported on first use, so that ``etl status`` and other commands that need no
Spark do not pay for importing PySpark. :data:`_EXPORTS` is the one list of the public
names, each with the module that defines it.
"""

from __future__ import annotations

import logging

from etl.lazy import lazy_exports

# A library leaves logging to its user (no "No handlers" fallback printing to stderr).
logging.getLogger(__name__).addHandler(logging.NullHandler())

_EXPORTS: dict[str, str] = {
    # defining a pipeline
    "Pipeline": "etl.pipeline",
    "Job": "etl.pipeline",
    "Input": "etl.pipeline",
    "EpochContext": "etl.pipeline",
    "param": "etl.pipeline",
    "Retention": "consistency.retention",
    "parameters": "etl.pipeline",
    "QualityGate": "etl.quality",
    # sources
    "Source": "etl.sources.base",
    "SliceRequest": "etl.sources.base",
    "SliceData": "etl.sources.base",
    "FileSource": "etl.sources.files",
    "KafkaSource": "etl.sources.kafka",
    "DeltaTableSource": "etl.sources.delta_table",
    # running it
    "Runner": "etl.runner",
    "RunResult": "etl.runner",
    "JobFailure": "etl.runner",
    "BatchResult": "etl.engine",
    "BatchOutcome": "etl.engine",
    "RecoveryStep": "etl.engine",
    "StepAction": "etl.engine",
    "build_spark": "etl.spark",
    # reading consistently
    "snapshot": "etl.reader",
    "SnapshotReader": "etl.reader",
    "tables_in_sql": "etl.reader",
    # errors
    "EtlError": "etl.errors",
    "ExitCode": "etl.errors",
    "InternalError": "etl.errors",
    "JobError": "etl.errors",
    "JobExecutionError": "etl.errors",
    "OutputSchemaError": "etl.errors",
    "PipelineBusyError": "etl.errors",
    "PipelineDefinitionError": "etl.errors",
    "PipelineLoadError": "etl.errors",
    "QualityError": "etl.errors",
    "SourceError": "etl.errors",
    "SqlTablesError": "etl.errors",
    "TransformError": "etl.errors",
    "UsageError": "etl.errors",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
