"""Who an operator's action is recorded as (``etl.leases.operator``), without Spark."""

from __future__ import annotations

import getpass
import socket

import pytest

from etl.leases import operator
from etl.recompute import RecomputeRequest


def test_an_action_is_recorded_as_user_at_host():
    assert operator() == f"{getpass.getuser()}@{socket.gethostname()}"


@pytest.mark.parametrize("error", [KeyError("getpwuid(): uid not found: 1001"), OSError("no user")])
def test_a_process_whose_uid_has_no_name_is_recorded_as_unknown(monkeypatch, error):
    """Containers often run under a uid with no passwd entry: getpass.getuser() raises
    there, and neither a resolution nor a recompute may fail for it."""

    def no_name() -> str:
        raise error

    monkeypatch.setattr(getpass, "getuser", no_name)
    assert operator() == f"unknown@{socket.gethostname()}"
    assert RecomputeRequest(tables=("t",)).actor == f"unknown@{socket.gethostname()}"
