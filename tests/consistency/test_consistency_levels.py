"""parse_level: forgiving names, abbreviations, and a clear error otherwise."""

from __future__ import annotations

import pytest

from consistency import Level, UnknownLevelError, parse_level
from consistency.errors import DeltaBarrierError


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("read-uncommitted", Level.READ_UNCOMMITTED),
        ("read uncommitted", Level.READ_UNCOMMITTED),
        ("READ_UNCOMMITTED", Level.READ_UNCOMMITTED),
        ("RU", Level.READ_UNCOMMITTED),
        ("read-committed", Level.READ_COMMITTED),
        ("Read Committed", Level.READ_COMMITTED),
        ("rc", Level.READ_COMMITTED),
        ("repeatable_read", Level.REPEATABLE_READ),
        ("Repeatable-Read", Level.REPEATABLE_READ),
        ("  repeatable - read ", Level.REPEATABLE_READ),
        ("repeatable__read", Level.REPEATABLE_READ),
        ("Rr", Level.REPEATABLE_READ),
        (Level.READ_COMMITTED, Level.READ_COMMITTED),
    ],
)
def test_parse_level_accepts_forgiving_spellings(text, level):
    assert parse_level(text) is level


@pytest.mark.parametrize(
    "text", ["serializable", "", "read", "r-r", "readcommitted", "RRR", 3, None]
)
def test_parse_level_rejects_unknown_names_listing_valid_ones(text):
    with pytest.raises(UnknownLevelError) as info:
        parse_level(text)
    error = info.value
    assert isinstance(error, DeltaBarrierError)
    assert error.text == text
    message = str(error)
    assert repr(text) in message
    for name in ("read-uncommitted (RU)", "read-committed (RC)", "repeatable-read (RR)"):
        assert name in message
        assert name in error.valid
