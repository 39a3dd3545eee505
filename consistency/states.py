"""The epoch state machine: one table's transitions, and an epoch's state across tables.

docs/design.md, "An epoch's life in one table". Transitions, current -> requested:

==============  ===================================================================
current         may become
==============  ===================================================================
no state        PROCESSED, WRITTEN, COALESCED
PROCESSED       PROCESSED (another micro-batch), WRITTEN, ROLLED_BACK, COALESCED
ROLLED_BACK     PROCESSED (a replay, with a higher attempt), COALESCED
WRITTEN         nothing
COALESCED       nothing
==============  ===================================================================

Pure: no database. The catalog calls :func:`check_transition` for every state it
records, :func:`check_seal` before it seals, and :func:`global_state_of` (the rule of
:func:`global_state` on the distinct states alone) to decide COMMIT.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Literal

from consistency.errors import EpochStateError
from consistency.records import EpochState

__all__ = [
    "LEGAL_TRANSITIONS",
    "GlobalState",
    "check_seal",
    "check_transition",
    "global_state",
    "global_state_of",
]

GlobalState = Literal["COMMIT", "PRECOMMIT", "OPEN"]

LEGAL_TRANSITIONS: Mapping[EpochState | None, frozenset[EpochState]] = MappingProxyType(
    {
        None: frozenset({EpochState.PROCESSED, EpochState.WRITTEN, EpochState.COALESCED}),
        EpochState.PROCESSED: frozenset(
            {
                EpochState.PROCESSED,
                EpochState.WRITTEN,
                EpochState.ROLLED_BACK,
                EpochState.COALESCED,
            }
        ),
        EpochState.ROLLED_BACK: frozenset({EpochState.PROCESSED, EpochState.COALESCED}),
        EpochState.WRITTEN: frozenset(),
        EpochState.COALESCED: frozenset(),
    }
)
"""For each current state (None: the epoch has no state in the table), the states it may
move to."""


def check_transition(
    table: str,
    epoch: int,
    current: EpochState | None,
    requested: EpochState,
    *,
    attempt: int | None = None,
    current_attempt: int | None = None,
) -> None:
    """Raise EpochStateError unless ``table`` may move ``epoch`` from ``current`` to ``requested``.

    ``attempt`` is the attempt of the request and ``current_attempt`` the one recorded
    with ``current``. A replay after a rollback (ROLLED_BACK -> PROCESSED) must carry an
    attempt higher than the rolled-back one; no transition may lower the attempt.
    """
    current = EpochState(current) if current is not None else None
    requested = EpochState(requested)
    why = _transition_refused(current, requested, attempt, current_attempt)
    if why is not None:
        raise EpochStateError(
            table=table, epoch=epoch, current=current, requested=requested, why=why
        )


def _transition_refused(
    current: EpochState | None,
    requested: EpochState,
    attempt: int | None,
    current_attempt: int | None,
) -> str | None:
    """Why ``current`` may not become ``requested``, or None if it may."""
    if requested not in LEGAL_TRANSITIONS[current]:
        if current in (EpochState.WRITTEN, EpochState.COALESCED):
            return f"{current} is final"
        allowed = ", ".join(sorted(LEGAL_TRANSITIONS[current]))
        return f"from {current or 'no state'} only {allowed} may follow"
    if current is EpochState.ROLLED_BACK and requested is EpochState.PROCESSED:
        if attempt is None or current_attempt is None or attempt <= current_attempt:
            return (
                f"a replay must carry an attempt higher than the rolled-back attempt "
                f"{current_attempt}, got {attempt}"
            )
    elif attempt is not None and current_attempt is not None and attempt < current_attempt:
        return (
            f"attempt {attempt} is older than the recorded attempt {current_attempt}; "
            "a superseded instance may not act on this epoch"
        )
    return None


def global_state(states: Mapping[str, EpochState | None]) -> GlobalState:
    """The state of one epoch across the tables responsible for it.

    COMMIT: every table has it WRITTEN. PRECOMMIT: every table has it PROCESSED or
    WRITTEN, but not all WRITTEN. OPEN otherwise, including when no table is given.
    """
    return global_state_of(set(states.values()))


def global_state_of(values: AbstractSet[EpochState | None]) -> GlobalState:
    """:func:`global_state` from the set of states the tables have (a store can ask its
    database for the distinct states alone, however many tables there are)."""
    if not values:
        return "OPEN"
    if values == {EpochState.WRITTEN}:
        return "COMMIT"
    if values <= {EpochState.PROCESSED, EpochState.WRITTEN}:
        return "PRECOMMIT"
    return "OPEN"


def check_seal(
    table: str,
    epoch: int,
    current: EpochState | None,
    *,
    first_epoch: int,
    latest_written: int | None,
) -> None:
    """Raise EpochStateError unless ``table`` may seal the batch ``first_epoch``..``epoch``.

    The transition to WRITTEN is :func:`check_transition`'s; this adds what a seal needs
    besides: the table's WRITTEN epochs increase (``latest_written`` is its newest), and
    a batch starts at an epoch between 1 and the one it seals.
    """
    if latest_written is not None and latest_written > epoch:
        why = f"epoch {latest_written} is already WRITTEN and WRITTEN epochs must increase"
    elif not 1 <= first_epoch <= epoch:
        why = f"a batch must start at an epoch between 1 and {epoch}, not {first_epoch}"
    else:
        return
    raise EpochStateError(
        table=table, epoch=epoch, current=current, requested=EpochState.WRITTEN, why=why
    )
