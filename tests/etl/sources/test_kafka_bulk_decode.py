"""Bulk JSON decoding with Arrow decides every record exactly as the per-record decoder.

No broker and no Spark session: a task's batch builder is fed records directly, once
decoding in bulk and once record by record, and the two Arrow batches must be equal
(rows, values, and every reject with its reason and detail).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from etl.sources.kafka.bounds import micros
from etl.sources.kafka.bulk import bulk_parse_schema, decode_json_values
from etl.sources.kafka.task import BatchBuilder, TaskPlan

FLAT = "id long not null, n int, small byte, s string, d double, b boolean, ts timestamp, day date"


@dataclass(frozen=True)
class _Record:
    offset: int
    value: bytes | None
    key: bytes | None = b"k"
    timestamp: int = 1_700_000_000_000
    headers: tuple[tuple[str, bytes], ...] = (("h", b"v"),)


def _plan(schema: str, **options) -> TaskPlan:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from etl.sources.kafka import KafkaSource

    source = KafkaSource(
        "orders",
        topics=["t"],
        bootstrap_servers="127.0.0.1:1",
        schema=StructType.fromJson(_struct_json(schema)),
        include={"offset", "key", "headers"},
        **options,
    )
    return TaskPlan(
        source="orders",
        consumer={},
        pieces=(),
        value_format="json",
        key_format="string",
        payload=source._payload_schema(),
        event_time_column=source.event_time_column,
        late_before_us=options.get("late_before_us"),
        reject_late=source.late_records == "reject",
        arrow_schema=to_arrow_schema(source._union_schema(), timezone="UTC"),
        timeout_s=1.0,
    )


def _struct_json(ddl: str) -> dict:
    kinds = {
        "long": "long",
        "int": "integer",
        "byte": "byte",
        "string": "string",
        "double": "double",
        "boolean": "boolean",
        "timestamp": "timestamp",
        "date": "date",
        "decimal": "decimal(10,2)",
        "float": "float",
        "timestamp_ntz": "timestamp_ntz",
    }
    fields = []
    for part in ddl.split(","):
        name, kind, *rest = part.split()
        fields.append({"name": name, "type": kinds[kind], "nullable": not rest, "metadata": {}})
    return {"type": "struct", "fields": fields}


def _comparable(batch) -> dict[str, list]:
    """The batch's columns, with NaN made equal to itself."""
    return {
        name: [
            "NaN" if isinstance(v, float) and math.isnan(v) else v
            for v in batch.column(name).to_pylist()
        ]
        for name in batch.schema.names
    }


def _batches(plan: TaskPlan, values: list[bytes | None], keys=None):
    out = []
    for bulk in (True, False):
        builder = BatchBuilder(plan, "t", 0, bulk=bulk)
        for offset, value in enumerate(values):
            key = keys[offset] if keys else b"k"
            builder.add(_Record(offset=offset, value=value, key=key))
        out.append(builder.flush())
    return out


TRICKY: list[bytes | None] = [
    b'{"id": 1, "s": "x", "d": 1.5, "b": true, "ts": "2024-05-01T10:00:00+02:00"}',
    b'{"id": 2, "unknown": {"nested": [1, {"deep": NaN}]}, "day": "2024-02-29"}',
    b'{"id": 3, "ts": "2024-05-01T10:00:00Z", "n": -2147483648, "small": -128}',
    b'{"id": 4, "ts": "2024-05-01 10:00:00.5"}',
    b'{"id": 5, "ts": "2024-05-01"}',  # a date where a timestamp is expected
    b'{"id": 6, "ts": "20240501T100000"}',
    b'{"id": 7, "ts": "2024-02-30T00:00:00Z"}',  # no such day
    b'{"id": 8, "ts": "2024-05-01T24:00:00"}',
    b'{"id": 9, "ts": "yesterday"}',
    b'{"id": 10, "day": "2024-02-30"}',
    b'{"id": 11, "day": 5}',
    b'{"id": 12, "day": "20240501"}',
    b'{"id": 13, "d": NaN}',
    b'{"id": 14, "d": Infinity}',
    b'{"id": 15, "d": 1e400}',
    b'{"id": 16, "d": 5}',
    b'{"id": 17, "d": "1.5"}',
    b'{"id": 18, "n": 2147483648}',
    b'{"id": 19, "small": 128}',
    b'{"id": 1.0}',
    b'{"id": 1e2}',
    b'{"id": "4"}',
    b'{"id": true}',
    b'{"id": 9223372036854775808}',
    b'{"id": null}',
    b'{"name": "no id"}',
    b'{"id": 20, "id": 21}',
    b'{"id": 22, "s": 5}',
    b'{"id": 23, "b": 1}',
    b'{"id": 24, "s": "tab\tinside"}',
    b'{"id": 25, "s": "\\ud800"}',
    b'{"id": 26, "s": "\\u00e9\\u0000"}',
    b'{"id": 27, "s": "caf\xc3\xa9"}',
    b'{"id": 28, "s": "\xff"}',
    b"\xff\xfe not utf-8",
    b"{not json",
    b"[1, 2, 3]",
    b"null",
    b"5",
    b'"text"',
    b"",
    b" ",
    b'  {"id": 29}  ',
    b'{"id": 30}{"id": 31}',
    b'{"id": 32} {"id": 33}',
    b'{"id": 34}\n{"id": 35}',
    b'{"id": 36}\r{"id": 37}',
    b'{"id":\n38}',
    b'{"id": 39}null{"id": 40}',
    b'{"id": 41,}',
    b'{"id": 042}',
    None,
    b'{"id": 43, "s": null, "d": null, "ts": null, "day": null}',
    b"{}",
    b'{"id": -0}',
    b'{"id": 44, "ts": "0000-01-01T00:00:00Z"}',
    b'{"id": 45, "ts": "2024-05-01T10:00:00.1234567Z"}',
    b'{"id": 46, "ts": "2024-05-01T10:00:00+01:00:30"}',
    b'{"id": 47, "ts": "2024-05-01T10:00:00+2400"}',
    b'{"id": 48, "d": 12345678901234567890}',
    b'{"id": 49, "d": 0.1, "n": 7}',
    b'{"i\\u0064": 50, "\\u0073": "escaped names"}',
    b'{"id": 51, "s": "\\ud83d\\ude00 a pair"}',
    b'{"id": 52, "b": false, "small": -0, "n": 0, "d": -0.0, "day": "0001-01-01"}',
]


