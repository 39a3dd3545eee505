"""Decoding Kafka records: JSON values validated against a Spark schema, in the Spark tasks.

A value becomes a row of Arrow-ready values, or raises :class:`Invalid` (it does not match
the schema) or :class:`Rejected` (it cannot be decoded at all, or it is late); both make the
record a reject. :class:`Unsupported` is a configuration error: a type JSON cannot carry.
"""

from __future__ import annotations

import base64
import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Literal

from etl.delta.log import EPOCH_COLUMN
from etl.sources.kafka.bounds import MICRO, micros

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

ValueFormat = Literal["json", "string", "bytes"]
KeyFormat = Literal["string", "bytes", "none"]
MetadataColumn = Literal["topic", "partition", "offset", "timestamp", "key", "headers"]
RejectReason = Literal["decode", "schema", "late"]
"""``decode``: not UTF-8 / not JSON / a null (tombstone) JSON value; ``schema``: does not
match the schema; ``late``: event time before the slice's ``late_before`` (policy reject)."""

METADATA_COLUMNS: Mapping[str, str] = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_kafka_key",
    "headers": "_kafka_headers",
}
"""Row column added for each entry of ``include``."""

KAFKA_REJECT_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "reason",
    "detail",
    EPOCH_COLUMN,
)
"""Columns of the rejects DataFrame, in order (``key``/``value`` are the raw bytes)."""

KIND_TAG = "_reject_reason"
"""Column of the tagged task output: the reject reason, null for a row."""
_EPOCH_NAIVE = datetime(1970, 1, 1)


class Invalid(Exception):
    """A JSON value does not match the schema; the message says where and why."""


class Unsupported(Exception):
    """The schema has a type that JSON values cannot be decoded into (a configuration error)."""

    def __init__(self, path: str, data_type: DataType):
        super().__init__(
            f"field {path!r} has type {data_type.simpleString()}, which JSON values cannot be "
            "decoded into"
        )


class Rejected(Exception):
    """The record cannot be decoded (or is late): a reject with this reason."""

    def __init__(self, reason: RejectReason, detail: str):
        super().__init__(detail)
        self.reason: RejectReason = reason
        self.detail = detail


def kind(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )


_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}

_FLOAT_MAX = 3.4028234663852886e38


