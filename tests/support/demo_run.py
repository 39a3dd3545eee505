"""A pytest plugin (loaded from ``tests/conftest.py``): one run of ``python -m examples.shop.demo``
per test session, shared by the demo's tests and the notebook tests."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.tansu import KafkaBrokerError, find_tansu_binary

ROOT = Path(__file__).resolve().parents[2]
DEMO_SECONDS = 12


@dataclass(frozen=True)
class DemoRun:
    warehouse: Path
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr (tail)\n{self.stderr[-3000:]}"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo, run for DEMO_SECONDS in a subprocess with its own warehouse."""
    try:
        find_tansu_binary()
    except KafkaBrokerError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the tansu broker is required on CI: {exc}")
        pytest.skip(str(exc))
    warehouse = tmp_path_factory.mktemp("demo") / "warehouse"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.shop.demo",
            "--seconds",
            str(DEMO_SECONDS),
            "--warehouse",
            str(warehouse),
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    return DemoRun(warehouse, done.returncode, done.stdout, done.stderr)
