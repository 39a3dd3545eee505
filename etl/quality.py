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

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from functools import reduce
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from catalog.errors import DeltaBarrierError
from catalog.models import validate_name

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.expectations import Expectation
    from great_expectations.expectations.expectation import ColumnMapExpectation
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

__all__ = [
    "FAILED_EXPECTATIONS_COLUMN",
    "POLICIES",
    "QUARANTINE_EPOCH_COLUMN",
    "ExpectationError",
    "GateDefinitionError",
    "GateOutcome",
    "Policy",
    "QualityError",
    "QualityGate",
    "QuarantineMismatchError",
    "quarantine_supported_types",
    "run_gate",
]

Policy = Literal["block", "quarantine", "warn"]
POLICIES: tuple[str, ...] = get_args(Policy)
Level = Literal["row", "table"]

FAILED_EXPECTATIONS_COLUMN = "_failed_expectations"
QUARANTINE_EPOCH_COLUMN = "_epoch"

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


class QualityError(DeltaBarrierError):
    """A data-quality gate cannot be defined or run."""

    def __init__(self, table: str, message: str):
        self.table = table
        super().__init__(f"quality gate of table {table!r}: {message}")


class GateDefinitionError(QualityError):
    """The gate's policy or expectations are not usable; raised when the gate is built."""

    def __init__(self, table: str, reason: str, *, expectation: str | None = None):
        self.reason = reason
        self.expectation = expectation
        where = f"expectation {expectation}: " if expectation else ""
        super().__init__(table, where + reason)


class ExpectationError(QualityError):
    """GX raised while evaluating an expectation (e.g. its column does not exist).

    The epoch is neither passed nor failed: the gate itself is wrong for these rows.
    """

    def __init__(self, table: str, expectation: str, reason: str, *, epoch: int | None = None):
        self.expectation = expectation
        self.reason = reason
        self.epoch = epoch
        at = f" at epoch {epoch}" if epoch is not None else ""
        super().__init__(
            table,
            f"expectation {expectation} could not be evaluated{at}: {reason}. "
            "Fix the expectation or the table's schema; the epoch stays unsealed",
        )


class QuarantineMismatchError(QualityError):
    """A quarantine predicate disagrees with GX's unexpected count: the split would be wrong."""

    def __init__(
        self,
        table: str,
        expectation: str,
        *,
        epoch: int,
        gx_unexpected: int | None,
        predicate_rows: int,
    ):
        self.expectation = expectation
        self.epoch = epoch
        self.gx_unexpected = gx_unexpected
        self.predicate_rows = predicate_rows
        super().__init__(
            table,
            f"epoch {epoch}: the quarantine predicate of expectation {expectation} selects "
            f"{predicate_rows} rows but Great Expectations counted {gx_unexpected} unexpected; "
            "refusing to split the epoch. The installed GX version evaluates this expectation "
            "differently from etl.quality's translation: use policy 'block' for this table",
        )


@dataclass(frozen=True)
class _RowRule:
    """GX's Spark condition for one column-map expectation type.

    ``expected`` is the condition a good value meets; ``skips_nulls`` is GX's
    ``filter_column_isnull``: null values are outside the expectation's domain, so never
    unexpected.
    """

    expected: Callable[[Column, Any], Column]
    skips_nulls: bool = True


def _between(value: Column, low: Any, high: Any, strict_low: bool, strict_high: bool) -> Column:
    bounds = []
    if low is not None:
        bounds.append(value > F.lit(low) if strict_low else value >= F.lit(low))
    if high is not None:
        bounds.append(value < F.lit(high) if strict_high else value <= F.lit(high))
    return reduce(lambda a, b: a & b, bounds)


