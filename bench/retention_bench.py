"""Retention (issue 11): what ``etl maintain`` saves, and what it buys readers.

1. **Storage**: ``DB_BENCH_EPOCHS`` (default 1,000) one-second epochs (synthetic clock) of a
   small append table (one ingest job, ``DB_BENCH_ROWS`` rows an epoch), run twice: without
   maintenance, and with the function behind ``etl maintain`` every
   ``DB_BENCH_MAINTAIN_EVERY`` epochs (as cron would; policy: every epoch for
   ``DB_BENCH_KEEP``, default 60s) and once at the end. Data files and bytes on storage, and
   ``_delta_log`` files and bytes, of both.
2. **Reads**: a repeatable-read read of the latest cut (``etl.snapshot`` + Arrow through
   delta-rs, pin included) of both warehouses: median of ``DB_BENCH_READS`` reads. Target:
   at least 5x faster with compaction and log upkeep. Then where the time goes: the
   snapshot with its pin, and opening and reading the table at the cut's version and at
   the version the reader reads (the compacted one, ``SnapshotReader.read_version``).
3. **Log length**: a table with ``DB_BENCH_COMMITS`` (default 100,000) commits, built without
   Spark: version 0 written by delta-rs, then one commit file per version in delta-rs's
   format (each adds one file and removes the previous one, so the table stays one small
   file). Time to open its latest version with delta-rs, before and after log upkeep
   (checkpoint + cleanup of older entries), median of ``DB_BENCH_OPENS``.

Run: ``python -m bench retention``. Figures are ratios within one run.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench._common import env_int, load_average, median

BASE = datetime(2024, 1, 1, tzinfo=UTC)
SCHEMA = "id BIGINT, customer INT, amount DOUBLE"


class _Warehouse:
    """One append table fed by a FileSource, epochs on a one-second synthetic clock."""

    def __init__(self, root: Path, spark, keep: str) -> None:
        from catalog import load_catalog
        from etl import FileSource, Pipeline, Retention, Runner

        self.incoming = root / "incoming"
        self.incoming.mkdir(parents=True)
        pipeline = Pipeline("retention_bench", retention=Retention(every_epoch_for=keep))
        pipeline.ingest(
            "ingest",
            source=FileSource("drops", path=self.incoming, format="json", schema=SCHEMA),
            output="events",
        )
        self.warehouse = root / "warehouse"
        self.catalog = load_catalog(None, warehouse=self.warehouse)
        self.runner = Runner(
            pipeline, catalog=self.catalog, warehouse=str(self.warehouse), spark=spark
        )
        self.seq = 0

    def epoch(self, rows: int) -> datetime:
        self.seq += 1
        barrier = BASE + timedelta(seconds=self.seq)
        hidden = self.incoming / f".drop-{self.seq:06d}.json"
        hidden.write_text(
            "".join(
                json.dumps({"id": self.seq * rows + i, "customer": i % 5, "amount": i + 0.5}) + "\n"
                for i in range(rows)
            )
        )
        stamp = barrier.timestamp() - 0.5
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, self.incoming / f"drop-{self.seq:06d}.json")
        result = self.runner.run_once(barrier_ts=barrier)
        if not result.ok:
            raise RuntimeError(f"epoch {self.seq} failed: {result.failures}")
        return barrier

    def maintain(self, now: datetime):
        from etl.retention.maintain import maintain

        # No reader loads the log meanwhile, and the synthetic clock runs faster than the
        # wall-clock grace: superseded log entries may go at once.
        return maintain(self.catalog, now=now, orphan_age=timedelta(0), log_grace=timedelta(0))

    def storage(self) -> tuple[int, int, int, int]:
        """(data files, data bytes, log files, log bytes) of the table."""
        from etl.delta.maintenance import log_size, stored_files

        location = self.catalog.get_table("events").location
        files = stored_files(location)
        log_files, log_bytes = log_size(location)
        return len(files), sum(f.size for f in files), log_files, log_bytes

    def read_latest(self) -> tuple[float, int]:
        from etl import snapshot

        started = time.perf_counter()
        with snapshot(self.catalog, ["events"]) as reader:
            rows = reader.arrow("events").num_rows
        return time.perf_counter() - started, rows

    def breakdown(self, reads: int) -> str:
        """Where a read of the latest cut spends its time: the snapshot with its pin, then
        opening the Delta table and reading its files, at the cut's own version and at the
        version the reader reads (the newest one holding the same rows, after compaction)."""
        from deltalake import DeltaTable

        from etl import snapshot

        location = self.catalog.get_table("events").location

        def timed(call) -> float:
            return median([_seconds(call) for _ in range(reads)]) * 1000

        with snapshot(self.catalog, ["events"]) as reader:
            cut, read = reader.versions["events"], reader.read_version("events")
        parts = [
            f"resolve + pin + release {timed(lambda: snapshot(self.catalog, ['events']).close()):.1f} ms"
        ]
        for version in sorted({cut, read}):
            table = DeltaTable(location, version=version)
            files = len(table.file_uris())
            opened = timed(lambda v=version: DeltaTable(location, version=v))
            scanned = timed(table.to_pyarrow_table)
            which = "cut's version" if version == cut else "read version"
            parts.append(
                f"{which} {version} ({files} files): open {opened:.1f} ms, read {scanned:.1f} ms"
            )
        return "; ".join(parts)

    def kept_files(self) -> tuple[int, int, int]:
        """(files of the latest version, files on storage, unexpired epochs)."""
        from deltalake import DeltaTable

        from etl.delta.maintenance import stored_files

        location = self.catalog.get_table("events").location
        expired = {e.epoch for e in self.catalog.expired_epochs()}
        alive = [e for e in self.catalog.epochs() if e.id not in expired]
        return len(DeltaTable(location).file_uris()), len(stored_files(location)), len(alive)


def _seconds(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _storage_and_reads(spark, root: Path) -> None:
    epochs = env_int("DB_BENCH_EPOCHS", 1000)
    rows = env_int("DB_BENCH_ROWS", 10)
    every = max(1, env_int("DB_BENCH_MAINTAIN_EVERY", 100))
    reads = max(1, env_int("DB_BENCH_READS", 5))
    keep = os.environ.get("DB_BENCH_KEEP") or "60s"
    plain = _Warehouse(root / "plain", spark, keep)
    kept = _Warehouse(root / "maintained", spark, keep)
    started = time.perf_counter()
    maintain_seconds = 0.0
    for i in range(1, epochs + 1):
        plain.epoch(rows)
        barrier = kept.epoch(rows)
        if i % every == 0 or i == epochs:
            t0 = time.perf_counter()
            kept.maintain(barrier + timedelta(seconds=1))
            maintain_seconds += time.perf_counter() - t0
    print(
        f"{epochs} one-second epochs of {rows} rows, twice, in {time.perf_counter() - started:.0f}s "
        f"(maintenance every {every} epochs, every epoch kept for {keep}: "
        f"{maintain_seconds:.1f}s in all)"
    )
    before, after = plain.storage(), kept.storage()
    print(f"{'':28} {'data files':>10} {'data bytes':>12} {'log files':>10} {'log bytes':>12}")
    for name, (files, data, log_files, log_bytes) in (
        ("without etl maintain", before),
        ("with etl maintain", after),
    ):
        print(f"{name:28} {files:>10,} {data:>12,} {log_files:>10,} {log_bytes:>12,}")
    print(
        f"storage with/without maintain: data files {after[0] / before[0]:.3f}, "
        f"data bytes {after[1] / before[1]:.3f}, log files {after[2] / before[2]:.3f}, "
        f"log bytes {after[3] / before[3]:.3f}"
    )
    latest_files, stored, alive = kept.kept_files()
    print(
        f"with etl maintain: the latest version has {latest_files} file(s); the other "
        f"{stored - latest_files} stay for the {alive} epochs the policy still keeps (each "
        "retained cut's version references the small files of the epochs since the "
        "compaction before it)"
    )
    for warehouse in (plain, kept):  # warm-up (imports, the OS cache)
        warehouse.read_latest()
    times: dict[str, list[float]] = {"plain": [], "maintained": []}
    counts = set()
    for _ in range(reads):
        for name, warehouse in (("plain", plain), ("maintained", kept)):
            seconds, count = warehouse.read_latest()
            times[name].append(seconds)
            counts.add(count)
    if len(counts) != 1:
        raise RuntimeError(f"the two warehouses read different row counts: {counts}")
    slow, fast = median(times["plain"]), median(times["maintained"])
    print(
        f"repeatable-read read of the latest cut ({counts.pop():,} rows), median of {reads}: "
        f"without {slow * 1000:.1f} ms, with compaction + log upkeep {fast * 1000:.1f} ms: "
        f"{slow / fast:.1f}x faster (target >= 5x)"
    )
    for name, warehouse in (("without", plain), ("with", kept)):
        print(f"  where the time goes, {name} maintain: {warehouse.breakdown(reads)}")


def _long_log(root: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from etl.delta.maintenance import log_upkeep

    commits = env_int("DB_BENCH_COMMITS", 100_000)
    opens = max(1, env_int("DB_BENCH_OPENS", 3))
    location = root / "long_log"
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    write_deltalake(str(location), table)
    (first,) = DeltaTable(str(location)).file_uris()
    first_name = Path(first).name
    second_name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    (location / second_name).write_bytes((location / first_name).read_bytes())
    size = (location / first_name).stat().st_size
    names = [first_name, second_name]
    log = location / "_delta_log"
    started = time.perf_counter()
    for version in range(1, commits):
        now = int(time.time() * 1000)
        add, remove = names[version % 2], names[(version - 1) % 2]
        actions = [
            {"add": {"path": add, "partitionValues": {}, "size": size, "modificationTime": now,
                     "dataChange": True,
                     "stats": '{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":3},"nullCount":{"id":0}}'}},
            {"remove": {"path": remove, "deletionTimestamp": now, "dataChange": True,
                        "extendedFileMetadata": True, "partitionValues": {}, "size": size}},
            {"commitInfo": {"timestamp": now, "operation": "WRITE",
                            "operationParameters": {"mode": "Append"}, "clientVersion": "bench"}},
        ]  # fmt: skip
        (log / f"{version:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    built = time.perf_counter() - started

    def open_latest() -> float:
        t0 = time.perf_counter()
        dt = DeltaTable(str(location))
        assert dt.version() == commits - 1 and len(dt.file_uris()) == 1
        return time.perf_counter() - t0

    before = median([open_latest() for _ in range(opens)])
    t0 = time.perf_counter()
    # No reader is loading the table here: the superseded entries may go at once.
    upkeep = log_upkeep(str(location), keep_from_version=commits - 1, grace=timedelta(0))
    upkeep_seconds = time.perf_counter() - t0
    after = median([open_latest() for _ in range(opens)])
    rows = DeltaTable(str(location)).to_pyarrow_table().num_rows
    print(
        f"open the latest version of a table with {commits:,} commits (built in {built:.0f}s), "
        f"median of {opens}: {before * 1000:.0f} ms; after log upkeep ({upkeep_seconds:.1f}s, "
        f"{upkeep.entries_removed:,} log entries removed): {after * 1000:.1f} ms: "
        f"{before / after:.0f}x faster ({rows} rows readable)"
    )


def main() -> None:
    from etl import build_spark

    print(load_average())
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
        root = Path(tmp)
        _long_log(root)
        spark = build_spark(app_name="bench-retention", conf={"spark.ui.enabled": "false"})
        _storage_and_reads(spark, root)
    print(load_average())


if __name__ == "__main__":
    main()
