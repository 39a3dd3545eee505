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

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from catalog import ValidationRecord
from consistency import EpochBatch
from etl.delta_read import EPOCH_COLUMN, active_files, open_table, read_epochs, scan, table_version
from etl.delta_write import write_files
from etl.engine import AuditVerdict, commit_metadata
from etl.quality import run_gate

if TYPE_CHECKING:
    from catalog import Lease
    from etl.engine import EpochEngine, _Written
    from etl.pipeline import Job

# Micro-batch index of the commit that takes quarantined rows out of the output: above
# every real micro-batch, so its app transaction version is the epoch's highest.
AUDIT_BATCH = 4095


def audit_epoch(
    engine: EpochEngine,
    job: Job,
    batch: EpochBatch,
    attempt: int,
    lease: Lease,
    written: _Written,
) -> AuditVerdict:
    gate = engine.pipeline.gates[job.output]
    location = engine.catalog.get_table(job.output).location
    version = written.versions.get(job.output)
    if version is None:
        version = engine._current_version(job.output)
    session = engine.spark.newSession()
    rows = read_epochs(
        session, location, version=version, first_epoch=batch.first, last_epoch=batch.last
    )
    outcome = run_gate(session, gate, rows, epoch=batch.last)
    engine.catalog.record_validation(
        ValidationRecord(
            table=job.output,
            epoch=batch.last,
            # Whether every expectation passed, not whether the policy let the epoch through.
            success=not outcome.failed_expectations,
            policy=gate.policy,
            results=outcome.summary(),
        ),
        job=job.name,
        generation=lease.generation,
    )
    if not outcome.success:
        return AuditVerdict(blocked_reason=outcome.blocked_reason)
    if outcome.quarantined is None or outcome.passing is None:
        return AuditVerdict()
    assert gate.quarantine_table is not None
    quarantine_location = engine.catalog.get_table(gate.quarantine_table).location
    if not outcome.quarantined_count and table_version(quarantine_location) is not None:
        return AuditVerdict()

    meta = commit_metadata(job, batch, attempt)
    # The first epoch creates the quarantine table even when nothing fails, so that it
    # has a version to seal and the pipeline's epochs can reach COMMIT.
    engine._write(
        job,
        gate.quarantine_table,
        outcome.quarantined,
        batch,
        attempt,
        0,
        True,
        meta,
        lease,
        written,
        mode="append",
    )
    if not outcome.quarantined_count:
        return AuditVerdict()
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
        file_prefix=f"{batch.last}-{attempt}-audit",
    )
    new_version = engine._commit(
        job,
        job.output,
        replacement,
        files,
        [f.path for f in touched],
        batch,
        attempt,
        AUDIT_BATCH,
        True,
        meta,
        mode="append",
    )
    engine.catalog.record_processed(
        job.output,
        batch.last,
        delta_version=new_version,
        job=job.name,
        attempt=attempt,
        generation=lease.generation,
        rows=written.rows.get(job.output, 0) - outcome.quarantined_count,
    )
    written.versions[job.output] = new_version
    written.rows[job.output] = written.rows.get(job.output, 0) - outcome.quarantined_count
    return AuditVerdict(quarantined=outcome.quarantined_count)
