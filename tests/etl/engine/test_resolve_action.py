"""Which resolution ``etl resolve``'s flags ask for (:func:`etl.engine.resolve.chosen_action`)."""

from __future__ import annotations

import pytest

from catalog import ResolutionAction
from etl.engine.resolve import chosen_action
from etl.errors import UsageError


@pytest.mark.parametrize(
    ("flags", "action"),
    [
        ({"accept": True}, ResolutionAction.ACCEPT),
        ({"skip": True}, ResolutionAction.SKIP),
        ({"quarantine": True}, ResolutionAction.QUARANTINE),
    ],
)
def test_one_flag_is_one_action(flags, action):
    asked = {"accept": False, "quarantine": False, "skip": False, **flags}
    assert chosen_action(**asked, with_pipeline=True) is action


@pytest.mark.parametrize(
    "flags", [{}, {"accept": True, "skip": True}, {"accept": True, "quarantine": True}]
)
def test_none_or_several_flags_are_refused(flags):
    asked = {"accept": False, "quarantine": False, "skip": False, **flags}
    with pytest.raises(UsageError, match="exactly one of --accept, --quarantine or --skip"):
        chosen_action(**asked, with_pipeline=True)


def test_quarantine_needs_the_pipeline_whose_gate_splits_the_rows():
    with pytest.raises(UsageError, match="--quarantine needs --pipeline FILE"):
        chosen_action(accept=False, quarantine=True, skip=False, with_pipeline=False)
    assert chosen_action(accept=True, quarantine=False, skip=False, with_pipeline=False) is (
        ResolutionAction.ACCEPT
    )
