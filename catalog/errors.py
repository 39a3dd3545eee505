"""The catalog's errors, under the one root :class:`DeltaBarrierError`.

The root, :class:`CatalogError` and the errors the consistency rules raise are defined
in :mod:`consistency.errors` (the bottom layer) and re-exported here. Errors carry the
table, job or epoch they concern as attributes, so callers can act on them without
parsing messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from consistency.errors import CatalogError as CatalogError
from consistency.errors import DeltaBarrierError as DeltaBarrierError
from consistency.errors import EpochExpiredError as EpochExpiredError
from consistency.errors import EpochStateError as EpochStateError
from consistency.errors import RetentionError as RetentionError
from consistency.errors import UnknownEpochError as UnknownEpochError


class CatalogUnavailableError(CatalogError):
    """The catalog database cannot be reached. Never carries a password."""

    def __init__(self, *, backend: str, host: str | None, database: str | None, reason: str):
        self.backend = backend
        self.host = host
        self.database = database
        where = f"{backend} database {database!r}" + (f" on {host}" if host else "")
        check = (
            "Check that the path names a SQLite file you may read (and write, to run)"
            if backend == "sqlite"
            else "Check that the server is running and the catalog URL is right"
        )
        super().__init__(f"cannot open the catalog ({where}): {reason}. {check}.")


class CatalogNotFoundError(CatalogError):
    """Opening without ``create``: there is no catalog where the URL points."""

    def __init__(self, *, backend: str, where: str):
        self.backend = backend
        self.where = where
        super().__init__(
            f"no catalog found at {where}; nothing was created. "
            "`etl run` creates the catalog on the pipeline's first run"
        )


class CatalogReadOnlyError(CatalogError):
    """A write to a catalog that was opened read-only (or whose file is read-only)."""

    def __init__(self, *, url: str, operation: str | None = None):
        self.url = url
        self.operation = operation
        what = f" ({operation})" if operation else ""
        super().__init__(
            f"the catalog at {url} is read-only: cannot write to it{what}. "
            "Reading works; to write, open it where its file and directory are writable"
        )


def driver_message(exc: BaseException) -> str:
    """The first line of a database driver's message (the original error under
    SQLAlchemy's), or the error's type when it has none."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def says_read_only(exc: BaseException) -> bool:
    """Whether a database error says the database cannot be written."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return "readonly" in text or "read-only" in text


class SchemaVersionError(CatalogError):
    """The catalog database was created by another version of Delta Barrier."""

    def __init__(self, *, found: int, expected: int):
        self.found = found
        self.expected = expected
        if found > expected:
            hint = "it was written by a newer Delta Barrier; upgrade this installation"
        else:
            hint = "run `etl catalog upgrade` (or Catalog.upgrade()) to migrate it"
        super().__init__(
            f"catalog schema version is {found}, this Delta Barrier expects {expected}: {hint}"
        )


class InvalidNameError(CatalogError):
    """A table, job or source name is not acceptable."""

    def __init__(self, *, kind: str, name: str, reason: str):
        self.kind = kind
        self.name = name
        super().__init__(f"invalid {kind} name {name!r}: {reason}")


class RegistrationError(CatalogError):
    """A table or job cannot be registered."""


class UnknownTableError(RegistrationError):
    def __init__(self, table: str, *, job: str | None = None):
        self.table = table
        self.job = job
        who = f"job {job!r} uses " if job else ""
        super().__init__(
            f"{who}table {table!r}, which is not registered in the catalog; "
            "register the table (or the job that writes it) first"
        )


class UnknownJobError(RegistrationError):
    def __init__(self, job: str):
        self.job = job
        super().__init__(f"job {job!r} is not registered in the catalog")


class UnknownPipelineError(RegistrationError):
    def __init__(self, pipeline: str):
        self.pipeline = pipeline
        super().__init__(
            f"pipeline {pipeline!r} is not registered in the catalog; "
            "it comes into being when its first table or job is registered"
        )


class PipelineMismatchError(RegistrationError):
    """A job may only read and write tables of its own pipeline."""

    def __init__(
        self,
        *,
        job: str,
        table: str,
        job_pipeline: str,
        table_pipeline: str,
        role: str,
        location: str | None = None,
    ):
        self.job = job
        self.table = table
        self.job_pipeline = job_pipeline
        self.table_pipeline = table_pipeline
        self.role = role
        path = repr(location) if location else "<its location>"
        hint = (
            f"; read it as a source instead: etl.sources.delta_table.DeltaTableSource("
            f"'{table}', path={path}) (epochs are issued per catalog, so pipeline "
            f"{job_pipeline!r} would wait forever for epochs of pipeline {table_pipeline!r})"
            if role == "input"
            else ""
        )
        super().__init__(
            f"job {job!r} of pipeline {job_pipeline!r} cannot use table {table!r} of "
            f"pipeline {table_pipeline!r} as an {role}: a job's tables must belong to its "
            f"own pipeline{hint}"
        )


class NameOwnedError(RegistrationError):
    """A pipeline declares a job, source or table name that another pipeline owns.

    Names are warehouse-wide: a job's name is written into every commit of its tables'
    Delta logs (commit metadata and the fence ``delta-barrier-fence/<job>``), a source's
    slices are keyed by its name, and a table has one writer.
    """

    def __init__(self, *, pipeline: str, conflicts: Sequence[tuple[str, str, str]]):
        self.pipeline = pipeline
        self.conflicts = tuple(conflicts)
        """(kind, name, owner pipeline) per name, kind one of job, source, table."""
        self.owners = tuple(sorted({owner for _, _, owner in self.conflicts}))
        names = ", ".join(
            f"{kind} {name!r} (owned by pipeline {owner!r})" for kind, name, owner in self.conflicts
        )
        retire = " or ".join(f"`etl retire pipeline {owner}`" for owner in self.owners)
        super().__init__(
            f"pipeline {pipeline!r} cannot register {names}: job, source and table names are "
            "warehouse-wide (a job's name is written into its tables' Delta logs, a source's "
            f"slices are keyed by its name, a table has one writer). Rename them in pipeline "
            f"{pipeline!r}, or remove the other pipeline with {retire}. Nothing was registered"
        )


class RetirementBlockedError(RegistrationError):
    """A table or job cannot be retired while active jobs depend on it."""

    def __init__(self, *, kind: str, name: str, blockers: Sequence[str], reason: str):
        self.kind = kind
        self.name = name
        self.blockers = tuple(blockers)
        super().__init__(f"cannot retire {kind} {name!r}: {reason}")


class RetiredError(CatalogError):
    """A retired table or job was asked to take part in something new."""

    def __init__(self, *, kind: str, name: str, retired_at: object, job: str | None = None):
        self.kind = kind
        self.name = name
        self.retired_at = retired_at
        self.job = job
        who = f"job {job!r} uses " if job and kind == "table" else ""
        super().__init__(
            f"{who}{kind} {name!r}, which is retired (since {retired_at}); "
            f"register the {kind} again to revive it"
        )


class DuplicateWriterError(RegistrationError):
    """Two jobs may never write the same table."""

    def __init__(self, *, table: str, existing_job: str, new_job: str):
        self.table = table
        self.existing_job = existing_job
        self.new_job = new_job
        super().__init__(
            f"table {table!r} is already written by job {existing_job!r}; "
            f"job {new_job!r} cannot write it too (one writer per table)"
        )


class LineageCycleError(RegistrationError):
    """Registering the job would close a cycle in the lineage."""

    def __init__(self, *, job: str, cycle: Sequence[str]):
        self.job = job
        self.cycle = tuple(cycle)
        super().__init__(
            f"job {job!r} would close a cycle in the lineage: {' -> '.join(self.cycle)}"
        )


class TableConflictError(RegistrationError):
    """A table is registered again with a different definition."""

    def __init__(self, *, table: str, field: str, existing: object, new: object):
        self.table = table
        self.field = field
        super().__init__(
            f"table {table!r} is already registered with {field}={existing!r}, not {new!r}"
        )


class SliceConflictError(CatalogError):
    """A source slice was recorded before with other bounds: a replay would read other data."""

    def __init__(self, *, source: str, epoch: int, recorded: Mapping, attempted: Mapping):
        self.source = source
        self.epoch = epoch
        self.recorded = recorded
        self.attempted = attempted
        super().__init__(
            f"slice of source {source!r} for epoch {epoch} was recorded as {dict(recorded)!r}; "
            f"refusing to record it again as {dict(attempted)!r}"
        )


class ForeignEpochError(CatalogError):
    """An epoch of one pipeline was used with a table or job of another."""

    def __init__(
        self,
        *,
        epoch: int,
        epoch_pipeline: str,
        pipeline: str,
        table: str | None = None,
        job: str | None = None,
    ):
        self.epoch = epoch
        self.epoch_pipeline = epoch_pipeline
        self.pipeline = pipeline
        self.table = table
        self.job = job
        of = f" of table {table!r}" if table else f" of job {job!r}" if job else ""
        super().__init__(
            f"epoch {epoch} belongs to pipeline {epoch_pipeline!r}, not to pipeline "
            f"{pipeline!r}{of}"
        )


class WriterMismatchError(CatalogError):
    """A job tried to record something about a table it does not write."""

    def __init__(self, *, table: str, job: str, writer: str | None):
        self.table = table
        self.job = job
        self.writer = writer
        super().__init__(f"table {table!r} is written by job {writer!r}, not by job {job!r}")


class LeaseError(CatalogError):
    """A job lease problem."""


class LeaseHeldError(LeaseError):
    def __init__(self, *, job: str, owner: str, acquired_at: object, expires_at: object):
        self.job = job
        self.owner = owner
        self.acquired_at = acquired_at
        self.expires_at = expires_at
        super().__init__(
            f"job {job!r} is being run by {owner} (lease held since {acquired_at}, "
            f"until {expires_at}); wait for it to finish or for the lease to expire"
        )


class StaleLeaseError(LeaseError):
    """A job instance whose lease was taken over tried to act (zombie fencing)."""

    def __init__(self, *, job: str, generation: int, current_generation: int | None):
        self.job = job
        self.generation = generation
        self.current_generation = current_generation
        super().__init__(
            f"job {job!r} holds lease generation {generation} but the current generation is "
            f"{current_generation}; this instance was superseded and may not seal anything"
        )


class CatalogUrlError(CatalogError):
    """The catalog URL cannot be used. Carries the URL with any password masked."""

    def __init__(self, *, url: str, reason: str):
        self.url = url
        super().__init__(f"cannot use catalog URL {url!r}: {reason}")


class PinExpiredError(RetentionError):
    """A pin expired (or was released) before its holder renewed it."""

    def __init__(self, *, pin_id: str, holder: str, expired_at: object | None):
        self.pin_id = pin_id
        self.holder = holder
        self.expired_at = expired_at
        when = f"expired at {expired_at}" if expired_at is not None else "was released"
        super().__init__(
            f"pin {pin_id} of {holder} {when}; what it protected may have been cleaned up: "
            "take a new snapshot"
        )


class TagExistsError(RetentionError):
    def __init__(self, *, name: str, epoch: int):
        self.name = name
        self.epoch = epoch
        super().__init__(f"tag {name!r} already exists (at epoch {epoch}); delete it first")


class UnknownTagError(RetentionError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"tag {name!r} does not exist")


class InvalidRetentionPolicyError(RetentionError):
    def __init__(self, *, pipeline: str | None, reason: str):
        self.pipeline = pipeline
        of = f"pipeline {pipeline!r}" if pipeline else "the catalog-wide default"
        super().__init__(f"retention policy of {of} is not valid JSON: {reason}")


class RevisionStateError(CatalogError):
    """A revision asked to switch or be discarded is no longer building."""

    def __init__(self, *, revision: int, state: str, requested: str):
        self.revision = revision
        self.state = state
        super().__init__(
            f"revision {revision} is {state}, so it cannot become {requested}: only a "
            "BUILDING revision is switched or discarded (etl epochs TABLE lists a table's revisions)"
        )


class UnknownRevisionError(CatalogError):
    def __init__(self, revision: int):
        self.revision = revision
        super().__init__(
            f"no revision {revision} in the catalog (etl epochs TABLE lists a table's revisions)"
        )
