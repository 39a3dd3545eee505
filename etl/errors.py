"""Errors of the Spark/Delta runtime (``etl``). All derive from :class:`EtlError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from catalog.errors import DeltaBarrierError

__all__ = [
    "CommitConflictError",
    "DeltaBarrierError",
    "DeltaIOError",
    "DuplicateMergeKeyError",
    "EtlError",
    "InvalidWriteOptionError",
    "SchemaMismatchError",
    "UnsupportedTableFeatureError",
]


class EtlError(DeltaBarrierError):
    """A problem in the Spark/Delta runtime."""


class DeltaIOError(EtlError):
    """Reading or committing a Delta table failed (storage, log, or delta-rs error)."""

    def __init__(self, *, table: str, operation: str, reason: str):
        self.table = table
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation} of Delta table {table!r} failed: {reason}")


class UnsupportedTableFeatureError(EtlError):
    """The table uses Delta features this runtime cannot read correctly; it refuses to guess."""

    def __init__(self, table: str, features: Sequence[str]):
        self.table = table
        self.features = tuple(features)
        super().__init__(
            f"Delta table {table!r} uses features this runtime does not support: "
            f"{', '.join(self.features)}. Read it with an engine that supports them, or "
            "rewrite it without them (e.g. disable deletion vectors and purge, or drop "
            "column mapping)"
        )


class SchemaMismatchError(EtlError):
    """Rows to commit do not have the table's schema (nullability is ignored)."""

    def __init__(self, table: str, expected: Mapping[str, str], got: Mapping[str, str]):
        self.table = table
        self.expected = dict(expected)
        self.got = dict(got)
        missing = [c for c in self.expected if c not in self.got]
        extra = [c for c in self.got if c not in self.expected]
        changed = [
            f"{c}: {self.expected[c]} -> {self.got[c]}"
            for c in self.expected
            if c in self.got and self.expected[c] != self.got[c]
        ]
        details = "; ".join(
            part
            for part in (
                f"missing columns {missing}" if missing else "",
                f"unexpected columns {extra}" if extra else "",
                f"changed types {changed}" if changed else "",
            )
            if part
        )
        super().__init__(
            f"schema mismatch for Delta table {table!r}: {details}. The table has "
            f"{self.expected}, the rows have {self.got}; make the job produce the table's "
            "schema (or recompute the table into a new location)"
        )


class InvalidWriteOptionError(EtlError):
    """A write was asked for with options that cannot work for this table."""

    def __init__(self, *, table: str, option: str, reason: str):
        self.table = table
        self.option = option
        self.reason = reason
        super().__init__(f"cannot write Delta table {table!r}: {option}: {reason}")


class CommitConflictError(EtlError):
    """The table changed under a commit in a way that would lose or duplicate data."""

    def __init__(self, *, table: str, reason: str):
        self.table = table
        self.reason = reason
        super().__init__(
            f"refusing to commit to Delta table {table!r}: {reason}. Another writer changed "
            "the table; re-plan the write from its current version"
        )


class DuplicateMergeKeyError(EtlError):
    """A keyed merge got more than one update row for the same key."""

    def __init__(self, *, table: str, keys: Sequence[str], example: Mapping[str, object]):
        self.table = table
        self.keys = tuple(keys)
        self.example = dict(example)
        super().__init__(
            f"merge into Delta table {table!r} on keys {list(self.keys)}: the updates hold "
            f"several rows for the key {self.example}; deduplicate them so each key has one row"
        )
