"""The one exception hierarchy of Delta Barrier.

Every error the project raises derives from :class:`DeltaBarrierError`. Errors carry
the table, job or epoch they concern as attributes, so callers can act on them
without parsing messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class DeltaBarrierError(Exception):
    """Root of every error raised by Delta Barrier."""


class CatalogError(DeltaBarrierError):
    """A problem with the catalog (the metadata store)."""


class CatalogUnavailableError(CatalogError):
    """The catalog database cannot be reached. Never carries a password."""

    def __init__(self, *, backend: str, host: str | None, database: str | None, reason: str):
        self.backend = backend
        self.host = host
        self.database = database
        where = f"{backend} database {database!r}" + (f" on {host}" if host else "")
        super().__init__(
            f"cannot open the catalog ({where}): {reason}. "
            "Check that the server is running and the catalog URL is right."
        )


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


class UnknownEpochError(CatalogError):
    def __init__(self, epoch: int):
        self.epoch = epoch
        super().__init__(f"epoch {epoch} has not been issued by this catalog")


class EpochStateError(CatalogError):
    """An epoch state transition that the state machine does not allow."""

    def __init__(
        self, *, table: str, epoch: int, current: str | None, requested: str, why: str = ""
    ):
        self.table = table
        self.epoch = epoch
        self.current = current
        self.requested = requested
        detail = f": {why}" if why else ""
        super().__init__(
            f"table {table!r} epoch {epoch}: cannot go from {current or 'no state'} "
            f"to {requested}{detail}"
        )


class LeaseError(CatalogError):
    """A job lease problem."""


class LeaseHeldError(LeaseError):
    def __init__(self, *, job: str, owner: str, expires_at: object):
        self.job = job
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"job {job!r} is being run by {owner} (lease held until {expires_at}); "
            "wait for it to finish or for the lease to expire"
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