# Mirrors great_expectations/expectations/metrics/column_map_metrics/*.py (GX 1.24), `_spark`
# condition partials. run_gate verifies the row counts against GX on every quarantine run.
_ROW_RULES: Mapping[str, _RowRule] = {
    "expect_column_values_to_not_be_null": _RowRule(lambda c, e: c.isNotNull(), skips_nulls=False),
    "expect_column_values_to_be_null": _RowRule(lambda c, e: c.isNull(), skips_nulls=False),
    "expect_column_values_to_be_in_set": _RowRule(
        lambda c, e: F.lit(True) if e.value_set is None else c.isin(e.value_set)
    ),
    "expect_column_values_to_not_be_in_set": _RowRule(lambda c, e: ~c.isin(e.value_set)),
    "expect_column_values_to_be_between": _RowRule(
        lambda c, e: _between(c, e.min_value, e.max_value, e.strict_min, e.strict_max)
    ),
    "expect_column_values_to_match_regex": _RowRule(lambda c, e: c.rlike(e.regex)),
    "expect_column_values_to_not_match_regex": _RowRule(lambda c, e: ~c.rlike(e.regex)),
    "expect_column_value_lengths_to_be_between": _RowRule(
        lambda c, e: _between(F.length(c), e.min_value, e.max_value, e.strict_min, e.strict_max)
    ),
    "expect_column_value_lengths_to_equal": _RowRule(lambda c, e: F.length(c) == F.lit(e.value)),
}

# Map expectations whose verdict on a row depends on other rows (uniqueness) or, on Spark,
# on the schema only: they pass or fail the whole epoch.
_TABLE_LEVEL_MAP_TYPES = frozenset(
    {
        "expect_column_values_to_be_unique",
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_be_of_type",
        "expect_column_values_to_be_in_type_list",
    }
)


def quarantine_supported_types() -> tuple[str, ...]:
    """The row-level expectation types a ``quarantine`` gate can split rows on."""
    return tuple(sorted(_ROW_RULES))


@dataclass(frozen=True)
class _Check:
    index: int
    expectation: Expectation
    label: str
    kwargs: Mapping[str, Any]
    level: Level

    def unexpected(self) -> Column:
        """The rows GX counts unexpected, as a null-free Spark predicate."""
        expectation = cast("ColumnMapExpectation", self.expectation)
        rule = _ROW_RULES[expectation.expectation_type]
        column = F.col(expectation.column)
        expected = rule.expected(column, expectation)
        condition = column.isNotNull() & ~expected if rule.skips_nulls else ~expected
        # GX counts `when(condition, 1)`: a null condition is not unexpected.
        return F.coalesce(condition, F.lit(False))


def _describe(expectation: Expectation) -> tuple[str, dict[str, Any]]:
    kwargs = cast("dict[str, Any]", expectation.configuration.to_json_dict()["kwargs"])
    kwargs.pop("batch_id", None)
    arguments = ", ".join(
        f"{key}={json.dumps(kwargs[key], sort_keys=True, ensure_ascii=False)}"
        for key in sorted(kwargs)
    )
    return f"{expectation.expectation_type}({arguments})", kwargs


def _level(expectation: Expectation) -> Level:
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    row_kinds = (ColumnMapExpectation, ColumnPairMapExpectation, MulticolumnMapExpectation)
    if isinstance(expectation, row_kinds) and (
        expectation.expectation_type not in _TABLE_LEVEL_MAP_TYPES
    ):
        return "row"
    return "table"


