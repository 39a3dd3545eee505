"""Rolling a table back to an earlier version: a fenced RESTORE commit (:func:`restore_table`),
written through the commit loop (:func:`etl.delta.commit.run_commit`) as exactly the version
after the one it was planned from."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from deltalake import DeltaTable

from consistency.models import BEFORE_FIRST_VERSION, META_COMMIT_ID, META_RESTORED_TO
from etl.delta.actions import restore_actions
from etl.delta.commit import Attempt, Done, run_commit
from etl.delta.fence import Fence
from etl.delta.layout import normalize_location
from etl.delta.log import has_deletion_vectors, open_table
from etl.delta.logwriter import DELTA_RS, JSON_LOG, DeltaRsCommit, JsonCommit
from etl.errors import DeltaIOError


def restore_table(
    location: str,
    *,
    to_version: int | None,
    planned_at: int,
    fence: Fence,
    metadata: Mapping[str, str | int | bool],
) -> int:
    """Roll the table back to ``to_version``'s content; returns the new version.

    ``planned_at`` is the version the rollback was planned from: the RESTORE is applied
    only as the version right after it and only if that version records exactly
    ``fence``'s generation (:meth:`Fence.require_claimed`); if the table moved on meanwhile
    it raises CommitConflictError and the caller plans again. A Delta RESTORE commit, with
    ``metadata`` in its commitInfo. ``to_version=None`` rolls back to empty (before version
    0, which RESTORE cannot reach): an overwrite commit that removes every file, marked
    with ``restored_to = BEFORE_FIRST_VERSION`` for :func:`~etl.delta.log.log_commits`.
    Restoring the current version commits nothing. A RESTORE keeps app transactions. On a
    table with deletion vectors the RESTORE commit is our own
    (:func:`~etl.delta.actions.restore_actions`): delta-rs' would drop the deletion vector
    of a file whose DV changed since the target.
    """
    location = normalize_location(location)
    commit_id = uuid.uuid4().hex
    custom: dict[str, Any] = {**metadata, META_COMMIT_ID: commit_id}

    def plan(table: DeltaTable | None) -> Attempt[Any] | Done:
        assert table is not None  # planned at a version of it
        if to_version == planned_at:
            return Done(planned_at)
        if to_version is not None and not 0 <= to_version < planned_at:
            raise DeltaIOError(
                table=location,
                operation="restore",
                reason=f"version {to_version} is not an earlier version (planned at {planned_at})",
            )
        if to_version is None:
            return Attempt(
                DELTA_RS,
                planned_at + 1,
                DeltaRsCommit(
                    fence=fence,
                    custom={**custom, META_RESTORED_TO: BEFORE_FIRST_VERSION},
                    schema=table.schema(),
                    partition_by=tuple(table.metadata().partition_columns),
                    mode="overwrite",
                    table=table,
                ),
            )
        if not has_deletion_vectors(table):
            return Attempt(
                DELTA_RS,
                planned_at + 1,
                DeltaRsCommit(
                    fence=fence,
                    custom=custom,
                    schema=table.schema(),
                    table=table,
                    restore_to=to_version,
                ),
            )
        if open_table(location, version=to_version).schema().to_json() != table.schema().to_json():
            raise DeltaIOError(
                table=location,
                operation="restore",
                reason=f"the schema changed since version {to_version}",
            )
        return Attempt(
            JSON_LOG,
            planned_at + 1,
            JsonCommit(
                fence=fence,
                custom=custom,
                operation="RESTORE",
                actions=tuple(restore_actions(location, to_version, planned_at)),
                parameters={"version": to_version},
            ),
        )

    version = run_commit(
        location,
        fence=fence,
        plan=plan,
        commit_id=commit_id,
        operation="restore",
        planned_at=planned_at,
    )
    assert version is not None  # planned at a version: there is a table
    return version


__all__ = ["restore_table"]
