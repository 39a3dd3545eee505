"""The life of an epoch in one job.

- :mod:`etl.engine.batch`: run one batch: read the inputs (or the source slice), run the
  transform, hand the rows to the commit path, then publish (audit and seal);
- :mod:`etl.engine.commit`: where an epoch is committed: write files, commit them to
  Delta with commit metadata and an app transaction, record PROCESSED;
- :mod:`etl.engine.audit`: the quality gate between PROCESSED and WRITTEN;
- :mod:`etl.engine.recovery`: after a crash, seal what is complete, roll back the rest.
"""

from etl.engine.batch import BatchOutcome, BatchResult, EpochEngine, previous_output
from etl.engine.commit import BatchWrite, EpochWriter
from etl.engine.recovery import RecoveryStep, StepAction, needs_recovery, recover

__all__ = [
    "BatchOutcome",
    "BatchResult",
    "BatchWrite",
    "EpochEngine",
    "EpochWriter",
    "RecoveryStep",
    "StepAction",
    "needs_recovery",
    "previous_output",
    "recover",
]
