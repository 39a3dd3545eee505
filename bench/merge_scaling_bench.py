"""Merge scaling: a merge job receiving a fixed 1,000 updated keys per epoch into tables of
100k, 1M and 10M rows. The cost of an epoch should follow the keys touched, not the table.

Per size, a pipeline ``feed`` (a FileSource of Parquet files, append) -> ``apply`` (SQL,
``merge`` on ``id``) -> ``state``. The table is built through the pipeline itself: the
first epoch brings all N rows (ids 0..N-1). Each following epoch brings one file of
``DB_BENCH_MERGE_KEYS`` distinct ids drawn at random from 0..N-1 (so they spread over the
whole table, the case copy-on-write handles worst) with new values. After one warm-up
epoch, ``DB_BENCH_MERGE_EPOCHS`` epochs are timed (a whole run at the smallest size
warms the JVM up first):

- epoch: ``open_epoch`` + ``run_pending`` (both jobs);
- merge job: the ``apply`` batch alone (from its start when the runner's engine can be
  observed, else from the end of the ``feed`` batch);
- rows rewritten: rows of the files the epoch's commit added to ``state`` (a copy-on-write
  merge rewrites every file holding a touched key; a deletion-vector merge writes only
  the updates);
- DV rows: rows the epoch's deletion vectors newly delete (0 for copy-on-write).

Reported: the medians per size and strategy and the ratio largest / smallest (target <= 3
for 10M / 100k).

Run: ``python -m bench merge_scaling``. ``DB_BENCH_MERGE_SIZES`` (default
``100000,1000000,10000000``), ``DB_BENCH_MERGE_KEYS`` (1000), ``DB_BENCH_MERGE_EPOCHS`` (5),
``DB_BENCH_MERGE_STRATEGIES`` (the job's ``merge_strategy``, comma-separated, each run in
turn in one session; default ``deletion-vectors``).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench._common import env_int, env_ints, load_average, median
from bench.freshness_bench import BatchLog

SCHEMA = "id BIGINT, v DOUBLE, s STRING"


def _write_parquet(directory: Path, name: str, ids, seed: int) -> None:
    """A Parquet file of rows (id, v, s), written under a dot-name and renamed."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    id_array = pa.array(ids, type=pa.int64())
    table = pa.table(
        {
            "id": id_array,
            "v": pa.array(rng.random(len(ids))),
            "s": pc.binary_join_element_wise(
                "customer-", pc.cast(pc.bit_wise_and(id_array, 1023), pa.string()), ""
            ),
        }
    )
    hidden = directory / f".{name}"
    pq.write_table(table, hidden)
    os.replace(hidden, directory / name)


def _state_files(location: str) -> dict[str, tuple[int, int, int]]:
    """path -> (bytes, rows, rows its deletion vector deletes) of the table's active files."""
    from etl.delta import active_files, open_table

    return {
        f.path: (
            f.size,
            f.rows or 0,
            f.deletion_vector.cardinality if f.deletion_vector is not None else 0,
        )
        for f in active_files(open_table(location))
    }


