"""What ``etl ... --help`` shows (flags and metavars, never Python types), and that a
command builds only the command it runs (:func:`etl.cli.app.command_for`)."""

from __future__ import annotations

import re

import pytest
import typer

from etl.cli import app
from etl.cli.app import command_for
from tests.support.cli_runner import etl_here


def _commands(command, path=()):
    """Every command and group of ``etl``, as the words that name it."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


EVERY_COMMAND = list(_commands(typer.main.get_command(app)))

PYTHON_TYPE = re.compile(r"<(str|int|float|bool|boolean|path|int range|float range)>|<\w+\|")
"""How typer names a type when nothing else does: ``<str>``, ``<int range>``, ``<a|b>``."""


@pytest.mark.parametrize("words", EVERY_COMMAND, ids=lambda words: " ".join(words) or "etl")
def test_help_shows_no_python_type(words, tmp_path):
    shown = etl_here(*words, "--help", cwd=tmp_path, COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    assert "Usage: etl" in shown.stdout
    assert not PYTHON_TYPE.search(shown.stdout), shown.stdout


def test_help_shows_flags_metavars_and_choices(tmp_path):
    def rows(*words: str) -> dict[str, str]:
        """Each option or argument of the help, and what its row shows after its names."""
        shown = etl_here(*words, "--help", cwd=tmp_path, COLUMNS="200").stdout
        found = (
            re.match(r"│\s*\*?\s*(--[\w-]+|[\w.]+)\s+(?:-\w\s)?(.*)", line)
            for line in shown.splitlines()
        )
        return {row.group(1): row.group(2).strip() for row in found if row}

    run = rows("run")
    assert run["--param"].startswith("KEY=VALUE ")
    assert run["--warehouse"].startswith("DIR|URL ")
    assert run["--once"].startswith("Run one epoch")  # a flag: no type
    assert run["pipeline_file"].startswith("PATH ")
    sql = rows("sql")
    assert sql["--format"].startswith("[table|csv|json] ")
    assert sql["--limit"].startswith("INTEGER [x>=0] ")
    assert sql["QUERY"].startswith("QUERY ")
    top = rows()
    assert top["--log-level"].startswith("[debug|info|warning|error] ")
    assert top["--verbose"].startswith("More log lines")  # a count: no type
    assert rows("maintain")["--orphan-age"].startswith("NUMBER ")
    assert rows("epochs")["table"].startswith("TEXT ")


def test_usage_names_arguments_not_their_types(tmp_path):
    usage = etl_here("resolve", "--help", cwd=tmp_path, COLUMNS="200").stdout
    assert "Usage: etl resolve [OPTIONS] {table} {epoch}" in usage
    assert "Usage: etl epochs [OPTIONS] [table]" in etl_here("epochs", "-h", cwd=tmp_path).stdout


ALL = set(typer.main.get_command(app).commands)


@pytest.mark.parametrize(
    ("args", "built"),
    [
        (["sql", "SELECT 1", "--format", "csv"], {"sql"}),
        (["-vv", "--log-level", "debug", "--spark-ui", "status", "-v"], {"status"}),
        (["--log-level=info", "catalog", "upgrade"], {"catalog"}),
        (["tag", "list"], {"tag"}),
        (["--version"], set()),
        (["--version", "sql"], {"sql"}),
        ([], ALL),  # etl alone: its help lists every command
        (["--help"], ALL),
        (["--version", "-h"], ALL),
        (["sql", "--help"], {"sql"}),
        (["tags"], ALL),  # a typo: the suggestions come from every command
    ],
)
def test_a_command_builds_only_the_command_it_runs(args, built):
    assert set(command_for(args).commands) == built


def test_every_command_is_found_by_its_name():
    for name in ALL:
        assert set(command_for([name]).commands) == {name}