def converter(data_type: DataType, path: str) -> Callable[[object], object]:
    """A function turning a decoded JSON value into what Arrow takes for ``data_type``.

    Raises :class:`Invalid` (per record) for values that do not fit, and
    :class:`Unsupported` (at configuration) for types JSON cannot carry.
    """
    from pyspark.sql import types as T

    def fail(expected: str, value: object) -> Invalid:
        return Invalid(f"{path}: expected {expected}, got {kind(value)} {str(value)[:40]!r}")

    if isinstance(data_type, T.StringType | T.CharType | T.VarcharType):

        def to_string(value: object) -> object:
            if type(value) is str:
                if value.isascii():
                    return value
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:  # an unpaired surrogate escape (\ud800)
                    raise fail("a string of Unicode characters", value) from None
                return value
            raise fail("a string", value)

        return to_string
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        low, high = _INT_RANGES[data_type.typeName()]

        def to_int(value: object) -> object:
            if type(value) is int and low <= value <= high:
                return value
            raise fail(f"an integer in [{low}, {high}]", value)

        return to_int
    if isinstance(data_type, T.FloatType | T.DoubleType):
        single = isinstance(data_type, T.FloatType)

        def to_float(value: object) -> object:
            kind = type(value)
            if kind is float or kind is int:
                try:
                    number = float(value)  # type: ignore[arg-type]
                except OverflowError:
                    raise fail("a number", value) from None
                if single and math.isfinite(number) and abs(number) > _FLOAT_MAX:
                    raise fail("a number within the float range", value)
                return number
            raise fail("a number", value)

        return to_float
    if isinstance(data_type, T.BooleanType):

        def to_bool(value: object) -> object:
            if type(value) is bool:
                return value
            raise fail("true or false", value)

        return to_bool
    if isinstance(data_type, T.DecimalType):
        precision, scale = data_type.precision, data_type.scale
        context = decimal.Context(prec=precision + 40)
        quantum = decimal.Decimal(1).scaleb(-scale)
        limit = decimal.Decimal(10) ** (precision - scale)

        def to_decimal(value: object) -> object:
            kind = type(value)
            if kind not in (int, float, str):
                raise fail(f"a decimal({precision},{scale})", value)
            try:
                number = context.create_decimal(str(value))
                exact = number.quantize(quantum, context=context)
            except decimal.InvalidOperation:
                raise fail(f"a decimal({precision},{scale})", value) from None
            if not number.is_finite() or exact != number or abs(exact) >= limit:
                raise fail(f"a decimal({precision},{scale}) without rounding", value)
            return exact

        return to_decimal
    if isinstance(data_type, T.TimestampType):

        def to_timestamp(value: object) -> object:
            if type(value) is str:
                try:
                    return micros(datetime.fromisoformat(value))
                except ValueError:
                    pass
            raise fail("an ISO-8601 timestamp string", value)

        return to_timestamp
    if isinstance(data_type, T.TimestampNTZType):

        def to_timestamp_ntz(value: object) -> object:
            if type(value) is str:
                try:
                    parsed = datetime.fromisoformat(value)
                except ValueError:
                    parsed = None
                if parsed is not None and parsed.tzinfo is None:
                    return (parsed - _EPOCH_NAIVE) // MICRO
            raise fail("an ISO-8601 timestamp string without a time zone", value)

        return to_timestamp_ntz
    if isinstance(data_type, T.DateType):

        def to_date(value: object) -> object:
            if type(value) is str:
                try:
                    return date.fromisoformat(value)
                except ValueError:
                    pass
            raise fail("an ISO-8601 date string", value)

        return to_date
    if isinstance(data_type, T.BinaryType):

        def to_binary(value: object) -> object:
            if type(value) is str:
                try:
                    return base64.b64decode(value, validate=True)
                except ValueError:
                    pass
            raise fail("a base64 string", value)

        return to_binary
    if isinstance(data_type, T.ArrayType):
        element = converter(data_type.elementType, f"{path}[]")
        nulls = data_type.containsNull

        def to_list(value: object) -> object:
            if type(value) is not list:
                raise fail("an array", value)
            out: list[object] = []
            for item in value:
                if item is None:
                    if not nulls:
                        raise Invalid(f"{path}: null element in an array of non-null elements")
                    out.append(None)
                else:
                    out.append(element(item))
            return out

        return to_list
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, T.StringType):
            raise Unsupported(path, data_type)
        map_value = converter(data_type.valueType, f"{path}{{}}")
        nulls = data_type.valueContainsNull

        def to_map(value: object) -> object:
            if type(value) is not dict:
                raise fail("an object", value)
            out: list[tuple[str, object]] = []
            for key, item in value.items():
                if item is None:
                    if not nulls:
                        raise Invalid(f"{path}.{key}: null value in a map of non-null values")
                    out.append((key, None))
                else:
                    out.append((key, map_value(item)))
            return out

        return to_map
    if isinstance(data_type, T.StructType):
        members = struct_members(data_type, f"{path}.")
        names = [m[0] for m in members]

        def to_struct(value: object) -> object:
            if type(value) is not dict:
                raise fail("an object", value)
            return dict(zip(names, decode_members(members, value), strict=True))

        return to_struct
    raise Unsupported(path, data_type)


Member = tuple[str, Callable[[object], object], bool, str]
"""A struct field: name, value converter, NOT NULL, path (for messages)."""


def struct_members(struct: StructType, prefix: str) -> list[Member]:
    return [
        (f.name, converter(f.dataType, prefix + f.name), not f.nullable, prefix + f.name)
        for f in struct.fields
    ]


def decode_members(members: Sequence[Member], obj: dict[str, object]) -> list[object]:
    out: list[object] = []
    for name, convert, required, path in members:
        value = obj.get(name)
        if value is None:
            if required:
                raise Invalid(f"{path}: required (NOT NULL) but missing or null")
            out.append(None)
        else:
            out.append(convert(value))
    return out


__all__ = [
    "KAFKA_REJECT_COLUMNS",
    "KIND_TAG",
    "METADATA_COLUMNS",
    "Invalid",
    "KeyFormat",
    "Member",
    "MetadataColumn",
    "RejectReason",
    "Rejected",
    "Unsupported",
    "ValueFormat",
    "converter",
    "decode_members",
    "kind",
    "struct_members",
]
