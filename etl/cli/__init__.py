"""The ``etl`` command (see :mod:`etl.cli.app`).

Importing the command modules registers their commands on :data:`app`.
"""

from etl.cli import (
    admin,
    maintain,
    operate,
    run,
    settings,
    show,
    snapshot,
    sql,
    tag,
    validate,
)
from etl.cli.app import app, main

__all__ = [
    "admin",
    "app",
    "main",
    "maintain",
    "operate",
    "run",
    "settings",
    "show",
    "snapshot",
    "sql",
    "tag",
    "validate",
]
