"""Data-quality gates: Great Expectations checks an epoch's rows before the epoch is sealed.

- :mod:`etl.quality.gate`: :class:`QualityGate`, the expectations and the policy;
- :mod:`etl.quality.rules`: the per-row Spark predicates a quarantine splits rows with;
- :mod:`etl.quality.run`: :func:`run_gate`, running GX and deciding the :class:`GateOutcome`.
"""

from etl.errors import (
    ExpectationError,
    GateDefinitionError,
    QualityError,
    QuarantineMismatchError,
)
from etl.quality.gate import POLICIES, ExpectationScope, Policy, QualityGate
from etl.quality.rules import quarantine_supported_types
from etl.quality.run import (
    FAILED_EXPECTATIONS_COLUMN,
    GateOutcome,
    no_quarantined_rows,
    run_gate,
)

__all__ = [
    "FAILED_EXPECTATIONS_COLUMN",
    "POLICIES",
    "ExpectationError",
    "ExpectationScope",
    "GateDefinitionError",
    "GateOutcome",
    "Policy",
    "QualityError",
    "QualityGate",
    "QuarantineMismatchError",
    "no_quarantined_rows",
    "quarantine_supported_types",
    "run_gate",
]
