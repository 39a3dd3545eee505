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
    return spark


__all__ = [
    "DEFAULT_MASTER",
    "build_spark",
]
