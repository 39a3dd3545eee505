"""Write, audit, publish: a table's quality gate between PROCESSED and WRITTEN.

The epoch's rows are committed (PROCESSED) before they are validated, so read-uncommitted
readers can already see them; the epoch is sealed (WRITTEN) only if the gate lets it:

- ``block``: a failure leaves the epoch PROCESSED; downstream jobs and repeatable-read
  readers stay at the last good epoch. A rerun validates again; an operator may resolve
  it (:mod:`etl.engine.resolve`), e.g. by quarantining its failing rows.
- ``quarantine``: failing rows are committed to the quarantine table, then the output's
  files holding the epoch are rewritten without them; the rest is sealed.
- ``warn``: sealed anyway.

Results are kept in the catalog per (table, epoch) in every case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from consistency import META_JOB, META_ROLLBACK_OF
from etl.delta import read_epochs, restore_table, table_version
from etl.engine.commit import BatchWrite, EpochWriter, current_version
from etl.quality import no_quarantined_rows, run_gate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from etl.quality import QualityGate


@dataclass(frozen=True)
class AuditVerdict:
    """A quality gate's decision on one batch, and the batch's writes after the audit."""

    written: BatchWrite
    blocked_reason: str | None = None
    quarantined: int = 0


def audit(writer: EpochWriter, gate: QualityGate, written: BatchWrite) -> AuditVerdict:
    """Validate the batch's rows of the gate's table; quarantine failing rows if the policy says.

    Quarantine takes the epoch out of the output again (a RESTORE to the version before
    the batch) and writes the passing rows the way the job writes (append, merge on its
    keys, or overwrite), as the epoch's final commit; so a merge keeps every key's
    previously sealed row when its update was quarantined. When recovery finishes a batch
    whose quarantine commit is already in the log, the gate's recorded verdict stands: it
    is not validated again on the cleaned rows.
    """
    job, batch = writer.job, writer.batch
    location = writer.location(job.output)
    if writer.resumed:
        finished = _finished_audit(writer, gate, written)
        if finished is not None:
            return finished
    version = written.versions.get(job.output)
    if version is None:
        version = current_version(location, job.output)
    session = writer.spark.newSession()
    rows = read_epochs(
        session, location, version=version, first_epoch=batch.first, last_epoch=batch.last
    )
    outcome = run_gate(session, gate, rows, epoch=batch.last)
    writer.record_validation(outcome.record())
    if not outcome.success:
        written = _with_quarantine_table(writer, gate, rows, written)
        return AuditVerdict(written, blocked_reason=outcome.blocked_reason)
    if outcome.quarantined is None or outcome.passing is None:
        return AuditVerdict(_with_quarantine_table(writer, gate, rows, written))
    quarantine_location = writer.location(gate.quarantine_table)
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
    base = writer.version_before(job.output)
    passing = writer.prepare(
        table=job.output,
        frame=outcome.passing.select(*rows.columns),
        mode=job.mode,
        base=base,
        name=f"{batch.last}-{writer.attempt}-audit",
    )
    writer.check_lease()
    restore_table(
        location,
        to_version=base,
        planned_at=current_version(location, job.output),
        fence=writer.fence,
        metadata={META_JOB: job.name, META_ROLLBACK_OF: str(batch.last)},
    )
    written = writer.commit_prepared(
        # The output's rows of the batch are now only the passing ones.
        BatchWrite(versions=written.versions, rows={**written.rows, job.output: 0}),
        table=job.output,
        prepared=passing,
        part=0,
        final=True,
        overwrite=job.mode == "overwrite",
        audit=True,
    )
    return AuditVerdict(written, quarantined=outcome.quarantined_count)


def _with_quarantine_table(
    writer: EpochWriter, gate: QualityGate, rows: DataFrame, written: BatchWrite
) -> BatchWrite:
    """``written``, plus the creation of the gate's quarantine table if it has no Delta
    version yet (a ``block`` or ``warn`` gate's, or any gate's blocked first epoch): a side
    output is sealed with its output at every epoch, at a version."""
    table = gate.quarantine_table
    if table_version(writer.location(table)) is not None:
        return written
    return writer.write(
        written,
        table=table,
        frame=no_quarantined_rows(gate, rows, epoch=writer.batch.last),
        part=0,
        final=True,
        mode="append",
    )


def _finished_audit(
    writer: EpochWriter, gate: QualityGate, written: BatchWrite
) -> AuditVerdict | None:
    """The verdict of this attempt's audit if its quarantine commit is already in the log."""
    job, batch, catalog = writer.job, writer.batch, writer.catalog
    if writer.audited_version(job.output) is None:
        return None
    quarantine = catalog.table_epoch(gate.quarantine_table, batch.last)
    quarantined = (quarantine.rows or 0) if quarantine is not None else 0
    return AuditVerdict(written, quarantined=quarantined)


__all__ = [
    "AuditVerdict",
    "audit",
]