@dataclass(frozen=True)
class QualityGate:
    """The expectations an epoch of ``table`` must meet, and what happens when it does not.

    Under ``quarantine`` every row-level expectation must be one GX evaluates per row and
    :func:`quarantine_supported_types` lists, without ``mostly`` or ``row_condition``;
    anything else is refused here, not at run time. Failing rows go to ``quarantine``
    (default ``<table>_quarantine``).
    """

    table: str
    expectations: Sequence[Expectation]
    _: KW_ONLY
    policy: Policy = "block"
    quarantine: str | None = None
    _checks: tuple[_Check, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from great_expectations.expectations import Expectation

        validate_name(self.table, kind="table")
        if self.policy not in POLICIES:
            raise GateDefinitionError(
                self.table,
                f"unknown policy {self.policy!r}; valid policies are {', '.join(POLICIES)}",
            )
        if self.quarantine is not None:
            if self.policy != "quarantine":
                raise GateDefinitionError(
                    self.table,
                    f"names quarantine table {self.quarantine!r} but its policy is "
                    f"{self.policy!r}; set policy='quarantine' or drop `quarantine`",
                )
            validate_name(self.quarantine, kind="table")
        if isinstance(self.expectations, Expectation) or not self.expectations:
            raise GateDefinitionError(
                self.table, "a gate needs a non-empty sequence of GX expectations"
            )
        checks: list[_Check] = []
        seen: set[str] = set()
        for index, expectation in enumerate(self.expectations):
            if not isinstance(expectation, Expectation):
                raise GateDefinitionError(
                    self.table,
                    f"item {index} is a {type(expectation).__name__}, not a GX Expectation "
                    "(e.g. gx.expectations.ExpectColumnValuesToNotBeNull(column=...))",
                )
            # A private copy: later changes to the caller's object cannot bypass these checks,
            # and no suite id, which GX reads as "belongs to another suite".
            owned = expectation.copy(deep=True, update={"id": None})
            label, kwargs = _describe(owned)
            if label in seen:
                raise GateDefinitionError(self.table, "listed twice", expectation=label)
            seen.add(label)
            check = _Check(index, owned, label, kwargs, _level(owned))
            if self.policy == "quarantine" and check.level == "row":
                self._require_splittable(check)
            checks.append(check)
        object.__setattr__(self, "expectations", tuple(c.expectation for c in checks))
        object.__setattr__(self, "_checks", tuple(checks))

    @property
    def quarantine_table(self) -> str | None:
        """The table failing rows go to: None unless the policy is ``quarantine``."""
        if self.policy != "quarantine":
            return None
        return self.quarantine or f"{self.table}_quarantine"

    def _require_splittable(self, check: _Check) -> None:
        # Every type with a row rule is a ColumnMapExpectation.
        expectation = cast("ColumnMapExpectation", check.expectation)
        if expectation.expectation_type not in _ROW_RULES:
            raise GateDefinitionError(
                self.table,
                "is row-level but cannot be split into passing and quarantined rows; "
                f"quarantine supports {', '.join(quarantine_supported_types())}. "
                "Use policy 'block' or 'warn' for this table, or another expectation",
                expectation=check.label,
            )
        if expectation.mostly != 1:
            raise GateDefinitionError(
                self.table,
                f"mostly={expectation.mostly} has no meaning under quarantine (every failing "
                "row is quarantined); drop `mostly` or use policy 'block' or 'warn'",
                expectation=check.label,
            )
        if expectation.row_condition is not None:
            raise GateDefinitionError(
                self.table,
                "row_condition is not supported under quarantine; filter the rows in the "
                "job instead, or use policy 'block' or 'warn'",
                expectation=check.label,
            )


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
            for c in gate._checks
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
    return [by_index[c.index] for c in gate._checks]


def _summary(check: _Check, result: ExpectationValidationResult) -> dict[str, Any]:
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
    for check, result in zip(gate._checks, results, strict=True):
        reason = _raised(result)
        if reason is not None:
            raise ExpectationError(gate.table, check.label, reason, epoch=epoch)

    failed = tuple(c.label for c, r in zip(gate._checks, results, strict=True) if not r.success)
    if gate.policy == "block":
        blocking = failed
    elif gate.policy == "quarantine":
        blocking = tuple(
            c.label
            for c, r in zip(gate._checks, results, strict=True)
            if not r.success and c.level == "table"
        )
    else:
        blocking = ()
    outcome = GateOutcome(
        table=gate.table,
        epoch=epoch,
        policy=gate.policy,
        success=not blocking,
        results=tuple(_summary(c, r) for c, r in zip(gate._checks, results, strict=True)),
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
    row_checks = [(c, r) for c, r in zip(gate._checks, results, strict=True) if c.level == "row"]
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
    failed_labels = F.array_compact(
        F.array(*(F.when(flag, F.lit(label)) for label, flag in flags)).cast("array<string>")
    )
    quarantined = (
        rows.filter(failing)
        .withColumn(FAILED_EXPECTATIONS_COLUMN, failed_labels)
        .withColumn(QUARANTINE_EPOCH_COLUMN, F.lit(epoch).cast("long"))
    )
    return replace(
        outcome,
        passing=rows.filter(~failing),
        quarantined=quarantined,
        quarantined_count=int(counts["failing"]),
    )
