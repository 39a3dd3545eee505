"""One run of a campaign pipeline in a child process that may crash or pause at a fault point.

Usage: python tests/support/faults/child.py CONFIG_JSON
    recover, then run every pending batch (the driver opens the epochs), with a 1 s lease so
    that the driver can take over quickly. DELTA_BARRIER_FAULT says where to crash or pause.
Exit codes: those of ``etl run`` (0 done, 1 a job failed), or FAULT_EXIT_CODE.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

LEASE_TTL_SECONDS = 1.0


def main(argv: list[str]) -> int:
    from etl import build_spark
    from tests.support.faults.pipelines import Config, make_runner

    config = Config.from_json(argv[0])
    spark = build_spark(
        app_name="fault-child",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    runner = make_runner(config, spark, lease_ttl_seconds=LEASE_TTL_SECONDS)
    with runner:
        result = runner.recover().merged(runner.run_pending())
    for failure in result.failures:
        print(f"job {failure.job} epoch {failure.epoch} failed: {failure.error}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