def _measure(
    spark, size: int, keys: int, epochs: int, *, strategy: str, quiet: bool = False
) -> dict[str, float]:
    import numpy as np

    from catalog import load_catalog
    from etl import FileSource, Pipeline, Runner

    with tempfile.TemporaryDirectory(prefix=f"merge-{size}-") as tmp:
        root = Path(tmp)
        incoming = root / "incoming"
        incoming.mkdir()
        warehouse = root / "warehouse"
        pipeline = Pipeline("merge_scaling")
        pipeline.ingest(
            "feed",
            source=FileSource("updates_in", path=incoming, format="parquet", schema=SCHEMA),
            output="updates",
        )
        pipeline.sql(
            "apply",
            output="state",
            query="SELECT id, v, s FROM updates",
            inputs=["updates"],
            mode="merge",
            keys=["id"],
            merge_strategy=strategy,
        )
        catalog = load_catalog(None, warehouse=warehouse)
        log = BatchLog()
        runner = Runner(
            pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark, on_batch=log.on_batch
        )
        runner.register()
        log.observe_starts(runner)
        location = catalog.get_table("state").location
        rng = np.random.default_rng(size)

        def epoch(seq: int, ids) -> float:
            _write_parquet(incoming, f"drop-{seq:05d}.parquet", ids, seed=seq)
            time.sleep(0.002)  # the file's mtime strictly before the barrier
            started = time.perf_counter()
            runner.open_epoch()
            result = runner.run_pending()
            elapsed = time.perf_counter() - started
            assert result.ok and all(b.sealed for b in result.batches), result
            return elapsed

        with runner:
            build = epoch(0, np.arange(size))
            files = _state_files(location)
            print(
                f"{'(warm-up)' if quiet else '':9} {size:>11,} rows: built in {build:6.1f} s, {len(files)} file(s), "
                f"{sum(b for b, _, _ in files.values()) / 1e6:.1f} MB ({strategy})",
                flush=True,
            )
            whole: list[float] = []
            merge: list[float] = []
            rewritten: list[int] = []
            deleted: list[int] = []
            for seq in range(1, epochs + 2):
                before = _state_files(location)
                seconds = epoch(seq, rng.choice(size, size=keys, replace=False))
                after = _state_files(location)
                batch = {r.job: r for r in log.records[-2:]}
                apply, feed = batch["apply"], batch["feed"]
                merge_seconds = apply.ended - (
                    apply.started if apply.started is not None else feed.ended
                )
                if seq == 1:
                    continue  # warm-up
                whole.append(seconds)
                merge.append(merge_seconds)
                rewritten.append(
                    sum(rows for path, (_, rows, _) in after.items() if path not in before)
                )
                deleted.append(
                    sum(dv for _, _, dv in after.values())
                    - sum(dv for path, (_, _, dv) in before.items() if path in after)
                )
        catalog.close()
    return {
        "epoch": median(whole),
        "merge": median(merge),
        "rewritten": median(rewritten),
        "deleted": median(deleted),
        "files": len(after),
    }


def main() -> None:
    from etl import build_spark

    sizes = env_ints("DB_BENCH_MERGE_SIZES", (100_000, 1_000_000, 10_000_000))
    keys = env_int("DB_BENCH_MERGE_KEYS", 1000)
    epochs = env_int("DB_BENCH_MERGE_EPOCHS", 5)
    strategies = [
        s.strip()
        for s in os.environ.get("DB_BENCH_MERGE_STRATEGIES", "deletion-vectors").split(",")
        if s.strip()
    ]
    spark = build_spark(app_name="bench-merge-scaling", conf={"spark.ui.enabled": "false"})
    print(
        f"{keys} updated keys per epoch, median of {epochs} epochs after a warm-up; "
        f"{load_average()}"
    )
    # Warm-up: JIT, Python workers, file caches.
    _measure(spark, min(sizes), keys, 1, strategy=strategies[0], quiet=True)
    for strategy in strategies:
        results = {size: _measure(spark, size, keys, epochs, strategy=strategy) for size in sizes}
        smallest = results[sizes[0]]
        print(
            f"{'strategy':>16} {'rows':>12} {'epoch s':>8} {'merge s':>8} {'x smallest':>10} "
            f"{'rows rewritten':>15} {'DV rows':>8} {'files':>6}"
        )
        for size, figures in results.items():
            print(
                f"{strategy:>16} {size:>12,} {figures['epoch']:8.2f} {figures['merge']:8.2f} "
                f"{figures['merge'] / smallest['merge']:10.2f} {figures['rewritten']:15,.0f} "
                f"{figures['deleted']:8,.0f} {figures['files']:6.0f}"
            )
        largest = sizes[-1]
        print(
            f"{strategy}: merge job {largest:,} / {sizes[0]:,} rows: "
            f"{results[largest]['merge'] / smallest['merge']:.2f} (target <= 3); "
            f"whole epoch {results[largest]['epoch'] / smallest['epoch']:.2f}; {load_average()}"
        )


if __name__ == "__main__":
    main()
