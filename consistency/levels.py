"""Parsing consistency levels from what users type."""

from __future__ import annotations

import re

from consistency.errors import UnknownLevelError
from consistency.models import Level

LEVEL_ABBREVIATIONS: dict[Level, str] = {
    Level.READ_UNCOMMITTED: "RU",
    Level.READ_COMMITTED: "RC",
    Level.REPEATABLE_READ: "RR",
}

_SEPARATORS = re.compile(r"[\s_-]+")

# Keys are normalised: lower case, words joined by single spaces.
_BY_NAME: dict[str, Level] = {
    **{_SEPARATORS.sub(" ", level.value): level for level in Level},
    **{abbreviation.lower(): level for level, abbreviation in LEVEL_ABBREVIATIONS.items()},
}


def parse_level(text: str | Level) -> Level:
    """Return the level ``text`` names.

    Forgiving: case does not matter, ``-``, ``_`` and spaces are interchangeable, and the
    abbreviations RU, RC and RR are accepted ("Repeatable_Read", "read committed", "rr").
    Raises UnknownLevelError listing the valid names otherwise.
    """
    if isinstance(text, Level):
        return text
    if isinstance(text, str):
        level = _BY_NAME.get(_SEPARATORS.sub(" ", text.strip()).lower())
        if level is not None:
            return level
    raise UnknownLevelError(
        text, [f"{level.value} ({LEVEL_ABBREVIATIONS[level]})" for level in Level]
    )
