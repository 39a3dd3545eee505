"""The epoch state machine of one table: the one definition of the legal transitions.

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

Pure: no database. :class:`catalog.sql.SqlCatalog` calls :func:`check_transition` for
every state it records, and ``consistency`` re-exports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from catalog.errors import EpochStateError
from catalog.models import EpochState

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
    if requested not in LEGAL_TRANSITIONS[current]:
        if current in (EpochState.WRITTEN, EpochState.COALESCED):
            why = f"{current} is final"
        else:
            allowed = ", ".join(sorted(LEGAL_TRANSITIONS[current]))
            why = f"from {current or 'no state'} only {allowed} may follow"
        raise EpochStateError(
            table=table, epoch=epoch, current=current, requested=requested, why=why
        )
    if current is EpochState.ROLLED_BACK and requested is EpochState.PROCESSED:
        if attempt is None or current_attempt is None or attempt <= current_attempt:
            raise EpochStateError(
                table=table,
                epoch=epoch,
                current=current,
                requested=requested,
                why=(
                    f"a replay must carry an attempt higher than the rolled-back attempt "
                    f"{current_attempt}, got {attempt}"
                ),
            )
    elif attempt is not None and current_attempt is not None and attempt < current_attempt:
        raise EpochStateError(
            table=table,
            epoch=epoch,
            current=current,
            requested=requested,
            why=(
                f"attempt {attempt} is older than the recorded attempt {current_attempt}; "
                "a superseded instance may not act on this epoch"
            ),
        )
