"""File cut: what cutting a FileSource slice costs as its directory fills up.

A drop directory keeps every file an earlier slice took (recovery replays a slice from
its recorded file names), so it grows for as long as the source runs: 5 files a second
make 432,000 a day. Each size below holds that many taken files plus 5 new ones; a cut
must find the 5. Reported: the median cut per size and the ratio largest / smallest
(a cut lists the whole directory, but stats only the files no slice took).

Environment: DB_BENCH_CUT_SIZES [1000,10000,50000] files, DB_BENCH_CUT_RUNS [7].

Run: ``python -m bench file_cut``.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench._common import env_int, env_ints, load_average, median

NEW_FILES = 5


def _cut_seconds(directory: Path, files: int, runs: int) -> float:
    from etl import FileSource
    from etl.sources.base import SliceRequest

    names = [f"drop-{i:07d}.json" for i in range(files + NEW_FILES)]
    for name in names:
        (directory / name).write_text("{}\n")
    taken = names[:files]
    source = FileSource("drops", path=directory, format="json", schema="id BIGINT")
    request = SliceRequest(
        epoch=2,
        first_epoch=2,
        barrier_ts=datetime.now(UTC),
        previous_bounds={"files": taken},
        catch_up=False,
        recorded=lambda after: [{"files": taken}] if after < 1 else [],
    )
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        bounds = source.cut(request)
        seconds.append(time.perf_counter() - start)
        assert bounds["files"] == names[files:], bounds
    return median(seconds)


def main() -> None:
    sizes = env_ints("DB_BENCH_CUT_SIZES", (1000, 10000, 50000))
    runs = env_int("DB_BENCH_CUT_RUNS", 7)
    print(f"{NEW_FILES} new files among N taken ones, median of {runs} cuts; {load_average()}")
    medians = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="file-cut-") as tmp:
            medians[size] = _cut_seconds(Path(tmp), size, runs)
        print(f"  {size:>8,} taken files: cut {medians[size] * 1000:8.2f} ms")
    smallest, largest = min(sizes), max(sizes)
    print(
        f"file cut {largest:,} / {smallest:,} files: "
        f"{medians[largest] / medians[smallest]:.1f}x ({largest / smallest:.0f}x the files)"
    )


if __name__ == "__main__":
    main()
