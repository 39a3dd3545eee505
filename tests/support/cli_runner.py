"""Running the real ``etl`` command in a subprocess, for the end-to-end tests."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from etl.faults import FAULT_ENV

REPO = Path(__file__).resolve().parents[2]
ETL = Path(sys.executable).with_name("etl")


def command_environment(**extra: str) -> dict[str, str]:
    """The environment the tests run ``etl`` in: this checkout's code, a local Spark
    master, none of the caller's warehouse, catalog or fault settings; plus ``extra``."""
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
        env=command_environment(**env),
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
        env=command_environment(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=popen.pop("stderr", subprocess.PIPE),
        text=True,
        **popen,
    )


def etl_here(*args: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run the real ``etl`` command (its entry point, with the same environment as
    :func:`etl`) in this process: no Python start-up, and a command that runs Spark gets
    the test session's SparkSession instead of starting a JVM. For tests that do not need a
    process of the command's own (a crash, a pause, a signal, no Java); what the command
    changes in this process (environment, logging, signal handlers) is put back after."""
    from etl.cli import main
    from etl.cli.render import stderr_console, stdout_console

    stdout, stderr = io.StringIO(), io.StringIO()
    saved_environ = dict(os.environ)
    saved_argv = sys.argv
    saved_signals = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    saved_logging = _logging_state()
    # The consoles are made once per process (maybe on a terminal, pytest -s): captured
    # output has no colours, as in a subprocess with pipes, and COLUMNS sets the width as
    # it does at a process's start.
    saved_consoles = {
        console: (console._color_system, console._width)
        for console in (stdout_console(), stderr_console())
    }
    environment = command_environment(
        **env
    )  # from this process's environment, before it is replaced
    os.environ.clear()
    os.environ.update(environment)
    sys.argv = ["etl", *map(str, args)]
    try:
        for console in saved_consoles:
            console._color_system = None
            if "COLUMNS" in env:
                console.width = int(env["COLUMNS"])
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = _exit_code(exit_.code, stderr)
    finally:
        for console, (colours, width) in saved_consoles.items():
            console._color_system, console._width = colours, width
        _restore_logging(saved_logging)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environ)
        _quiet_spark_again()
    result = subprocess.CompletedProcess(
        ["etl", *map(str, args)], code, stdout.getvalue(), stderr.getvalue()
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals ``etl run`` handles itself (it finishes the epochs in flight)."""


def _exit_code(code: object, stderr: io.StringIO) -> int:
    """The process exit status ``sys.exit(code)`` would give."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)  # an ExitCode is an int too
    stderr.write(f"{code}\n")
    return 1


def _logging_state() -> tuple[list[logging.Handler], dict[str, int]]:
    """The root logger's handlers, and every logger's level (``etl`` sets its own)."""
    root = logging.getLogger()
    levels = {"": root.level}
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            levels[name] = logger.level
    return list(root.handlers), levels


def _restore_logging(state: tuple[list[logging.Handler], dict[str, int]]) -> None:
    handlers, levels = state
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(levels.get(name, logging.NOTSET))
    root.setLevel(levels[""])


def _quiet_spark_again() -> None:
    """``etl run`` turns the session's JVM log off; the tests' session logs errors."""
    pyspark = sys.modules.get("pyspark")
    if pyspark is not None and pyspark.SparkContext._active_spark_context is not None:
        pyspark.SparkContext._active_spark_context.setLogLevel("ERROR")
