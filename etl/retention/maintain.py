"""``etl maintain``: expiry, compaction, checkpoints, vacuum and log cleanup, in that order.

PRODUCT.md, "Retention, pins and tags". Safe while pipelines run:

- **Expiry** asks the catalog to expire the epochs the policy no longer keeps
  (consistency/retention.py); the catalog skips pinned and tagged epochs atomically.
  The latest COMMIT epoch, everything after it and each table's latest WRITTEN epoch
  are never candidates.
- **Keep-set**: per table, the Delta versions of every WRITTEN epoch that has not
  expired, of every live pin and every tag, and every version from the latest sealed one
  on (batches in flight). The expiries are read *before* the pins: a reader that pins
  first and then finds its epochs unexpired (etl/retention/pins.py) is therefore always
  seen, either through its pin or through its unexpired epoch.
- **Vacuum** deletes files no kept version references. Files the readable log never
  mentions (orphans: a crashed batch's, or a batch whose commit is still coming), the
  temporary files a writer killed mid-commit left in ``_delta_log``, and staging
  directories go only after ``orphan_age``, and a staging directory only while its writer
  job's lease is not held by a live run.
- **Compaction** rewrites small files of a job's tables under that job's lease: only
  when the lease is free (or the caller's run holds it: ``held``, maintenance inside
  ``etl run --continuous``, whose commits land only while the job has no batch in flight,
  etl/retention/gate.py) and the table has nothing in flight. A job held by another live
  run is skipped and reported. A compaction that loses to a job's commit (which removed
  one of its small files) deletes its new files and is planned again, a few times, then
  left to the next run of maintenance; it never fails the job.
- **Log upkeep** checkpoints the latest version and deletes log entries older than the
  oldest kept version (after a checkpoint at exactly that version).
- **Expired pins** (left by readers that died without releasing them) are deleted from the
  catalog first; they protect nothing already.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from catalog import Catalog, EpochState, Lease, LeaseHeldError
from consistency.retention import EpochPoint, Retention, expired_epochs
from etl.delta.commit import claim_table
from etl.delta.fence import Fence
from etl.delta.maintenance import (
    LOG_GRACE,
    commit_rewrite,
    delete_paths,
    discard_rewrite,
    log_upkeep,
    plan_compaction,
    referenced_files,
    rewrite_small_files,
    staging_dirs,
    stored_files,
    temporary_leftovers,
)
from etl.errors import CommitConflictError, DeltaIOError, FencedError
from etl.retention.gate import BatchGate

log = logging.getLogger(__name__)

DEFAULT_ORPHAN_AGE = timedelta(hours=1)
IN_FLIGHT_AGE = timedelta(hours=1)
"""While a job's run is live, an unreferenced file of its tables is deleted only when at
least this old: younger ones may belong to a batch about to commit."""
_EXPIRE_CHUNK = 500
_COMPACTION_ATTEMPTS = 3


@dataclass(frozen=True)
class HeldJobs:
    """The jobs of a run that maintenance runs inside: their leases (compaction commits
    carry their fences) and the gate their batches pass (commits wait for idle jobs)."""

    leases: Mapping[str, Lease]
    gate: BatchGate
    idle_wait: float = 5.0
    """Seconds a compaction commit waits for the job to be idle before it is skipped."""
    cancel: threading.Event | None = None
    """Set when the run stops: nothing waits any more."""


@dataclass
class TableMaintenance:
    table: str
    files_removed: int = 0
    bytes_removed: int = 0
    orphans_removed: int = 0
    staging_removed: int = 0
    compacted_files: int = 0
    """Small files rewritten (they stay while retained versions need them)."""
    compacted_into: int = 0
    checkpoint_version: int | None = None
    log_entries_removed: int = 0
    first_readable_version: int | None = None
    skipped: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)
    """What could go but stays for now, and why (a grace period, a running writer)."""
    removed: list[str] = field(default_factory=list)


@dataclass
class MaintenanceReport:
    dry_run: bool
    pipelines: list[str]
    epochs_expired: list[int] = field(default_factory=list)
    rules: dict[str, str] = field(default_factory=dict)
    epochs_held: dict[int, str] = field(default_factory=dict)
    """Epochs the policy lets go that a pin or a tag keeps, and which."""
    pins_removed: int = 0
    """Expired pins deleted from the catalog (readers that died without releasing them)."""
    tables: list[TableMaintenance] = field(default_factory=list)

    @property
    def files_removed(self) -> int:
        return sum(t.files_removed for t in self.tables)

    @property
    def bytes_removed(self) -> int:
        return sum(t.bytes_removed for t in self.tables)

    @property
    def compacted_files(self) -> int:
        return sum(t.compacted_files for t in self.tables)

    @property
    def compacted_into(self) -> int:
        return sum(t.compacted_into for t in self.tables)

    @property
    def log_entries_removed(self) -> int:
        return sum(t.log_entries_removed for t in self.tables)

    @property
    def skipped(self) -> list[str]:
        return [f"{t.table}: {reason}" for t in self.tables for reason in t.skipped]

    @property
    def held_back(self) -> list[str]:
        """Everything kept for now that could go later, and why, one line each."""
        epochs = [f"epoch {e}: {why}" for e, why in sorted(self.epochs_held.items())]
        return epochs + [f"{t.table}: {why}" for t in self.tables for why in t.held_back]

    def summary(self) -> str:
        """What it did (or would do), in one line."""
        verb = "would remove" if self.dry_run else "removed"
        parts = [
            f"{len(self.epochs_expired)} epoch(s) {'to expire' if self.dry_run else 'expired'}",
            f"compacted {self.compacted_files} file(s) into {self.compacted_into}",
            f"{verb} {self.files_removed} file(s) ({self.bytes_removed:,} bytes) and "
            f"{self.log_entries_removed} log entries",
        ]
        skipped = self.skipped
        return ", ".join(parts) + (f"; skipped: {'; '.join(skipped)}" if skipped else "")

    def to_json(self) -> dict:
        data = asdict(self)
        data["files_removed"] = self.files_removed
        data["bytes_removed"] = self.bytes_removed
        data["compacted_files"] = self.compacted_files
        data["compacted_into"] = self.compacted_into
        data["log_entries_removed"] = self.log_entries_removed
        return data


def policy_of(catalog: Catalog, pipeline: str) -> Retention:
    return Retention.from_json(catalog.retention_policy(pipeline)) or Retention()


def plan_expiry(catalog: Catalog, pipeline: str, *, now: datetime) -> tuple[list[int], str]:
    """The epochs of ``pipeline`` its policy no longer keeps at ``now`` (before pins and
    tags, which the catalog honours when expiring), and the rule."""
    policy = policy_of(catalog, pipeline)
    if policy.keeps_everything:
        return [], policy.rule
    latest = catalog.latest_commit(pipeline=pipeline)
    if latest is None:
        return [], policy.rule
    tables = [t.name for t in catalog.list_tables(pipeline=pipeline, include_retired=True)]
    protected = {row.epoch for row in catalog.latest_written(tables).values()}
    already = {e.epoch for e in catalog.expired_epochs(pipeline=pipeline)}
    epochs = catalog.epochs(up_to=latest.epoch, pipeline=pipeline)
    points = [EpochPoint(e.id, e.barrier_ts) for e in epochs]
    expired = [
        e
        for e in expired_epochs(points, policy, now=now)
        if e < latest.epoch and e not in protected and e not in already
    ]
    return expired, policy.rule


def _keep_versions(
    catalog: Catalog, tables: list[str], expired: set[int]
) -> tuple[dict[str, set[int]], dict[str, int]]:
    """Per table: versions of kept cuts (of the current revision and of those a recompute
    replaced: time travel to before its switch reads them), pins and tags; and the latest
    sealed version."""
    pins = catalog.active_pins()  # after the expiries were read: see the module docstring
    tags = catalog.list_tags()
    replaced = [
        state
        for revision in catalog.revisions()
        for state in catalog.superseded_states(revision.id)
    ]
    keep: dict[str, set[int]] = {t: set() for t in tables}
    keep_from: dict[str, int] = {}
    for table in tables:
        for row in replaced:
            if (
                row.table == table
                and row.state == EpochState.WRITTEN
                and row.delta_version is not None
                and row.epoch not in expired
            ):
                keep[table].add(row.delta_version)
        sealed = None
        for row in catalog.table_epochs(table):
            if row.state == EpochState.WRITTEN and row.delta_version is not None:
                if row.epoch not in expired:
                    keep[table].add(row.delta_version)
                sealed = row.delta_version if sealed is None else max(sealed, row.delta_version)
        keep_from[table] = 0 if sealed is None else sealed
    held: list[Mapping[str, int]] = [pin.versions for pin in pins] + [t.versions for t in tags]
    for versions in held:
        for table, version in versions.items():
            if table in keep:
                keep[table].add(int(version))
    return keep, keep_from


def maintain(
    catalog: Catalog,
    *,
    pipeline: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    orphan_age: timedelta = DEFAULT_ORPHAN_AGE,
    log_grace: timedelta = LOG_GRACE,
    compaction: bool = True,
    small_file_bytes: int = 16 << 20,
    min_files: int = 4,
    held: HeldJobs | None = None,
    lease_ttl_seconds: float = 60.0,
) -> MaintenanceReport:
    """Run maintenance for one pipeline (every pipeline when None); see the module doc.

    ``held``: the jobs of the run this maintenance runs inside (etl/retention/in_run.py);
    other jobs' leases are taken for compaction only if free. ``now`` is the clock the
    policy is applied at (default: the wall clock, UTC).
    """
    now = now or datetime.now(UTC)
    names = [pipeline] if pipeline is not None else [p.name for p in catalog.list_pipelines()]
    report = MaintenanceReport(
        dry_run=dry_run, pipelines=names, pins_removed=catalog.remove_expired_pins(dry_run=dry_run)
    )
    for name in names:
        expired_now, rule = plan_expiry(catalog, name, now=now)
        report.rules[name] = rule
        holders = _epoch_holders(catalog)
        if dry_run:
            report.epochs_expired += [e for e in expired_now if e not in holders]
        else:
            for start in range(0, len(expired_now), _EXPIRE_CHUNK):
                chunk = expired_now[start : start + _EXPIRE_CHUNK]
                report.epochs_expired += catalog.expire_epochs(chunk, rule=rule, pipeline=name)
        gone = set(report.epochs_expired)
        report.epochs_held |= {
            e: holders.get(e, "held by a pin or tag") for e in expired_now if e not in gone
        }
        tables = catalog.list_tables(pipeline=name, include_retired=True)
        if compaction and dry_run:
            _plan_pipeline_compaction(
                catalog, name, report, small_file_bytes=small_file_bytes, min_files=min_files
            )
        elif compaction:
            _compact_pipeline(
                catalog,
                name,
                report,
                held=held,
                small_file_bytes=small_file_bytes,
                min_files=min_files,
                lease_ttl_seconds=lease_ttl_seconds,
            )
        expired = {e.epoch for e in catalog.expired_epochs(pipeline=name)}
        if dry_run:
            expired |= set(report.epochs_expired)
        keep, keep_from = _keep_versions(catalog, [t.name for t in tables], expired)
        for info in tables:
            entry = _table_entry(report, info.name)
            try:
                _vacuum_table(
                    catalog,
                    info,
                    entry,
                    keep=keep[info.name],
                    keep_from=keep_from[info.name],
                    dry_run=dry_run,
                    orphan_age=orphan_age,
                    log_grace=log_grace,
                )
            except DeltaIOError as exc:
                entry.skipped.append(f"vacuum: {exc}")
    report.tables.sort(key=lambda entry: entry.table)  # a dry run lists them as a run does
    return report


def _epoch_holders(catalog: Catalog) -> dict[int, str]:
    """The epochs live pins and tags hold, and by what (expiry skips them)."""
    holders: dict[int, list[str]] = {}
    for pin in catalog.active_pins():
        if pin.epoch is not None:
            holders.setdefault(pin.epoch, []).append("an open snapshot's pin")
    for tag in catalog.list_tags():
        holders.setdefault(tag.epoch, []).append(f"tag {tag.name!r}")
    return {epoch: "held by " + ", ".join(by) for epoch, by in holders.items()}


def _plan_pipeline_compaction(
    catalog: Catalog,
    pipeline: str,
    report: MaintenanceReport,
    *,
    small_file_bytes: int,
    min_files: int,
) -> None:
    """What compaction would do now (a dry run): the plan of every table whose job is not
    held by a live run and has no epoch in flight."""
    now = datetime.now(UTC)
    for table in catalog.list_tables(pipeline=pipeline):
        if table.writer_job is None:
            continue
        entry = _table_entry(report, table.name)
        lease = catalog.get_lease(table.writer_job)
        if lease is not None and _aware(lease.expires_at) > now:
            entry.skipped.append(
                f"compaction: job {table.writer_job!r} is held by a live run ({lease.owner})"
            )
            continue
        sealed = catalog.latest_written([table.name]).get(table.name)
        processed = catalog.latest_processed([table.name]).get(table.name)
        if sealed is None or sealed.delta_version is None:
            continue
        if processed is not None and processed.epoch > sealed.epoch:
            entry.skipped.append("compaction: an epoch is in flight; tried again next time")
            continue
        try:
            plan = plan_compaction(
                table.location, small_file_bytes=small_file_bytes, min_files=min_files
            )
        except DeltaIOError as exc:
            entry.skipped.append(f"compaction: {exc}")
            continue
        entry.compacted_files += plan.files_in
        entry.compacted_into += len(plan.groups)


def _table_entry(report: MaintenanceReport, table: str) -> TableMaintenance:
    for entry in report.tables:
        if entry.table == table:
            return entry
    entry = TableMaintenance(table)
    report.tables.append(entry)
    return entry


def _compact_pipeline(
    catalog: Catalog,
    pipeline: str,
    report: MaintenanceReport,
    *,
    held: HeldJobs | None,
    small_file_bytes: int,
    min_files: int,
    lease_ttl_seconds: float,
) -> None:
    owner = f"maintain:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    tables = catalog.list_tables(pipeline=pipeline)
    for job in catalog.list_jobs(pipeline=pipeline):
        outputs = [t for t in tables if t.writer_job == job.name]
        if not outputs:
            continue
        lease = held.leases.get(job.name) if held is not None else None
        taken = None
        if lease is None:
            try:
                lease = taken = catalog.acquire_lease(
                    job.name, owner, ttl_seconds=lease_ttl_seconds
                )
            except LeaseHeldError as exc:
                for table in outputs:
                    _table_entry(report, table.name).skipped.append(
                        f"compaction: job {job.name!r} is held by a live run ({exc.owner})"
                    )
                continue
        try:
            fence = Fence(job.name, lease.generation)
            for table in outputs:
                _compact_table(
                    catalog,
                    table,
                    fence,
                    _table_entry(report, table.name),
                    held=held if lease is not taken else None,
                    small_file_bytes=small_file_bytes,
                    min_files=min_files,
                )
        finally:
            if taken is not None:
                catalog.release_lease(taken)


def _compact_table(
    catalog: Catalog,
    table,
    fence: Fence,
    entry: TableMaintenance,
    *,
    held: HeldJobs | None,
    small_file_bytes: int,
    min_files: int,
) -> None:
    """Compact ``table``; with ``held``, only while its job has no batch in flight, and
    again (re-planned) when a job's commit removed one of the small files meanwhile."""
    from etl.delta.log import table_version

    def idle():
        if held is None:
            return nullcontext(True)
        return held.gate.idle(fence.job, wait=held.idle_wait, cancel=held.cancel)

    busy = f"a batch of job {fence.job!r} kept running"
    lost = busy
    for _ in range(_COMPACTION_ATTEMPTS):
        with idle() as free:
            pass
        if not free:
            break
        latest = table_version(table.location)
        sealed = catalog.latest_written([table.name]).get(table.name)
        if latest is None or sealed is None or sealed.delta_version is None:
            return
        processed = catalog.latest_processed([table.name]).get(table.name)
        if (processed is not None and processed.epoch > sealed.epoch) or (
            latest < sealed.delta_version
        ):
            lost = "an epoch is in flight"
            break
        plan = plan_compaction(
            table.location, small_file_bytes=small_file_bytes, min_files=min_files
        )
        if not plan.groups:
            return
        rewrite = rewrite_small_files(table.location, plan)
        again = False
        with idle() as free:
            if not free:
                lost = busy
            else:
                try:
                    if held is None:  # a lease of its own: a new generation claims first
                        claim_table(table.location, fence=fence)
                    commit_rewrite(rewrite, fence=fence)
                    entry.compacted_files += plan.files_in
                    entry.compacted_into += len(plan.groups)
                    return
                except CommitConflictError as exc:
                    lost, again = str(exc), True
                except (FencedError, DeltaIOError) as exc:
                    lost = str(exc)
        discard_rewrite(rewrite)
        if not again:
            break
    entry.skipped.append(f"compaction: {lost}; tried again next time")


