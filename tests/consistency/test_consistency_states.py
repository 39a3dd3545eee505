"""The epoch state machine (one table) and the global state of an epoch."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consistency import (
    LEGAL_TRANSITIONS,
    check_seal,
    check_transition,
    global_state,
    global_state_of,
)
from consistency.errors import EpochStateError
from consistency.records import EpochState

P, W, RB, C = (
    EpochState.PROCESSED,
    EpochState.WRITTEN,
    EpochState.ROLLED_BACK,
    EpochState.COALESCED,
)

LEGAL = {
    (None, P),
    (None, W),
    (None, C),
    (P, P),
    (P, W),
    (P, RB),
    (P, C),
    (RB, P),
    (RB, C),
}


@pytest.mark.parametrize(
    ("current", "requested"), list(itertools.product([None, P, W, RB, C], [P, W, RB, C]))
)
def test_every_transition_is_allowed_exactly_when_the_table_says_so(current, requested):
    legal = (current, requested) in LEGAL
    assert (requested in LEGAL_TRANSITIONS[current]) is legal
    # A replay from ROLLED_BACK needs a higher attempt; give one so only the state matters.
    attempts = {"attempt": 2, "current_attempt": 1} if current is not None else {}
    if legal:
        check_transition("t", 7, current, requested, **attempts)
    else:
        with pytest.raises(EpochStateError) as info:
            check_transition("t", 7, current, requested, **attempts)
        error = info.value
        assert (error.table, error.epoch, error.requested) == ("t", 7, requested)
        assert error.current == current
        assert "table 't' epoch 7" in str(error)


def test_nothing_leaves_a_final_state_and_the_message_says_why():
    for final in (W, C):
        with pytest.raises(EpochStateError, match=f"{final} is final"):
            check_transition("t", 3, final, P, attempt=9, current_attempt=1)


def test_replay_after_rollback_needs_a_higher_attempt():
    check_transition("t", 4, RB, P, attempt=2, current_attempt=1)
    for attempt in (None, 1, 0):
        with pytest.raises(EpochStateError, match="higher than the rolled-back attempt 1"):
            check_transition("t", 4, RB, P, attempt=attempt, current_attempt=1)


def test_no_transition_may_lower_the_attempt():
    check_transition("t", 4, P, P, attempt=1, current_attempt=1)
    check_transition("t", 4, P, W, attempt=3, current_attempt=2)
    with pytest.raises(EpochStateError, match="attempt 1 is older than the recorded attempt 2"):
        check_transition("t", 4, P, W, attempt=1, current_attempt=2)


def test_plain_strings_are_accepted_for_states():
    check_transition("t", 1, "PROCESSED", "WRITTEN")
    with pytest.raises(EpochStateError):
        check_transition("t", 1, "WRITTEN", "PROCESSED")


def test_global_state():
    assert global_state({"a": W, "b": W}) == "COMMIT"
    assert global_state({"a": W, "b": P}) == "PRECOMMIT"
    assert global_state({"a": P, "b": P}) == "PRECOMMIT"
    assert global_state({"a": W, "b": None}) == "OPEN"
    assert global_state({"a": W, "b": C}) == "OPEN"
    assert global_state({"a": W, "b": RB}) == "OPEN"
    assert global_state({}) == "OPEN"


@given(st.dictionaries(st.text(max_size=3), st.sampled_from([*EpochState, None]), max_size=6))
def test_an_epochs_state_depends_on_the_set_of_its_tables_states_alone(states):
    """What a store may ask its database for: the distinct states, not one row per table."""
    assert global_state_of(set(states.values())) == global_state(states)


def test_the_state_machine_is_defined_once_in_consistency():
    import catalog
    import consistency.states

    assert catalog.LEGAL_TRANSITIONS is consistency.states.LEGAL_TRANSITIONS
    assert catalog.check_transition is consistency.states.check_transition


def test_skip_resolution_sequence_is_legal():
    # SKIP = Delta RESTORE, mark_rolled_back, then a replay that seals the epoch empty.
    check_transition("t", 5, P, RB)
    check_transition("t", 5, RB, P, attempt=2, current_attempt=1)
    check_transition("t", 5, P, W, attempt=2, current_attempt=2)
    with pytest.raises(EpochStateError):
        check_transition("t", 5, RB, W, attempt=2, current_attempt=1)


def test_a_seal_may_not_go_back_behind_the_newest_written_epoch():
    check_seal("t", 5, P, first_epoch=5, latest_written=4)
    check_seal("t", 5, None, first_epoch=5, latest_written=5)  # the same epoch again
    with pytest.raises(EpochStateError, match="epoch 6 is already WRITTEN") as raised:
        check_seal("t", 5, P, first_epoch=5, latest_written=6)
    assert (raised.value.table, raised.value.epoch, raised.value.requested) == ("t", 5, W)


@pytest.mark.parametrize("first_epoch", [0, 6])
def test_a_batch_starts_at_an_epoch_between_1_and_the_sealed_one(first_epoch):
    check_seal("t", 5, None, first_epoch=1, latest_written=None)
    with pytest.raises(EpochStateError, match=f"between 1 and 5, not {first_epoch}"):
        check_seal("t", 5, None, first_epoch=first_epoch, latest_written=None)
