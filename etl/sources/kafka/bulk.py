"""Decoding many JSON values at once with Arrow, deciding exactly as the per-record decoder.

The values of a batch are joined into newline-delimited JSON and parsed by
``pyarrow.json`` in one call against the payload's Arrow types. Arrow's verdict is only
trusted where it provably matches the per-record decoder (:mod:`etl.sources.kafka.decode`);
every other record is *unsure* and left to the per-record decoder, which then decides it
(a row, or a reject with its exact reason):

- only values that start with ``{`` and end with ``}`` are parsed in bulk (anything else,
  surrounding whitespace included, is unsure; a bare ``null`` must never reach Arrow's
  parser, which crashes on it);
- a block Arrow refuses (invalid JSON or UTF-8, a type mismatch, an integer out of range,
  a duplicate key, or not one row per value) is halved until the records it refuses are
  isolated, down to :data:`_SMALLEST_BLOCK` values, which are then all unsure;
- NOT NULL fields that are null, and non-finite doubles (``NaN``, ``Infinity``, overflow),
  are unsure;
- timestamps and dates are parsed as strings, and only strings of a strict ISO-8601 form
  that Python's ``fromisoformat`` reads alike are converted by Arrow; the others are unsure.

Only flat schemas of the types below are decoded in bulk (:func:`bulk_parse_schema`);
others keep the per-record decoder for every record.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

_SMALLEST_BLOCK = 32

_YEAR = r"([1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9])"
_DATE = _YEAR + r"-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
_TIME = r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
_OFFSET = r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
_ZONED = f"^{_DATE}[T ]{_TIME}{_OFFSET}$"
_NAIVE = f"^{_DATE}[T ]{_TIME}$"
_DAY = f"^{_DATE}$"


def bulk_parse_schema(payload: pa.Schema) -> pa.Schema | None:
    """The schema to parse ``payload``'s JSON with (timestamps and dates as strings), or
    None when a field has a type this module does not decode."""
    import pyarrow as pa

    fields = []
    for field in payload:
        kind = field.type
        if pa.types.is_timestamp(kind) and kind.tz is not None or pa.types.is_date32(kind):
            fields.append(pa.field(field.name, pa.string()))
        elif (pa.types.is_integer(kind) and pa.types.is_signed_integer(kind)) or kind in (
            pa.float64(),
            pa.bool_(),
            pa.string(),
        ):
            fields.append(pa.field(field.name, kind))
        else:
            return None
    return pa.schema(fields)


@dataclass(frozen=True)
class BulkDecoded:
    """The payload columns of a batch (``n`` rows each), and the records the per-record
    decoder must decide (their rows in ``columns`` are not to be used)."""

    columns: tuple[pa.Array, ...]
    unsure: np.ndarray
    """Boolean mask of length ``n``."""


def decode_json_values(
    values: Sequence[bytes | None], payload: pa.Schema, parse: pa.Schema, required: Sequence[bool]
) -> BulkDecoded:
    """Decode ``values`` into ``payload``'s columns (``parse``: its
    :func:`bulk_parse_schema`; ``required``: which fields are NOT NULL)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    raw = pa.array(values, pa.binary())
    candidate = pc.fill_null(pc.and_(pc.starts_with(raw, "{"), pc.ends_with(raw, "}")), False)
    chosen = np.flatnonzero(candidate.to_numpy(zero_copy_only=False))
    chosen_values = values if len(chosen) == n else [values[i] for i in chosen.tolist()]
    blocks: list[tuple[int, int, pa.Table | None]] = []
    _parse_blocks(chosen_values, 0, len(chosen_values), parse, blocks)
    parsed_tables = [table for _, _, table in blocks if table is not None]
    position = np.full(n, -1, dtype=np.int64)  # row of `parsed` holding record i, or -1
    base = 0
    for low, high, table in blocks:
        if table is not None:
            position[chosen[low:high]] = np.arange(base, base + high - low)
            base += high - low
    unsure = position < 0
    parsed = pa.concat_tables(parsed_tables) if parsed_tables else parse.empty_table()
    if base == n and np.all(position == np.arange(n)):
        columns = [parsed.column(i).combine_chunks() for i in range(len(parse))]
    else:
        take = pa.array(position, mask=unsure)
        columns = [pc.take(parsed.column(i), take).combine_chunks() for i in range(len(parse))]
    decoded = []
    for field, column, not_null in zip(payload, columns, required, strict=True):
        column, doubtful = _typed(column, field.type)
        if not_null:
            doubtful = pc.or_(doubtful, pc.is_null(column))
        unsure |= doubtful.to_numpy(zero_copy_only=False)
        decoded.append(column)
    return BulkDecoded(columns=tuple(decoded), unsure=unsure)


def _parse_blocks(
    values: Sequence[bytes | None],
    low: int,
    high: int,
    schema: pa.Schema,
    out: list[tuple[int, int, pa.Table | None]],
) -> None:
    """Parse ``values[low:high]``, halving a refused block; appends (low, high, table or
    None) in order."""
    if low == high:
        return
    table = _parse(values[low:high], schema)
    if table is not None or high - low <= _SMALLEST_BLOCK:
        out.append((low, high, table))
        return
    middle = (low + high) // 2
    _parse_blocks(values, low, middle, schema, out)
    _parse_blocks(values, middle, high, schema, out)


def _parse(values: Sequence[bytes | None], schema: pa.Schema) -> pa.Table | None:
    """One row per value, or None where Arrow refuses the block."""
    import pyarrow as pa
    import pyarrow.json as pj

    joined = b"\n".join(values)  # type: ignore[arg-type]  # only `{...}` values get here
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if b"\r" in joined or joined.count(b"\n") != len(values) - 1:
        return None
    try:
        table = pj.read_json(
            io.BytesIO(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(joined) + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None
    return table if table.num_rows == len(values) else None


def _typed(column: pa.Array, kind: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``column`` (as parsed) in the payload type, and which of its values are unsure
    (a boolean array without nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(kind):
        zoned = pc.fill_null(pc.match_substring_regex(column, _ZONED), False)
        naive = pc.fill_null(pc.match_substring_regex(column, _NAIVE), False)
        try:
            at_zone = pc.cast(pc.if_else(zoned, column, "1970-01-01T00:00:00Z"), kind)
            at_utc = pc.cast(
                pc.cast(pc.if_else(naive, column, "1970-01-01T00:00:00"), pa.timestamp(kind.unit)),
                kind,
            )
        except pa.ArrowInvalid:  # a day that does not exist (Feb 30): leave it all to Python
            return pa.nulls(len(column), kind), pc.is_valid(column)
        typed = pc.if_else(zoned, at_zone, pc.if_else(naive, at_utc, pa.scalar(None, kind)))
        return typed, pc.and_(pc.is_valid(column), pc.invert(pc.or_(zoned, naive)))
    if pa.types.is_date32(kind):
        day = pc.fill_null(pc.match_substring_regex(column, _DAY), False)
        try:
            dates = pc.cast(pc.if_else(day, column, "1970-01-01"), kind)
        except pa.ArrowInvalid:
            return pa.nulls(len(column), kind), pc.is_valid(column)
        typed = pc.if_else(day, dates, pa.scalar(None, kind))
        return typed, pc.and_(pc.is_valid(column), pc.invert(day))
    if kind == pa.float64():
        return column, pc.fill_null(pc.invert(pc.is_finite(column)), False)
    return column, pa.repeat(False, len(column))


__all__ = [
    "BulkDecoded",
    "bulk_parse_schema",
    "decode_json_values",
]
