"""The exit codes are defined once (``etl.ExitCode``) and the README documents each."""

from __future__ import annotations

import re

from etl import ExitCode
from tests.support.cli_runner import REPO


def test_readme_documents_every_exit_code():
    readme = (REPO / "README.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", readme, flags=re.M)}
    assert {int(code) for code in ExitCode} <= documented, documented