def _duration(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _aware(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


def _vacuum_table(
    catalog: Catalog,
    info,
    entry: TableMaintenance,
    *,
    keep: set[int],
    keep_from: int,
    dry_run: bool,
    orphan_age: timedelta,
    log_grace: timedelta,
) -> None:
    from etl.delta.log import table_version

    if table_version(info.location) is None:
        return
    lease = catalog.get_lease(info.writer_job) if info.writer_job else None
    # The run maintenance runs inside is live too: a batch of it may start at any time.
    writer_live = lease is not None and _aware(lease.expires_at) > datetime.now(UTC)
    # Storage is listed before the log is read: a file committed meanwhile is not in the
    # listing, so it cannot be mistaken for an orphan. A file written but not committed
    # yet by a live writer looks like an orphan; only its age tells, so while the writer
    # runs, unknown files must be at least IN_FLIGHT_AGE old, whatever orphan_age says.
    listed = stored_files(info.location)
    refs = referenced_files(info.location, keep, keep_from=keep_from)
    age = max(orphan_age, IN_FLIGHT_AGE) if writer_live else orphan_age
    cutoff = time.time() - age.total_seconds()
    young = (
        f"younger than {_duration(age)} while job {info.writer_job!r} runs (a batch about "
        "to commit may own them)"
        if writer_live
        else f"younger than --orphan-age ({_duration(age)})"
    )
    doomed = []
    unknown_young = 0
    for file in listed:
        if file.path in refs.needed:
            continue
        if file.path in refs.known or file.mtime < cutoff:
            doomed.append(file)
            if file.path not in refs.known:
                entry.orphans_removed += 1
        else:
            unknown_young += 1
    if unknown_young:
        entry.held_back.append(f"{unknown_young} file(s) no kept cut needs, {young}")
    temporary = temporary_leftovers(info.location)
    leftovers = [f for f in temporary if f.mtime < cutoff]
    if len(temporary) > len(leftovers):
        entry.held_back.append(
            f"{len(temporary) - len(leftovers)} temporary file(s) of a write, {young}"
        )
    doomed += leftovers
    entry.orphans_removed += len(leftovers)
    staging = staging_dirs(info.location)
    stale_staging = [] if writer_live else [d for d in staging if d.mtime < cutoff]
    if len(staging) > len(stale_staging):
        entry.held_back.append(
            f"{len(staging) - len(stale_staging)} staging director(y/ies), "
            + (f"job {info.writer_job!r} runs" if writer_live else young)
        )
    entry.files_removed += len(doomed)
    entry.bytes_removed += sum(f.size for f in doomed) + sum(d.size for d in stale_staging)
    entry.staging_removed += len(stale_staging)
    entry.removed += [f.path for f in doomed] + [d.path + "/" for d in stale_staging]
    oldest_kept = min(keep | {keep_from})
    if not dry_run:
        delete_paths(info.location, [f.path for f in doomed])
        delete_paths(info.location, [d.path for d in stale_staging], directories=True)
    upkeep = log_upkeep(
        info.location, keep_from_version=oldest_kept, dry_run=dry_run, grace=log_grace
    )
    entry.checkpoint_version = upkeep.checkpoint_version
    entry.log_entries_removed += upkeep.entries_removed
    if upkeep.entries_held:
        entry.held_back.append(
            f"{upkeep.entries_held} log entries no kept cut needs, until a checkpoint at or "
            f"before version {oldest_kept} is {_duration(log_grace)} old (a reader listing "
            "the log meanwhile may still load the older entries)"
        )
    entry.first_readable_version = upkeep.first_version


__all__ = [
    "DEFAULT_ORPHAN_AGE",
    "HeldJobs",
    "IN_FLIGHT_AGE",
    "MaintenanceReport",
    "TableMaintenance",
    "maintain",
    "plan_expiry",
    "policy_of",
]
