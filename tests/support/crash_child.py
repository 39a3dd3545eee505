"""Run one epoch in a child process that may be told to crash (DELTA_BARRIER_FAULT).

Usage:
    python tests/support/crash_child.py ROOT
        the word-count chain of tests/support/wordcount_env.py;
    python tests/support/crash_child.py --kafka BOOTSTRAP TOPIC MICRO_BATCH ROOT
        the orders pipeline of tests/support/kafka_env.py, reading TOPIC from the broker at
        BOOTSTRAP in micro-batches of at most MICRO_BATCH records.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from etl import build_spark  # noqa: E402


def main(argv: list[str]) -> int:
    spark = build_spark(
        app_name="crash-child",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    if argv[0] == "--kafka":
        from tests.support.kafka_env import make_orders

        bootstrap, topic, micro_batch, root = argv[1:]
        runner = make_orders(
            Path(root),
            spark,
            bootstrap=bootstrap,
            topics=[topic],
            max_records_per_micro_batch=int(micro_batch),
        ).runner
    else:
        from tests.support.wordcount_env import make_chain

        runner = make_chain(Path(argv[0]), spark, files_per_micro_batch=1).runner
    runner.lease_ttl_seconds = 1.0
    return runner.run_once().exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
