"""The global state of an epoch across the tables of a pipeline.

The state machine of one table lives in :mod:`catalog.states` (one definition, used by
the catalog for every transition); it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from catalog.models import EpochState
from catalog.states import LEGAL_TRANSITIONS, check_transition

__all__ = ["LEGAL_TRANSITIONS", "GlobalState", "check_transition", "global_state"]

GlobalState = Literal["COMMIT", "PRECOMMIT", "OPEN"]


def global_state(states: Mapping[str, EpochState | None]) -> GlobalState:
    """The state of one epoch across the tables responsible for it.

    COMMIT: every table has it WRITTEN. PRECOMMIT: every table has it PROCESSED or
    WRITTEN, but not all WRITTEN. OPEN otherwise, including when no table is given.
    """
    if not states:
        return "OPEN"
    values = set(states.values())
    if values == {EpochState.WRITTEN}:
        return "COMMIT"
    if values <= {EpochState.PROCESSED, EpochState.WRITTEN}:
        return "PRECOMMIT"
    return "OPEN"
