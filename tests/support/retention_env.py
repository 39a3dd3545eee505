"""A two-table pipeline (``orders`` ingested from JSON drops, ``big`` derived from it) in a
temporary warehouse, whose epochs are opened on a synthetic clock, for the retention tests.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from catalog import load_catalog
from etl import FileSource, Pipeline, Retention, Runner

BASE = datetime(2024, 1, 1, tzinfo=UTC)
SCHEMA = "id INT, amount DOUBLE"


class Env:
    def __init__(
        self,
        root: Path,
        spark,
        retention: Retention | None,
        *,
        catalog_url: str | None = None,
        warehouse: str | None = None,
    ):
        """``warehouse``: a location other than ``root/warehouse`` (an ``s3://`` URL,
        with ``catalog_url``)."""
        self.incoming = root / "incoming"
        self.incoming.mkdir(parents=True)
        pipeline = Pipeline("shop", retention=retention)
        pipeline.ingest(
            "ingest",
            source=FileSource("drops", path=self.incoming, format="json", schema=SCHEMA),
            output="orders",
        )
        pipeline.sql(
            "big",
            output="big",
            inputs=["orders"],
            query="SELECT id, amount FROM orders WHERE amount >= 10",
        )
        self.warehouse = warehouse or root / "warehouse"
        self.catalog_url = catalog_url
        self.catalog = load_catalog(catalog_url, warehouse=self.warehouse)
        self.runner = Runner(
            pipeline, catalog=self.catalog, warehouse=str(self.warehouse), spark=spark
        )
        self.spark = spark
        self.n = 0

    def _write(self, rows: int) -> Path:
        self.n += 1
        hidden = self.incoming / f".b{self.n}"
        hidden.write_text(
            "".join(
                json.dumps({"id": self.n * 100 + i, "amount": float(i * 7)}) + "\n"
                for i in range(rows)
            )
        )
        return hidden

    def epoch(self, hours: float, rows: int = 2) -> int:
        """One epoch whose barrier is ``hours`` after BASE, with ``rows`` new rows (rows
        from the third on have amount >= 10 and reach ``big``)."""
        hidden = self._write(rows)
        # FileSource cuts slices by modification time at the barrier (a synthetic clock)
        stamp = (BASE + timedelta(hours=hours)).timestamp() - 1
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, self.incoming / f"b{self.n:04d}.json")
        result = self.runner.run_once(barrier_ts=BASE + timedelta(hours=hours))
        assert result.ok, result
        return result.epochs_opened[0].id

    def drop(self, rows: int = 2) -> None:
        """A file arriving now (a continuous run's wall-clock barrier picks it up)."""
        os.replace(self._write(rows), self.incoming / f"b{self.n:04d}.json")

    def location(self, table: str) -> str:
        return self.catalog.get_table(table).location
