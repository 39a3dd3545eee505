"""The ``etl`` command (see :mod:`etl.cli.app`).

Importing the command modules registers their commands on :data:`app`.
"""

from etl.cli import admin, operate, run, show, sql
from etl.cli.app import app, main

__all__ = ["admin", "app", "main", "operate", "run", "show", "sql"]
