"""A job's fence: its lease generation, recorded in the Delta log of every table it writes,
which every commit and RESTORE of the job checks (docs/design.md, "Failure and recovery")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deltalake.transaction import Transaction

from etl.errors import FencedError, UnclaimedTableError

FENCE_APP_PREFIX = "delta-barrier-fence/"


@dataclass(frozen=True)
class Fence:
    """A job's claim on the tables it writes: its lease generation, kept in each table's log.

    The claim is the Delta app transaction ``(delta-barrier-fence/<job>, generation)``
    (Delta protocol, "Transaction Identifiers": the latest version per app id survives
    every later commit, RESTOREs and checkpoints included). Every commit and RESTORE of the
    job carries it and is applied only to a version that records exactly its generation,
    as exactly the next version (every log entry is written put-if-absent; no retry is
    rebased on top of another writer's commit). A runner whose lease was taken over can
    therefore never change the table again once the new owner claimed it; and the new
    owner never writes on top of a table it neither created nor claimed (one a superseded
    runner created after the takeover, when there was no table to claim yet): creating a
    table is a put-if-absent of its first log entry, so exactly one of them creates it and
    the other's next commit is refused.
    """

    job: str
    generation: int

    @property
    def app_id(self) -> str:
        return FENCE_APP_PREFIX + self.job

    def transaction(self) -> Transaction:
        return Transaction(self.app_id, self.generation)

    def recorded(self, transactions: Mapping[str, int]) -> int | None:
        """The generation a version whose app transactions are ``transactions`` records,
        if any (:func:`etl.delta.log.app_transactions_of`)."""
        return transactions.get(self.app_id)

    def check(self, location: str, transactions: Mapping[str, int]) -> None:
        """Raise FencedError if the version of ``location`` whose app transactions are
        ``transactions`` records a newer generation."""
        recorded = self.recorded(transactions)
        if recorded is not None and recorded > self.generation:
            raise FencedError(
                table=location, job=self.job, generation=self.generation, fenced_at=recorded
            )

    def require_claimed(self, location: str, transactions: Mapping[str, int]) -> None:
        """Raise unless the version of ``location`` whose app transactions are
        ``transactions`` records exactly this generation: a newer one is FencedError; an
        older one, or none, UnclaimedTableError. A runner commits only to a table it created
        or claimed, so a table that another runner of the job created or wrote after this
        one planned is never written on top of."""
        self.check(location, transactions)
        recorded = self.recorded(transactions)
        if recorded != self.generation:
            raise UnclaimedTableError(
                table=location, job=self.job, generation=self.generation, recorded=recorded
            )


__all__ = ["FENCE_APP_PREFIX", "Fence"]
