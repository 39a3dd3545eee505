"""Delta Barrier's consistency rules: pure functions over catalog records and Delta logs.

The bottom layer (etl -> catalog -> consistency): besides the rules it holds the values
they read (``consistency.records``: epochs and their states in each table, revisions) and
the root of every error, DeltaBarrierError. The catalog enforces the rules by calling
them; nothing here imports the catalog or etl.

- :func:`parse_level`: a consistency level from what a user typed.
- :func:`check_transition`, :func:`check_seal`, :func:`global_state`,
  :func:`global_state_of`: the epoch state machine, what a seal needs, and when an epoch
  is COMMIT.
- :func:`resolve_snapshot`: the Delta version of each table for a read at a level.
- :func:`plan_batches`, :func:`pending_epochs`: barrier alignment and backlog batching;
  :func:`admission_order`: which runnable batch runs first;
  :func:`inputs_sealed_through`: whether a batch's end can have made a reader runnable.
- :func:`plan_recovery`: what to seal, roll back and replay after a crash.

No Spark and no database here: the catalog and the etl layer supply the inputs.
"""

from consistency.alignment import (
    PendingEpochs,
    admission_order,
    inputs_sealed_through,
    pending_epochs,
    plan_batches,
)
from consistency.errors import (
    BatchPlanError,
    ConsistencyError,
    EpochNotReadableError,
    ForeignCommitError,
    NoAlignedCutError,
    NoCommonEpochError,
    NoEpochAtTimeError,
    RecoveryError,
    RestoreBeforeSealError,
    SnapshotRequestError,
    UnknownLevelError,
)
from consistency.levels import LEVEL_ABBREVIATIONS, parse_level
from consistency.models import (
    BEFORE_FIRST_VERSION,
    META_ATTEMPT,
    META_AUDIT,
    META_BATCH,
    META_EPOCH,
    META_FINAL,
    META_FIRST_EPOCH,
    META_JOB,
    META_REVISION,
    META_ROLLBACK_OF,
    EpochBatch,
    Level,
    LogCommit,
    PipelineCut,
    RecoveryAction,
    RecoveryPlan,
    ReplayAction,
    RollbackAction,
    SealAction,
    Snapshot,
)
from consistency.recovery import DATA_NEUTRAL_OPERATIONS, plan_recovery
from consistency.resolve import EpochHistory, resolve_snapshot
from consistency.revisions import HistoryAt, switched_after
from consistency.states import (
    LEGAL_TRANSITIONS,
    GlobalState,
    check_seal,
    check_transition,
    global_state,
    global_state_of,
)

__all__ = [
    "BEFORE_FIRST_VERSION",
    "DATA_NEUTRAL_OPERATIONS",
    "LEGAL_TRANSITIONS",
    "LEVEL_ABBREVIATIONS",
    "META_ATTEMPT",
    "META_AUDIT",
    "META_BATCH",
    "META_EPOCH",
    "META_FINAL",
    "META_FIRST_EPOCH",
    "META_JOB",
    "META_REVISION",
    "META_ROLLBACK_OF",
    "BatchPlanError",
    "ConsistencyError",
    "EpochBatch",
    "EpochHistory",
    "EpochNotReadableError",
    "ForeignCommitError",
    "GlobalState",
    "HistoryAt",
    "Level",
    "LogCommit",
    "NoAlignedCutError",
    "NoCommonEpochError",
    "NoEpochAtTimeError",
    "PendingEpochs",
    "RecoveryAction",
    "RecoveryError",
    "RecoveryPlan",
    "ReplayAction",
    "RestoreBeforeSealError",
    "RollbackAction",
    "SealAction",
    "PipelineCut",
    "Snapshot",
    "SnapshotRequestError",
    "UnknownLevelError",
    "check_seal",
    "check_transition",
    "global_state",
    "global_state_of",
    "parse_level",
    "admission_order",
    "inputs_sealed_through",
    "pending_epochs",
    "plan_batches",
    "plan_recovery",
    "resolve_snapshot",
    "switched_after",
]
