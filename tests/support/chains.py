"""Small pipelines that tests build in Python and run with ``Runner.run_once``."""

from __future__ import annotations

from pathlib import Path

from etl import FileSource, Pipeline

SCHEMA = "id BIGINT, customer INT, amount DOUBLE"
"""The JSON files' schema: an order ``id``, its ``customer`` and ``amount``."""


def three_jobs(incoming: Path, name: str = "statements") -> Pipeline:
    """An ingest of the JSON files in ``incoming``, an append and a merge: the write modes
    of the freshness chain."""
    pipeline = Pipeline(name)
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    pipeline.sql(
        "clean",
        output="clean",
        inputs=["events"],
        query="SELECT id, customer, amount FROM events WHERE amount >= 0",
    )
    pipeline.sql(
        "latest",
        output="latest",
        inputs=["clean"],
        mode="merge",
        keys=("customer",),
        query="SELECT customer, sum(amount) AS amount FROM clean GROUP BY customer",
    )
    return pipeline
