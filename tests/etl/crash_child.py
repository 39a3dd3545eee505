"""Run one epoch of the word-count chain in a child process that may be told to crash.

Usage: python tests/etl/crash_child.py ROOT   (DELTA_BARRIER_FAULT selects the crash point)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from etl import build_spark  # noqa: E402
from tests.etl.wordcount_env import make_chain  # noqa: E402


def main(root: str) -> int:
    spark = build_spark(
        app_name="crash-child",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    chain = make_chain(Path(root), spark, files_per_micro_batch=1)
    chain.runner.lease_ttl_seconds = 1.0
    result = chain.runner.run_once()
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
