"""GX's Spark conditions for the column-map expectations a quarantine can split rows on.

Mirrors great_expectations/expectations/metrics/column_map_metrics/*.py (GX 1.24), `_spark`
condition partials. :func:`etl.quality.run_gate` verifies the row counts against GX on
every quarantine run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F


@dataclass(frozen=True)
class RowRule:
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


ROW_RULES: Mapping[str, RowRule] = {
    "expect_column_values_to_not_be_null": RowRule(lambda c, e: c.isNotNull(), skips_nulls=False),
    "expect_column_values_to_be_null": RowRule(lambda c, e: c.isNull(), skips_nulls=False),
    "expect_column_values_to_be_in_set": RowRule(
        lambda c, e: F.lit(True) if e.value_set is None else c.isin(e.value_set)
    ),
    "expect_column_values_to_not_be_in_set": RowRule(lambda c, e: ~c.isin(e.value_set)),
    "expect_column_values_to_be_between": RowRule(
        lambda c, e: _between(c, e.min_value, e.max_value, e.strict_min, e.strict_max)
    ),
    "expect_column_values_to_match_regex": RowRule(lambda c, e: c.rlike(e.regex)),
    "expect_column_values_to_not_match_regex": RowRule(lambda c, e: ~c.rlike(e.regex)),
    "expect_column_value_lengths_to_be_between": RowRule(
        lambda c, e: _between(F.length(c), e.min_value, e.max_value, e.strict_min, e.strict_max)
    ),
    "expect_column_value_lengths_to_equal": RowRule(lambda c, e: F.length(c) == F.lit(e.value)),
}

# Map expectations whose verdict on a row depends on other rows (uniqueness) or, on Spark,
# on the schema only: they pass or fail the whole epoch.
TABLE_LEVEL_MAP_TYPES = frozenset(
    {
        "expect_column_values_to_be_unique",
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_be_of_type",
        "expect_column_values_to_be_in_type_list",
    }
)


def quarantine_supported_types() -> tuple[str, ...]:
    """The row-level expectation types a ``quarantine`` gate can split rows on."""
    return tuple(sorted(ROW_RULES))


__all__ = [
    "ROW_RULES",
    "TABLE_LEVEL_MAP_TYPES",
    "RowRule",
    "quarantine_supported_types",
]
