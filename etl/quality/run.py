"""Data-quality gates: Great Expectations checks an epoch's rows before the epoch is sealed.

Write, audit, publish: a job commits epoch T's rows (PROCESSED), :func:`run_gate` validates
them with Great Expectations (GX) on Spark, and the :class:`GateOutcome` says whether T may
be sealed (WRITTEN) under the table's policy:

- ``block``: any failed expectation keeps the epoch from being sealed.
- ``quarantine``: rows that fail a row-level expectation are split off (``quarantined``,
  tagged with ``_failed_expectations`` and ``_epoch``) and the rest (``passing``) is sealed;
  a failed table-level expectation blocks.
- ``warn``: the epoch is sealed whatever the results.

GX computes its metrics as Spark aggregates; with the result format used here nothing but
one-row aggregates reaches the driver. The quarantine split is a Spark filter whose
per-expectation predicates mirror GX's own Spark conditions; every run checks, in one extra
aggregate, that each predicate selects exactly as many rows as GX counted unexpected.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import reduce
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from catalog import ValidationRecord
from etl.delta.log import EPOCH_COLUMN
from etl.errors import ExpectationError, QualityError, QuarantineMismatchError
from etl.quality.gate import Check, Policy, QualityGate

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

FAILED_EXPECTATIONS_COLUMN = "_failed_expectations"

# Counts only: a larger partial_unexpected_count costs one Spark job per expectation, and the
# COMPLETE format collects every unexpected row's index columns to the driver.
_RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": 0}

_SUMMARY_KEYS = (
    "element_count",
    "unexpected_count",
    "unexpected_percent",
    "missing_count",
    "observed_value",
)

_GATE_INDEX_META = "delta_barrier_gate_index"


@dataclass(frozen=True)
class GateOutcome:
    """What a gate concluded about one epoch of one table.

    ``results`` holds one JSON-serialisable summary per expectation, in gate order
    (``expectation``, ``type``, ``kwargs``, ``level``, ``success`` and GX's counts:
    ``element_count``, ``unexpected_count``, ``unexpected_percent``, ``missing_count``, or
    ``observed_value`` for table-level expectations). ``blocking`` lists the failed
    expectations that keep the epoch from being sealed under the policy; ``success`` is
    true when there are none. ``passing`` (the input's columns) and ``quarantined`` (plus
    ``_failed_expectations``, the labels of the expectations the row fails, and ``_epoch``
    set to the gated epoch) are set only for a sealable epoch under ``quarantine``.
    """

    table: str
    epoch: int
    policy: Policy
    success: bool
    results: tuple[Mapping[str, Any], ...]
    failed_expectations: tuple[str, ...]
    blocking: tuple[str, ...]
    passing: DataFrame | None = None
    quarantined: DataFrame | None = None
    quarantined_count: int | None = None

    @property
    def blocked_reason(self) -> str | None:
        """Why the epoch may not be sealed, for operators; None when it may."""
        if not self.blocking:
            return None
        return (
            f"quality gate ({self.policy}) of table {self.table!r} epoch {self.epoch}: "
            f"{len(self.blocking)} expectation(s) failed: {'; '.join(self.blocking)}"
        )

    def record(self) -> ValidationRecord:
        """The verdict as the catalog keeps it per (table, epoch)."""
        return ValidationRecord(
            table=self.table,
            epoch=self.epoch,
            # Whether every expectation passed, not whether the policy let the epoch through.
            success=not self.failed_expectations,
            policy=self.policy,
            results=self.summary(),
        )

    def summary(self) -> dict[str, Any]:
        """Everything but the DataFrames, JSON-serialisable: what the catalog keeps."""
        return {
            "policy": self.policy,
            "success": self.success,
            "failed_expectations": list(self.failed_expectations),
            "blocking": list(self.blocking),
            "quarantined_count": self.quarantined_count,
            "expectations": [dict(result) for result in self.results],
        }


_GX_LOCK = threading.Lock()

_gx_batch_definition: BatchDefinition | None = None


def _batch_definition() -> BatchDefinition:
    """One ephemeral GX context per process, reused: call with ``_GX_LOCK`` held."""
    global _gx_batch_definition
    if _gx_batch_definition is None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        context.enable_analytics(False)
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        # persist=False: GX would otherwise persist() every DataFrame it sees, never unpersist.
        source = context.data_sources.add_spark(name="delta_barrier", persist=False)
        asset = source.add_dataframe_asset(name="epoch_rows")
        _gx_batch_definition = asset.add_batch_definition_whole_dataframe("whole_epoch")
    return _gx_batch_definition


def _raised(result: ExpectationValidationResult) -> str | None:
    """GX's error message when evaluating the expectation raised, else None.

    A suite run nests the information per failed metric; a single run does not.
    """
    info = result.exception_info or {}
    entries = [info] if "raised_exception" in info else list(info.values())
    messages = [
        str(entry.get("exception_message") or "unknown error").strip()
        for entry in entries
        if isinstance(entry, Mapping) and entry.get("raised_exception")
    ]
    return "; ".join(dict.fromkeys(messages)) or None


def _validate(gate: QualityGate, rows: DataFrame, epoch: int) -> list[ExpectationValidationResult]:
    import great_expectations as gx

    suite = gx.ExpectationSuite(
        name=f"{gate.table}-epoch-{epoch}",
        expectations=[
            c.expectation.copy(
                update={"meta": {**(c.expectation.meta or {}), _GATE_INDEX_META: c.index}}
            )
            for c in gate.checks
        ],
    )
    with _GX_LOCK:
        batch = _batch_definition().get_batch(batch_parameters={"dataframe": rows})
        try:
            suite_result = batch.validate(suite, result_format=_RESULT_FORMAT)
        except Exception as exc:
            raise QualityError(
                gate.table, f"Great Expectations failed to validate epoch {epoch}: {exc}"
            ) from exc
    # GX reorders results; the meta index ties each one back to its expectation.
    by_index = {
        cast("ExpectationConfiguration", r.expectation_config).meta[_GATE_INDEX_META]: r
        for r in suite_result.results
    }
    return [by_index[c.index] for c in gate.checks]


def _summary(check: Check, result: ExpectationValidationResult) -> dict[str, Any]:
    found = cast("dict[str, Any]", result.to_json_dict().get("result") or {})
    summary: dict[str, Any] = {
        "expectation": check.label,
        "type": check.expectation.expectation_type,
        "kwargs": dict(check.kwargs),
        "level": check.level,
        "success": bool(result.success),
    }
    summary.update({key: found[key] for key in _SUMMARY_KEYS if key in found})
    return summary


def run_gate(spark: SparkSession, gate: QualityGate, rows: DataFrame, *, epoch: int) -> GateOutcome:
    """Validate epoch ``epoch``'s ``rows`` of ``gate.table`` and decide whether it may be sealed.

    ``rows`` must be deterministic (e.g. the epoch's rows read from a fixed Delta version):
    GX, the quarantine check and the lazy ``passing``/``quarantined`` frames each evaluate
    them. Raises :class:`ExpectationError` when GX cannot evaluate an expectation on these
    rows (never a silent pass), and :class:`QuarantineMismatchError` when a quarantine split
    would not match GX's counts. Spark jobs are labelled with the table and epoch.
    """
    if gate.policy == "quarantine":
        clash = {FAILED_EXPECTATIONS_COLUMN} & set(rows.columns)
        if clash:
            raise QualityError(
                gate.table,
                f"epoch {epoch}: the rows already have a column {sorted(clash)[0]!r}, which "
                "quarantine adds to failing rows; rename it in the job",
            )
    context = spark.sparkContext
    previous_description = context.getLocalProperty("spark.job.description")
    context.setJobDescription(f"quality gate {gate.table} epoch {epoch}")
    try:
        return _run(gate, rows, epoch)
    finally:
        context.setJobDescription(previous_description)  # type: ignore[arg-type]


def _run(gate: QualityGate, rows: DataFrame, epoch: int) -> GateOutcome:
    results = _validate(gate, rows, epoch)
    for check, result in zip(gate.checks, results, strict=True):
        reason = _raised(result)
        if reason is not None:
            raise ExpectationError(gate.table, check.label, reason, epoch=epoch)

    failed = tuple(c.label for c, r in zip(gate.checks, results, strict=True) if not r.success)
    if gate.policy == "block":
        blocking = failed
    elif gate.policy == "quarantine":
        blocking = tuple(
            c.label
            for c, r in zip(gate.checks, results, strict=True)
            if not r.success and c.level == "table"
        )
    else:
        blocking = ()
    outcome = GateOutcome(
        table=gate.table,
        epoch=epoch,
        policy=gate.policy,
        success=not blocking,
        results=tuple(_summary(c, r) for c, r in zip(gate.checks, results, strict=True)),
        failed_expectations=failed,
        blocking=blocking,
    )
    if gate.policy != "quarantine" or blocking:
        return outcome
    return _split(gate, rows, epoch, outcome, results)


def _split(
    gate: QualityGate,
    rows: DataFrame,
    epoch: int,
    outcome: GateOutcome,
    results: list[ExpectationValidationResult],
) -> GateOutcome:
    row_checks = [(c, r) for c, r in zip(gate.checks, results, strict=True) if c.level == "row"]
    flags = [(c.label, c.unexpected()) for c, _ in row_checks]
    failing = reduce(lambda a, b: a | b, (flag for _, flag in flags), F.lit(False))
    counts = rows.agg(
        *(F.count_if(flag) for _, flag in flags), F.count_if(failing).alias("failing")
    ).first()
    assert counts is not None  # an aggregate without grouping always yields one row
    for position, (check, result) in enumerate(row_checks):
        gx_unexpected = result.result.get("unexpected_count")
        if gx_unexpected is None and result.result.get("element_count") == 0:
            gx_unexpected = 0  # GX reports no count, rather than 0, for an empty epoch
        if gx_unexpected != counts[position]:
            raise QuarantineMismatchError(
                gate.table,
                check.label,
                epoch=epoch,
                gx_unexpected=gx_unexpected,
                predicate_rows=int(counts[position]),
            )
    return replace(
        outcome,
        passing=rows.filter(~failing),
        quarantined=_tagged(rows.filter(failing), flags, epoch),
        quarantined_count=int(counts["failing"]),
    )


def _tagged(rows: DataFrame, flags: list[tuple[str, Column]], epoch: int) -> DataFrame:
    """Failing rows as the quarantine table holds them: the labels of the expectations
    each fails, and the gated epoch."""
    failed_labels = F.array_compact(
        F.array(*(F.when(flag, F.lit(label)) for label, flag in flags)).cast("array<string>")
    )
    return rows.withColumn(FAILED_EXPECTATIONS_COLUMN, failed_labels).withColumn(
        EPOCH_COLUMN, F.lit(epoch).cast("long")
    )


def no_quarantined_rows(gate: QualityGate, rows: DataFrame, *, epoch: int) -> DataFrame:
    """No rows, with the quarantine table's schema for ``rows``: what creates the table of
    a gate whose epoch quarantined nothing (a ``block`` gate's, until a resolution)."""
    flags = [(c.label, F.lit(False)) for c in gate.checks if c.level == "row"]
    return _tagged(rows.limit(0), flags, epoch)


__all__ = [
    "FAILED_EXPECTATIONS_COLUMN",
    "GateOutcome",
    "no_quarantined_rows",
    "run_gate",
]
