"""The one place that builds the SparkSession."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# Delta readers disagree on INT96 and nanosecond timestamps; microseconds is what the
# Delta protocol's `timestamp` type means, so every reader sees the same instant.
_BASE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def build_spark(
    *,
    master: str | None = None,
    app_name: str = "delta-barrier",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return the SparkSession (creating it on first use).

    ``master`` defaults to ``$ETL_SPARK_MASTER`` or ``local[*]``; a cluster master runs the
    same code. Python workers use the driver's interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or os.environ.get("ETL_SPARK_MASTER") or DEFAULT_MASTER
    check_master(master)
    ui = os.environ.get("ETL_SPARK_UI")
    if ui is not None:
        # The etl command turns the UI off unless --spark-ui (a library user keeps Spark's default).
        conf = {"spark.ui.enabled": "true" if ui.lower() == "true" else "false", **(conf or {})}
    if master.startswith("local"):
        # Everything runs in this process: bind to loopback, not the host's first address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master)
    driver_options = f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"
    for key, value in {
        **_BASE_CONF,
        "spark.driver.extraJavaOptions": driver_options,
        **(conf or {}),
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    url = spark.sparkContext.uiWebUrl
    if url and (ui or "").lower() == "true":
        print(f"Spark UI: {url}", file=sys.stderr)
    return spark


MASTER_CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a standalone master's port before giving up (exit 2, one line)."""


def check_master(master: str) -> None:
    """Refuse, before any JVM starts, a master that cannot work: a malformed ``local``
    master, or a ``spark://`` master none of whose hosts accepts a connection within
    :data:`MASTER_CONNECT_TIMEOUT` seconds. Raises UsageError naming it."""
    import re
    import socket

    from etl.errors import UsageError

    if master.startswith("local"):
        if not re.fullmatch(r"local(\[(\*|\d+)(,\s*\d+)?\])?", master):
            raise UsageError(
                f"--master {master!r} is not a local master; use local, local[N] or local[*]"
            )
        return
    if not master.startswith("spark://"):
        return  # yarn, k8s://...: Spark checks them itself
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, sep, port = address.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--master {master!r}: give spark://HOST:PORT")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), MASTER_CONNECT_TIMEOUT):
                return
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc.strerror or exc}")
    raise UsageError(
        f"Spark master {master} is unreachable ({'; '.join(problems)}): start it, or check "
        "--master / ETL_SPARK_MASTER"
    )


__all__ = [
    "MASTER_CONNECT_TIMEOUT",
    "check_master",
    "DEFAULT_MASTER",
    "build_spark",
]
