"""A new user's first day (issue 27): the conventions and messages the README promises,
checked cheaply (no Spark)."""

from __future__ import annotations

import typer

from etl.cli import app
from etl.cli.app import hoist_global_options


def test_global_options_are_taken_after_any_command():
    command = typer.main.get_command(app)
    hoist = hoist_global_options
    assert hoist(command, ["status", "-v"]) == ["-v", "status"]
    assert hoist(command, ["tag", "list", "-vv", "--format", "json"]) == [
        "-vv",
        "tag",
        "list",
        "--format",
        "json",
    ]
    assert hoist(command, ["epochs", "t", "--log-level", "debug", "--spark-ui"]) == [
        "--log-level",
        "debug",
        "--spark-ui",
        "epochs",
        "t",
    ]
    assert hoist(command, ["-v", "status"]) == ["-v", "status"]
    # etl run has a -v of its own; after "--" nothing is an option; unknown commands pass
    assert hoist(command, ["run", "p.py", "-v"]) == ["run", "p.py", "-v"]
    assert hoist(command, ["sql", "--", "-v"]) == ["sql", "--", "-v"]
    assert hoist(command, ["nosuch", "-v"]) == ["nosuch", "-v"]
