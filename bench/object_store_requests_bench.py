"""Requests to the object store per epoch of the word-count chain on an S3 warehouse.

The word-count chain (``examples/wordcount``: three tables, one merge, one overwrite) runs
``run_once`` for ``DB_BENCH_EPOCHS`` epochs (one new text file each) on ``s3://`` (moto's
S3 server on 127.0.0.1, its request log counted: ``tests/support/s3_requests.py``; the
catalog in a local SQLite file): every request of the run, the driver's and Spark's
Python workers' alike. Per epoch: the requests by kind (GET of a
``_delta_log`` object, LIST, GET of data, PUT/POST, HEAD, DELETE) and how many
``deltalake.DeltaTable`` objects the driver constructed (each replays the log from its
newest checkpoint). A run that carries its tables' states forward makes as many log GETs
in its last epochs as in its first; one that re-reads the log grows with every commit
until the next checkpoint (every ``CHECKPOINT_INTERVAL`` versions).

Run: python -m bench object_store_requests
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from bench._common import env_int, load_average

BUCKET = "bench-requests"


class _Constructions:
    """Counts ``deltalake.DeltaTable`` constructions (every caller's) while installed."""

    def __init__(self) -> None:
        from deltalake import DeltaTable

        self.count = 0
        self._init = DeltaTable.__init__
        original = self._init

        def counting(table, *args, **kwargs):
            self.count += 1
            original(table, *args, **kwargs)

        DeltaTable.__init__ = counting

    def take(self) -> int:
        count, self.count = self.count, 0
        return count

    def close(self) -> None:
        from deltalake import DeltaTable

        DeltaTable.__init__ = self._init


def main() -> None:
    from catalog import load_catalog
    from etl import Runner, build_spark
    from examples.wordcount.pipeline import build
    from tests.support.s3_requests import KINDS, LOG_GET, CountedS3Server

    epochs = env_int("DB_BENCH_EPOCHS", 25)
    counter = CountedS3Server(BUCKET)
    os.environ.update(  # before Spark: its Python workers inherit them
        AWS_ENDPOINT_URL=counter.endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    constructions = _Constructions()
    try:
        spark = build_spark(
            app_name="bench-object-store-requests", conf={"spark.ui.enabled": "false"}
        )
        print(f"word-count chain on s3, {epochs} epochs of one file; {load_average()}")
        with tempfile.TemporaryDirectory(prefix="object-store-requests-") as tmp:
            incoming = Path(tmp) / "incoming"
            incoming.mkdir()
            warehouse = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
            catalog = load_catalog(f"sqlite:///{Path(tmp) / 'catalog.sqlite'}", warehouse=warehouse)
            runner = Runner(build(str(incoming)), catalog=catalog, warehouse=warehouse, spark=spark)
            runner.register()
            counter.requests.take()
            constructions.take()
            header = "".join(f"{kind:>11}" for kind in ("total", *KINDS, "DeltaTable"))
            print(f"{'epoch':>5}{header}")
            rows: list[tuple[Counter[str], int]] = []
            for epoch in range(1, epochs + 1):
                (incoming / f"words-{epoch:04d}.txt").write_text(
                    "\n".join(f"w{(epoch * 7 + i) % 50}" for i in range(20)) + "\n"
                )
                if not runner.run_once().ok:
                    raise RuntimeError(f"run_once failed at epoch {epoch}")
                counts, built = counter.requests.take(), constructions.take()
                rows.append((counts, built))
                cells = "".join(f"{counts[kind]:>11}" for kind in KINDS)
                print(f"{epoch:>5}{sum(counts.values()):>11}{cells}{built:>11}", flush=True)
            catalog.close()
        half = len(rows) // 2
        if half >= 2:
            early = [c[LOG_GET] for c, _ in rows[1:half]]
            late = [c[LOG_GET] for c, _ in rows[half:]]
            print(
                f"log GETs per epoch: epochs 2-{half} mean {sum(early) / len(early):.1f}, "
                f"epochs {half + 1}-{len(rows)} mean {sum(late) / len(late):.1f}, "
                f"max {max(early + late)}"
            )
        print(f"now {load_average()}")
        spark.stop()
    finally:
        constructions.close()
        counter.close()


if __name__ == "__main__":
    main()
