"""``SnapshotReader.query_rows`` (what ``etl sql`` on DuckDB prints, without Arrow) gives
the values ``query``'s Arrow table gives, of the same Python types, for every Delta type
and for results of types DuckDB gives Python differently (MAP, INTERVAL, 128-bit sums);
and ``etl sql`` prints the same in every format."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from etl.cli.app import Format
from etl.cli.render import print_query
from etl.reader import QueryRows, snapshot

UTC = dt.UTC


def _typed() -> pa.Table:
    point = pa.struct([("x", pa.int32()), ("tags", pa.list_(pa.string()))])
    return pa.table(
        {
            "b": pa.array([True, None, False]),
            "i8": pa.array([1, None, -3], pa.int8()),
            "i16": pa.array([300, 2, None], pa.int16()),
            "i32": pa.array([70000, 2, 3], pa.int32()),
            "i64": pa.array([2**40, None, -(2**40)], pa.int64()),
            "f32": pa.array([0.1, None, float("nan")], pa.float32()),
            "f64": pa.array([1 / 3, float("inf"), None], pa.float64()),
            "dec": pa.array([Decimal("1.250"), None, Decimal("-99999.999")], pa.decimal128(8, 3)),
            "s": pa.array(["a,b", 'q"uote', None]),
            "bin": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "d": pa.array([dt.date(2024, 2, 29), None, dt.date(1, 1, 1)], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC), None,
                 dt.datetime(1970, 1, 1, tzinfo=UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array([dt.datetime(2024, 1, 1, 10, 0), None, None], pa.timestamp("us")),
            "arr": pa.array([[1, None, 3], None, []], pa.list_(pa.int64())),
            "pt": pa.array([{"x": 1, "tags": ["a"]}, None, {"x": None, "tags": None}], point),
            "pts": pa.array([[{"x": 2, "tags": []}], [], None], pa.list_(point)),
            "m": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )  # fmt: skip


QUERIES = (
    "SELECT * FROM typed ORDER BY i32",
    "SELECT * FROM typed t1 JOIN typed t2 USING (i32) ORDER BY i32",  # names twice
    "SELECT sum(i64) AS s, sum(i32), count(*), avg(dec), max(ts), min(d) FROM typed",
    "SELECT m, i32 FROM typed ORDER BY i32",  # MAP: through Arrow
    "SELECT arr, m['k'] AS k FROM typed ORDER BY i32",
    "SELECT ts - ts AS gap, i32 FROM typed ORDER BY i32",  # an INTERVAL
    "SELECT named_struct('a', sum(i32), 'b', collect_list(s)) AS agg FROM typed",
    "SELECT NULL AS nothing, 'x' AS s FROM typed WHERE false",
)


@pytest.fixture
def typed(tmp_path):
    catalog = load_catalog(None, warehouse=tmp_path)
    location = str(tmp_path / "typed")
    catalog.register_table(TableSpec("typed", location, kind="root"))
    catalog.register_job(JobSpec("ingest", output="typed", source="feed"))
    lease = catalog.acquire_lease("ingest", "test", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    write_deltalake(location, _typed())
    catalog.seal("ingest", lease.generation, [SealRequest("typed", epoch, 0, rows=3)])
    yield catalog
    catalog.close()


def _typed_values(result: QueryRows) -> list[list[tuple[type, object]]]:
    def pair(value):
        if isinstance(value, dict):
            return dict, {k: pair(v) for k, v in value.items()}
        if isinstance(value, list):
            return list, [pair(v) for v in value]
        if isinstance(value, float) and value != value:
            return float, "nan"
        return type(value), value

    return [[pair(v) for v in row] for row in result.rows]


@pytest.mark.parametrize("query", QUERIES)
def test_query_rows_are_the_arrow_tables_values_and_print_the_same(typed, query, capsys):
    with snapshot(typed, query) as snap:
        rows = snap.query_rows(query)
        arrow = QueryRows.from_arrow(snap.query(query))
        limited = snap.query_rows(query, limit=1)
    assert rows.columns == arrow.columns
    assert _typed_values(rows) == _typed_values(arrow)
    assert limited.rows == rows.rows[:1]
    for fmt in Format:
        print_query(rows, fmt)
        printed = capsys.readouterr().out
        print_query(arrow, fmt)
        assert printed == capsys.readouterr().out, fmt


def test_the_sums_of_integers_are_decimals_as_in_arrow(typed):
    """DuckDB sums integers into HUGEINT, which Arrow reads as DECIMAL(38, 0)."""
    with snapshot(typed, "typed") as snap:
        (row,) = snap.query_rows("SELECT sum(i32) AS s, count(*) AS n FROM typed").rows
    assert row == (Decimal(70005), 3)
    assert [type(v) for v in row] == [Decimal, int]
    assert json.loads(json.dumps(str(row[0]))) == "70005"
