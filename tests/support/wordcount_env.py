"""A word-count chain in a temporary warehouse, for the engine's tests."""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from catalog import Catalog, load_catalog
from etl import Runner, snapshot
from examples.wordcount.pipeline import build


@dataclass
class WordCountChain:
    root: Path
    incoming: Path
    warehouse: Path
    catalog: Catalog
    runner: Runner
    dropped: list[str]

    def drop(self, name: str, words: list[str]) -> None:
        """Drop a file the way a producer should: write under a hidden name, then rename."""
        hidden = self.incoming / f".{name}.tmp"
        hidden.write_text("\n".join(words) + "\n")
        os.replace(hidden, self.incoming / name)
        self.dropped.extend(words)
        time.sleep(0.002)  # distinct modification times keep the arrival order obvious

    def expected_counts(self) -> dict[str, int]:
        return dict(Counter(self.dropped))

    def read(self, level: str = "repeatable-read", **kwargs):
        return snapshot(
            self.catalog,
            ["words", "word_counts", "cnt_counts"],
            level,
            spark=self.runner.spark,
            **kwargs,
        )


def make_chain(
    root: Path, spark, *, files_per_micro_batch: int | None = None, catalog_url: str | None = None
) -> WordCountChain:
    incoming = root / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    warehouse = root / "warehouse"
    catalog = load_catalog(catalog_url, warehouse=warehouse)
    pipeline = build(str(incoming), files_per_micro_batch=files_per_micro_batch)
    runner = Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark)
    runner.register()
    return WordCountChain(root, incoming, warehouse, catalog, runner, [])


def table_rows(reader, table: str, columns: list[str]) -> list[tuple]:
    return sorted(tuple(r) for r in reader.table(table).select(*columns).collect())
