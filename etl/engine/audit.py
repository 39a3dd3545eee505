"""Write, audit, publish: a table's quality gate between PROCESSED and WRITTEN.

The epoch's rows are committed (PROCESSED) before they are validated, so read-uncommitted
readers can already see them; the epoch is sealed (WRITTEN) only if the gate lets it:

- ``block``: a failure leaves the epoch PROCESSED; downstream jobs and repeatable-read
  readers stay at the last good epoch. A rerun validates again.
- ``quarantine``: failing rows are committed to the quarantine table, then the output's
  files holding the epoch are rewritten without them; the rest is sealed.
- ``warn``: sealed anyway.

Results are kept in the catalog per (table, epoch) in every case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from catalog import ValidationRecord
from etl.delta import (
    EPOCH_COLUMN,
    active_files,
    open_table,
    read_epochs,
    scan,
    table_version,
    write_files,
)
from etl.engine.commit import AUDIT_PART, BatchWrite, EpochWriter, current_version
from etl.quality import run_gate

if TYPE_CHECKING:
    from etl.quality import QualityGate


@dataclass(frozen=True)
class AuditVerdict:
    """A quality gate's decision on one batch, and the batch's writes after the audit."""

    written: BatchWrite
    blocked_reason: str | None = None
    quarantined: int = 0


def audit(writer: EpochWriter, gate: QualityGate, written: BatchWrite) -> AuditVerdict:
    """Validate the batch's rows of the gate's table; quarantine failing rows if the policy says."""
    job, batch, catalog = writer.job, writer.batch, writer.catalog
    location = catalog.get_table(job.output).location
    version = written.versions.get(job.output)
    if version is None:
        version = current_version(catalog, job.output)
    session = writer.spark.newSession()
    rows = read_epochs(
        session, location, version=version, first_epoch=batch.first, last_epoch=batch.last
    )
    outcome = run_gate(session, gate, rows, epoch=batch.last)
    catalog.record_validation(
        ValidationRecord(
            table=job.output,
            epoch=batch.last,
            # Whether every expectation passed, not whether the policy let the epoch through.
            success=not outcome.failed_expectations,
            policy=gate.policy,
            results=outcome.summary(),
        )
    )
    if not outcome.success:
        return AuditVerdict(written, blocked_reason=outcome.blocked_reason)
    if outcome.quarantined is None or outcome.passing is None:
        return AuditVerdict(written)
    assert gate.quarantine_table is not None
    quarantine_location = catalog.get_table(gate.quarantine_table).location
    if not outcome.quarantined_count and table_version(quarantine_location) is not None:
        return AuditVerdict(written)

    # The first epoch creates the quarantine table even when nothing fails, so that it
    # has a version to seal and the pipeline's epochs can reach COMMIT.
    written = writer.write(
        written,
        table=gate.quarantine_table,
        frame=outcome.quarantined,
        part=0,
        final=True,
        mode="append",
    )
    if not outcome.quarantined_count:
        return AuditVerdict(written)
    # Rewrite the files that hold the epoch: their rows of other epochs (a merge rewrites
    # whole files) plus the epoch's passing rows.
    table = open_table(location, version=version)
    touched = [
        f
        for f in active_files(table)
        if (f.min_values.get(EPOCH_COLUMN) is None or f.min_values[EPOCH_COLUMN] <= batch.last)
        and (f.max_values.get(EPOCH_COLUMN) is None or f.max_values[EPOCH_COLUMN] >= batch.first)
    ]
    kept = scan(session, location, table, touched).where(
        ~F.col(EPOCH_COLUMN).between(batch.first, batch.last)
    )
    replacement = kept.unionByName(outcome.passing.select(*kept.columns))
    files = write_files(
        replacement,
        location,
        partition_by=job.partition_by,
        file_prefix=f"{batch.last}-{writer.attempt}-audit",
    )
    new_version = writer.commit(
        table=job.output,
        frame=replacement,
        files=files,
        removes=[f.path for f in touched],
        part=AUDIT_PART,
        final=True,
        mode="append",
    )
    written = writer.record(
        written,
        table=job.output,
        version=new_version,
        rows=written.rows_of(job.output) - outcome.quarantined_count,
    )
    return AuditVerdict(written, quarantined=outcome.quarantined_count)


__all__ = [
    "AuditVerdict",
    "audit",
]
