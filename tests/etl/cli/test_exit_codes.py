"""The exit codes are defined once (``etl.ExitCode``) and the README documents each."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from etl import ExitCode
from tests.support.cli_runner import ETL, REPO, command_environment
from tests.support.pipeline_files import BLOCK_GATED_INGEST


def test_readme_documents_every_exit_code():
    readme = (REPO / "README.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", readme, flags=re.M)}
    assert {int(code) for code in ExitCode} <= documented, documented


@pytest.mark.spark
def test_run_into_a_closed_pipe_exits_with_the_runs_code(tmp_path):
    """``etl run --format json | true``: the JSON is dropped quietly, and the exit code is
    still the run's (4, an epoch blocked), not 0."""
    shop, drops = tmp_path / "shop.py", tmp_path / "drops"
    shop.write_text(BLOCK_GATED_INGEST)
    drops.mkdir()
    (drops / "a.json").write_text('{"id": null, "amount": 1.0}\n')
    command = " ".join(
        shlex.quote(str(part))
        for part in (
            ETL,
            "run",
            shop,
            "--once",
            "--format",
            "json",
            "--warehouse",
            tmp_path / "wh",
            "--param",
            f"dir={drops}",
        )
    )
    done = subprocess.run(
        ["bash", "-c", f"{command} | true; exit ${{PIPESTATUS[0]}}"],
        cwd=tmp_path,
        env=command_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == ExitCode.BLOCKED, done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr
