"""The ``etl`` command (see :mod:`etl.cli.app`)."""

from etl.cli.app import app, main

__all__ = ["app", "main"]
