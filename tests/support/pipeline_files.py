"""Small pipeline files that end-to-end tests write next to their warehouse."""

BLOCK_GATED_INGEST = """
import great_expectations as gx
from etl import FileSource, Pipeline, param
from etl.quality import QualityGate

pipeline = Pipeline("shop")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="orders")
pipeline.expect(QualityGate("orders", [gx.expectations.ExpectColumnValuesToNotBeNull(column="id")],
                            policy="block"))
"""
"""Pipeline ``shop``: ``orders`` from JSON files in ``--param dir=``, a ``block`` gate on a
null ``id`` (its quarantine table ``orders_quarantine``)."""

INGEST = """
from etl import FileSource, Pipeline, param

pipeline = Pipeline("shop")
pipeline.ingest("ingest", source=FileSource("drops", path=param("dir"), format="json",
                schema="id INT, amount DOUBLE"), output="orders")
"""
"""The same pipeline without the gate."""
