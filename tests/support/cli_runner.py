"""Running the real ``etl`` command in a subprocess, for the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from etl.faults import FAULT_ENV

REPO = Path(__file__).resolve().parents[2]
ETL = Path(sys.executable).with_name("etl")


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "ETL_WAREHOUSE", "ETL_CATALOG_URL", FAULT_ENV)
    }
    # PYTHONPATH: the crash pipeline file imports the example's build().
    env.update(
        PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(REPO), ETL_SPARK_MASTER="local[2]", **extra
    )
    return env


def etl(*args: str | Path, cwd: Path, timeout: float = 600, **env: str):
    """Run the real ``etl`` command to completion."""
    result = subprocess.run(
        [str(ETL), *map(str, args)],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def start(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None, **popen
) -> subprocess.Popen:
    """Start the real ``etl`` command; ``env``: extra environment variables."""
    return subprocess.Popen(
        [str(ETL), *map(str, args)],
        cwd=cwd,
        env=_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=popen.pop("stderr", subprocess.PIPE),
        text=True,
        **popen,
    )