def test_tricky_values_are_decided_alike():
    plan = _plan(FLAT)
    bulk, single = _batches(plan, TRICKY)
    assert bulk.schema == single.schema
    expected = _comparable(single)
    for name, column in _comparable(bulk).items():
        assert column == expected[name], name
    reasons = single.column("_reject_reason").to_pylist()
    assert reasons.count(None) > 20 and reasons.count("schema") > 10  # both kinds occur


def test_a_bad_key_is_a_reject_whatever_the_value():
    plan = _plan(FLAT)
    values = [b'{"id": 1}', b'{"id": 2}', b'{"id": 3}']
    bulk, single = _batches(plan, values, keys=[b"a", b"\xff", None])
    assert _comparable(bulk) == _comparable(single)
    assert bulk.column("_reject_reason").to_pylist() == [None, "decode", None]
    assert bulk.column("_kafka_key").to_pylist() == ["a", None, None]


def test_mutated_values_are_decided_alike():
    plan = _plan(FLAT)
    chance = random.Random(28)
    good = [
        json.dumps(
            {
                "id": i,
                "n": chance.randint(-(2**31), 2**31 - 1),
                "small": chance.randint(-128, 127),
                "s": chance.choice(["a", "é", "x y", "\\", '"q"']),
                "d": chance.uniform(-1e6, 1e6),
                "b": chance.random() < 0.5,
                "ts": datetime(2024, 1, 1, tzinfo=UTC).isoformat(),
                "day": "2024-01-31",
            }
        ).encode()
        for i in range(400)
    ]
    values: list[bytes | None] = []
    for value in good:
        if chance.random() < 0.3:
            at = chance.randrange(len(value))
            value = value[:at] + bytes([chance.randrange(256)]) + value[at + 1 :]
        values.append(value)
    bulk, single = _batches(plan, values)
    assert _comparable(bulk) == _comparable(single)


def test_late_and_missing_event_times_are_decided_alike():
    late_before = datetime(2024, 5, 1, 12, tzinfo=UTC)
    plan = _plan(
        "id long not null, ts timestamp",
        barrier="event_time",
        event_time_column="ts",
        late_records="reject",
    )
    plan = TaskPlan(**{**plan.__dict__, "late_before_us": micros(late_before)})
    values = [
        b'{"id": 1, "ts": "2024-05-01T11:59:59Z"}',
        b'{"id": 2, "ts": "2024-05-01T12:00:00Z"}',
        b'{"id": 3}',
        b'{"id": 4, "ts": "2024-05-01T13:00:00+02:00"}',
    ]
    bulk, single = _batches(plan, values)
    assert _comparable(bulk) == _comparable(single)
    assert bulk.column("_reject_reason").to_pylist() == ["late", None, "schema", "late"]


def test_clean_values_are_all_decoded_in_bulk():
    import pyarrow as pa

    payload = pa.schema(
        [("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("day", pa.date32())]
    )
    values = [
        f'{{"id": {i}, "ts": "2024-05-01T10:00:0{i % 10}+02:00", "day": "2024-05-01"}}'.encode()
        for i in range(1000)
    ]
    parse = bulk_parse_schema(payload)
    assert parse is not None
    decoded = decode_json_values(values, payload, parse, [True, False, False])
    assert not decoded.unsure.any()
    assert decoded.columns[0].to_pylist() == list(range(1000))
    assert decoded.columns[1][3].as_py() == datetime(2024, 5, 1, 8, 0, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    "schema", ["id long, amount decimal", "id long, f float", "id long, t timestamp_ntz"]
)
def test_other_types_keep_the_per_record_decoder(schema):
    plan = _plan(schema)
    assert BatchBuilder(plan, "t", 0).bulk_schema is None
