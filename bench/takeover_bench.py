"""Takeover after a crash: from ``kill -9`` of a run to the next run's first sealed epoch.

Through the real ``etl`` command, on the word-count chain with 1 s epochs: a run is
killed (no lease released, its lease far from expiring) and the next run starts at once,
without ``--wait``. Measured per round: until the next run says it took the dead run's
jobs over (Python and Spark start-up, registration, the takeover decision), then until
its first epoch reaches COMMIT (recovery and the first batches). Baseline in the same run:
the first run on a fresh warehouse, from its start to its first COMMIT.

``DB_BENCH_ROUNDS`` (default 3) kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench._common import env_int, load_average, median
from catalog import CatalogNotFoundError, load_catalog

WORDCOUNT = Path(__file__).resolve().parents[1] / "examples" / "wordcount" / "pipeline.py"
ETL = Path(sys.executable).with_name("etl")


class _Run:
    """One ``etl run --continuous`` child; notes when its stderr says it took a job over."""

    def __init__(self, warehouse: Path, incoming: Path, *extra: str) -> None:
        self.started = time.monotonic()
        self.took_over_at: float | None = None
        self.stderr: list[str] = []
        self.child = subprocess.Popen(
            [
                str(ETL),
                "run",
                str(WORDCOUNT),
                "--continuous",
                "--epoch-interval",
                "1",
                "--warehouse",
                str(warehouse),
                "--param",
                f"input_dir={incoming}",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ETL_SPARK_MASTER": "local[2]"},
            start_new_session=True,  # its Spark JVM is killed with it
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.child.stderr is not None
        for line in self.child.stderr:
            if self.took_over_at is None and line.startswith("took over job"):
                self.took_over_at = time.monotonic()
            self.stderr.append(line)

    def kill(self) -> None:
        os.killpg(self.child.pid, signal.SIGKILL)
        self.child.wait()

    def sealed_after(self, warehouse: Path, epoch: int, *, timeout: float = 600) -> int:
        """Wait until an epoch above ``epoch`` reaches COMMIT; return it."""
        deadline = time.monotonic() + timeout
        while True:
            if self.child.poll() is not None:
                raise RuntimeError("etl run exited early:\n" + "".join(self.stderr)[-3000:])
            latest = latest_commit_epoch(warehouse)
            if latest > epoch:
                return latest
            if time.monotonic() > deadline:
                raise RuntimeError(f"no COMMIT after epoch {epoch} within {timeout:.0f} s")
            time.sleep(0.1)


def latest_commit_epoch(warehouse: Path) -> int:
    """The newest epoch at COMMIT (0: none, or no catalog yet)."""
    try:
        with load_catalog(warehouse=warehouse, create=False) as catalog:
            commit = catalog.latest_commit()
    except CatalogNotFoundError:  # the run has not created it yet
        return 0
    return commit.epoch if commit is not None else 0


def main() -> None:
    rounds = env_int("DB_BENCH_ROUNDS", 3)
    with tempfile.TemporaryDirectory(prefix="takeover-bench-", ignore_cleanup_errors=True) as tmp:
        warehouse, incoming = Path(tmp) / "wh", Path(tmp) / "incoming"
        incoming.mkdir()
        (incoming / "a.txt").write_text("apple\npear\napple\n")
        print(f"before: {load_average()}", flush=True)
        # A long lease: only the dead-owner takeover lets the next run in before it expires.
        run = _Run(warehouse, incoming, "--lease-ttl", "600")
        sealed = run.sealed_after(warehouse, 0)
        clean = time.monotonic() - run.started
        print(f"clean start -> first COMMIT: {clean:.1f} s", flush=True)
        took: list[float] = []
        for index in range(rounds):
            (incoming / f"k{index}.txt").write_text("fig\n")
            run.kill()
            killed = time.monotonic()
            # The killed run may have sealed more epochs since it was last asked: the next
            # run's first is the one after the dead run's last.
            sealed = latest_commit_epoch(warehouse)
            run = _Run(warehouse, incoming, "--lease-ttl", "600")
            sealed = run.sealed_after(warehouse, sealed)
            took.append(time.monotonic() - killed)
            if run.took_over_at is None:
                raise RuntimeError("the next run did not take over:\n" + "".join(run.stderr))
            print(
                f"round {index + 1}: kill -9 -> next run took over {run.took_over_at - killed:.1f}"
                f" s, first COMMIT {took[-1]:.1f} s (epoch {sealed})",
                flush=True,
            )
        run.kill()
    print(
        f"kill -9 -> next run's first sealed epoch: median {median(took):.1f} s over "
        f"{len(took)} round(s) = {median(took) / clean:.2f} x a clean start's first COMMIT "
        f"({clean:.1f} s); after: {load_average()}"
    )


if __name__ == "__main__":
    main()
