"""Error messages name what is wrong and what to do; every error is a DeltaBarrierError."""

from __future__ import annotations

from datetime import UTC, datetime

import consistency
from consistency import (
    ConsistencyError,
    EpochNotReadableError,
    ForeignCommitError,
    NoCommonEpochError,
    NoEpochAtTimeError,
    RecoveryError,
    RestoreBeforeSealError,
)
from consistency.errors import DeltaBarrierError


def test_every_exported_error_derives_from_the_project_root():
    errors = [getattr(consistency, name) for name in consistency.__all__ if name.endswith("Error")]
    assert len(errors) == 11
    for error in errors:
        assert issubclass(error, ConsistencyError)
        assert issubclass(error, DeltaBarrierError)


def test_no_common_epoch_names_each_table_and_where_it_stands():
    error = NoCommonEpochError(["a", "b"], {"a": 5, "b": None})
    assert str(error).startswith("tables share no WRITTEN epoch: a at 5, b never written")
    assert error.tables == ("a", "b")
    assert error.positions == {"a": 5, "b": None}
    bounded = NoCommonEpochError(["a"], {"a": None}, at_or_before=3)
    assert "at or before epoch 3: a never written" in str(bounded)


def test_epoch_not_readable_explains_each_state():
    coalesced = EpochNotReadableError("t", 5, "COALESCED", coalesced_into=7)
    assert "table 't' cannot be read as of epoch 5" in str(coalesced)
    assert "COALESCED into epoch 7" in str(coalesced)
    assert coalesced.coalesced_into == 7
    assert "only PROCESSED" in str(EpochNotReadableError("t", 5, "PROCESSED"))
    assert "ROLLED_BACK" in str(EpochNotReadableError("t", 5, "ROLLED_BACK"))
    absent = EpochNotReadableError("t", 5, None)
    assert absent.state is None
    assert "no state" in str(absent)


def test_no_epoch_at_time_names_the_time():
    ts = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    error = NoEpochAtTimeError(ts)
    assert error.ts == ts
    assert "2024-01-02T03:04:05+00:00" in str(error)


def test_foreign_commit_says_what_to_do():
    error = ForeignCommitError("orders", 12, "DELETE")
    assert isinstance(error, RecoveryError)
    message = str(error)
    assert "'orders'" in message
    assert "version 12 (DELETE)" in message
    assert "without Delta Barrier commit metadata" in message
    assert "manually" in message and "version 11" in message
    assert (error.table, error.version, error.operation, error.job) == (
        "orders",
        12,
        "DELETE",
        None,
    )
    other_job = ForeignCommitError("orders", 0, "WRITE", job="rogue")
    assert "by job 'rogue'" in str(other_job)
    assert "version -1" not in str(other_job)


def test_restore_before_seal_names_the_versions():
    error = RestoreBeforeSealError(table="t", version=9, restored_to=3, sealed_version=6)
    assert isinstance(error, RecoveryError)
    assert "version 9 restored the table to version 3" in str(error)
    assert "RESTORE it to version 6" in str(error)
