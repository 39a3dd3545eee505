"""A quality gate: the GX expectations an epoch of a table must meet, and the policy."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from pyspark.sql import Column
from pyspark.sql import functions as F

from catalog.models import validate_name
from etl.errors import GateDefinitionError
from etl.quality.rules import ROW_RULES, TABLE_LEVEL_MAP_TYPES, quarantine_supported_types

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation
    from great_expectations.expectations.expectation import ColumnMapExpectation

Policy = Literal["block", "quarantine", "warn"]
POLICIES: tuple[str, ...] = get_args(Policy)
ExpectationScope = Literal["row", "table"]
"""Whether an expectation judges each row (rows can be quarantined) or the whole epoch."""


@dataclass(frozen=True)
class Check:
    """One expectation of a gate, with its label and scope."""

    index: int
    expectation: Expectation
    label: str
    kwargs: Mapping[str, Any]
    level: ExpectationScope

    def unexpected(self) -> Column:
        """The rows GX counts unexpected, as a null-free Spark predicate."""
        expectation = cast("ColumnMapExpectation", self.expectation)
        rule = ROW_RULES[expectation.expectation_type]
        column = F.col(expectation.column)
        expected = rule.expected(column, expectation)
        condition = column.isNotNull() & ~expected if rule.skips_nulls else ~expected
        # GX counts `when(condition, 1)`: a null condition is not unexpected.
        return F.coalesce(condition, F.lit(False))


def describe(expectation: Expectation) -> tuple[str, dict[str, Any]]:
    kwargs = cast("dict[str, Any]", expectation.configuration.to_json_dict()["kwargs"])
    kwargs.pop("batch_id", None)
    arguments = ", ".join(
        f"{key}={json.dumps(kwargs[key], sort_keys=True, ensure_ascii=False)}"
        for key in sorted(kwargs)
    )
    return f"{expectation.expectation_type}({arguments})", kwargs


def scope_of(expectation: Expectation) -> ExpectationScope:
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    row_kinds = (ColumnMapExpectation, ColumnPairMapExpectation, MulticolumnMapExpectation)
    if isinstance(expectation, row_kinds) and (
        expectation.expectation_type not in TABLE_LEVEL_MAP_TYPES
    ):
        return "row"
    return "table"


@dataclass(frozen=True)
class QualityGate:
    """The expectations an epoch of ``table`` must meet, and what happens when it does not.

    Under ``quarantine`` every row-level expectation must be one GX evaluates per row and
    :func:`quarantine_supported_types` lists, without ``mostly`` or ``row_condition``;
    anything else is refused here, not at run time. Failing rows go to ``quarantine``
    (default ``<table>_quarantine``), a side output of the table's job under every policy:
    under ``block`` it receives rows only when an operator resolves a blocked epoch by
    quarantining them (``etl resolve --quarantine``), under ``warn`` never; so changing a
    gate's policy never leaves a table behind that no job seals.
    """

    table: str
    expectations: Sequence[Expectation]
    _: KW_ONLY
    policy: Policy = "block"
    quarantine: str | None = None
    checks: tuple[Check, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from great_expectations.expectations import Expectation

        validate_name(self.table, kind="table")
        if self.policy not in POLICIES:
            raise GateDefinitionError(
                self.table,
                f"unknown policy {self.policy!r}; valid policies are {', '.join(POLICIES)}",
            )
        if self.quarantine is not None:
            validate_name(self.quarantine, kind="table")
        if isinstance(self.expectations, Expectation) or not self.expectations:
            raise GateDefinitionError(
                self.table, "a gate needs a non-empty sequence of GX expectations"
            )
        checks: list[Check] = []
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
            label, kwargs = describe(owned)
            if label in seen:
                raise GateDefinitionError(self.table, "listed twice", expectation=label)
            seen.add(label)
            check = Check(index, owned, label, kwargs, scope_of(owned))
            if self.policy == "quarantine" and check.level == "row":
                self._require_splittable(check)
            checks.append(check)
        object.__setattr__(self, "expectations", tuple(c.expectation for c in checks))
        object.__setattr__(self, "checks", tuple(checks))

    @property
    def quarantine_table(self) -> str:
        """The table failing rows go to: a side output of the table's job."""
        return self.quarantine or f"{self.table}_quarantine"

    def _require_splittable(self, check: Check) -> None:
        # Every type with a row rule is a ColumnMapExpectation.
        expectation = cast("ColumnMapExpectation", check.expectation)
        if expectation.expectation_type not in ROW_RULES:
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


__all__ = [
    "POLICIES",
    "Check",
    "ExpectationScope",
    "Policy",
    "QualityGate",
    "describe",
    "scope_of",
]
