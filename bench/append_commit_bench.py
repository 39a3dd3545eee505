"""Append commit: the cost of committing one small file to an append table as the table
grows, through ``etl.delta.commit_files`` (planned on our replay of the log, written by our
JSON writer) against the same commit through delta-rs (``DeltaTable`` brought to the
latest version, ``create_write_transaction``), in the same run.

An append table gains one active file per epoch until compaction; a delta-rs commit and
bringing delta-rs' table forward both grow with the active files (bench/RESULTS-issue28.md,
session 40). For each size the two tables are grown to that many files, then
``DB_BENCH_COMMITS`` commits are timed on each, alternately (the checkpoint every
10 versions included, as a job pays it). Reported: the median and the mean per size, the
ratio of ours against delta-rs at each size, and how ours grows against the smallest size.

Run: ``python -m bench append_commit``; ``DB_BENCH_FILES`` (default ``10,100,400``) sets
the sizes, ``DB_BENCH_COMMITS`` (default 30) the commits timed per size.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import pyarrow as pa

from bench._common import load_average, median

SCHEMA = pa.schema([("id", pa.int64()), ("_epoch", pa.int64())])


def _sizes() -> list[int]:
    return [int(s) for s in os.environ.get("DB_BENCH_FILES", "10,100,400").split(",")]


def main() -> None:
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import CommitProperties

    from etl.delta import CommitRequest, Fence, commit_files
    from etl.delta.actions import add_action
    from etl.delta.files import write_arrow
    from etl.delta.logwriter import POST_COMMIT

    commits = int(os.environ.get("DB_BENCH_COMMITS", "30"))
    fence = Fence("bench", 1)
    epoch = 0

    def rows() -> pa.Table:
        return pa.table({"id": [epoch, epoch + 1], "_epoch": [epoch, epoch]}, schema=SCHEMA)

    def ours(location: str) -> None:
        files = write_arrow(rows(), location, file_prefix=f"e{epoch}")
        commit_files(location, CommitRequest(files, schema=SCHEMA, mode="append", fence=fence))

    def delta_rs(location: str) -> None:
        if not kept:
            write_deltalake(location, rows())  # the table's first file
            kept.append(DeltaTable(location))
            return
        files = write_arrow(rows(), location, file_prefix=f"e{epoch}")
        table = kept[0]
        table.update_incremental()
        table.create_write_transaction(
            [add_action(f, data_change=True) for f in files],
            mode="append",
            schema=table.schema(),
            commit_properties=CommitProperties(app_transactions=[fence.transaction()]),
            post_commithook_properties=POST_COMMIT,
        )
        if table.version() % 10 == 0:
            table.create_checkpoint()

    kept: list = []
    print(f"at start: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="append-commit-") as scratch:
        ours_at, theirs_at = os.path.join(scratch, "ours"), os.path.join(scratch, "delta-rs")
        files = 0
        first: float | None = None
        for size in _sizes():
            while files < size:
                epoch += 2
                ours(ours_at)
                delta_rs(theirs_at)
                files += 1
            timed: dict[str, list[float]] = {"ours": [], "delta-rs": []}
            for _ in range(commits):
                for name, commit, location in (
                    ("ours", ours, ours_at),
                    ("delta-rs", delta_rs, theirs_at),
                ):
                    epoch += 2
                    started = time.perf_counter()
                    commit(location)
                    timed[name].append(time.perf_counter() - started)
            files += commits
            ours_ms = median(timed["ours"]) * 1000
            theirs_ms = median(timed["delta-rs"]) * 1000
            first = first or ours_ms
            print(
                f"{size:>5} files: ours median {ours_ms:6.2f} ms (mean "
                f"{statistics.fmean(timed['ours']) * 1000:6.2f}), delta-rs median "
                f"{theirs_ms:6.2f} ms (mean {statistics.fmean(timed['delta-rs']) * 1000:6.2f}); "
                f"ours / delta-rs {ours_ms / theirs_ms:.2f}, ours / ours at "
                f"{_sizes()[0]} files {ours_ms / first:.2f}"
            )
    print(f"append commit: done (at end: {load_average()})")


if __name__ == "__main__":
    main()
