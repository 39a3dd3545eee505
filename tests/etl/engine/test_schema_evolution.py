"""Schema evolution in place (issue 26, item 1): a new nullable column of a job's output
evolves its table in that epoch's commit, on every commit path (append, overwrite, the
merge strategies); versions before it keep their schema; Spark, DuckDB, Polars and delta-rs
read every version. A change Delta cannot make in place is refused, naming it, and leaves
the table as it was."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.pandas.types import to_arrow_schema

from etl.delta import (
    CommitRequest,
    Fence,
    claim_table,
    commit_files,
    merge_files,
    read_table,
    write_files,
)
from etl.errors import SchemaMismatchError
from etl.reader import delta_extension_path

pytestmark = pytest.mark.spark

FENCE = Fence("evolving", generation=1)
OLD = "k long, v string, _epoch long"
NEW = "k long, v string, note string, _epoch long"


def _commit(location: str, frame, *, mode: str = "append", merged=None) -> int:
    files = merged.adds if merged is not None else write_files(frame, location, file_prefix="e")
    return commit_files(
        location,
        CommitRequest(
            files,
            schema=to_arrow_schema(frame.schema, timezone="UTC"),
            mode=mode,
            fence=FENCE,
            metadata={},
            removes=merged.removes if merged is not None else (),
            deletes=merged.deletes if merged is not None else (),
            deletion_vectors=True,
        ),
    )


def _every_reader(spark, location: str, version: int) -> dict[str, tuple[list[str], list]]:
    """(columns, rows as dicts) of one version, as each engine reads it."""
    frame = read_table(spark, location, version=version)
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{delta_extension_path()}'")
    connection.execute(f"ATTACH 'file://{location}' AS evolving (TYPE delta)")
    tables = {
        "delta-rs": pa.table(DeltaTable(location, version=version).scan().read_all()),
        "polars": pl.read_delta(location, version=version).to_arrow(),
        "duckdb": connection.execute(
            f"SELECT * FROM evolving AT (VERSION => {version})"
        ).fetch_arrow_table(),
    }
    found = {"spark": (frame.columns, [row.asDict() for row in frame.collect()])}
    found.update({engine: (t.column_names, t.to_pylist()) for engine, t in tables.items()})
    return found


def _rows(spark, location: str, version: int) -> list[dict]:
    """The version's rows, after checking every engine reads the same columns and rows."""
    read = _every_reader(spark, location, version)
    columns, rows = read["spark"]
    rows = sorted(rows, key=repr)
    for engine, (other_columns, other_rows) in read.items():
        assert sorted(other_columns) == sorted(columns), (engine, other_columns, columns)
        assert sorted(({k: r[k] for k in columns} for r in other_rows), key=repr) == rows, (
            engine,
            version,
        )
    return rows


@pytest.mark.parametrize(
    ("strategy", "rewrite_all_bytes"),
    [
        ("copy-on-write", None),  # a small table: rewritten whole, in Arrow
        ("copy-on-write", 0),  # the files holding updated keys rewritten by Spark
        ("deletion-vectors", 0),  # merge-on-read
    ],
)
def test_a_merge_adds_a_nullable_column_in_place(spark, tmp_path, strategy, rewrite_all_bytes):
    location = str(tmp_path / "t")
    claim_table(location, fence=FENCE)
    first = spark.createDataFrame([(1, "a", 1), (2, "b", 1)], OLD)
    assert _commit(location, first) == 0
    updates = spark.createDataFrame([(2, "B", "x", 2), (3, "c", None, 2)], NEW)
    merged = merge_files(
        spark,
        location,
        version=0,
        updates=updates,
        keys=["k"],
        file_prefix="m",
        strategy=strategy,
        rewrite_all_bytes=rewrite_all_bytes,
    )
    assert _commit(location, updates, merged=merged) == 1
    assert _rows(spark, location, 0) == [
        {"k": 1, "v": "a", "_epoch": 1},
        {"k": 2, "v": "b", "_epoch": 1},
    ]
    assert _rows(spark, location, 1) == sorted(
        [
            {"k": 1, "v": "a", "_epoch": 1, "note": None},
            {"k": 2, "v": "B", "_epoch": 2, "note": "x"},
            {"k": 3, "v": "c", "_epoch": 2, "note": None},
        ],
        key=repr,
    )
    assert [f.name for f in read_table(spark, location).schema.fields] == [
        "k",
        "v",
        "_epoch",
        "note",
    ]


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_an_append_or_overwrite_adds_a_nullable_column_in_place(spark, tmp_path, mode):
    location = str(tmp_path / "t")
    claim_table(location, fence=FENCE)
    assert _commit(location, spark.createDataFrame([(1, "a", 1)], OLD)) == 0
    # The rows may declare the new column NOT NULL: the table's new column is nullable.
    later = spark.createDataFrame([(2, "b", "x", 2)], NEW).selectExpr(
        "k", "v", "coalesce(note, '') AS note", "_epoch"
    )
    assert _commit(location, later, mode=mode) == 1
    assert _rows(spark, location, 0) == [{"k": 1, "v": "a", "_epoch": 1}]
    expected = [{"k": 2, "v": "b", "_epoch": 2, "note": "x"}]
    if mode == "append":
        expected.append({"k": 1, "v": "a", "_epoch": 1, "note": None})
    assert _rows(spark, location, 1) == sorted(expected, key=repr)
    (note,) = [f for f in DeltaTable(location).schema().fields if f.name == "note"]
    assert note.nullable


@pytest.mark.parametrize(
    ("change", "schema", "named"),
    [
        ("a dropped column", "k long, _epoch long", "missing columns ['v']"),
        ("a changed type", "k long, v long, _epoch long", "v: string -> long"),
        ("a renamed column", "k long, value string, _epoch long", "missing columns ['v']"),
    ],
)
def test_a_change_delta_cannot_make_in_place_is_refused(spark, tmp_path, change, schema, named):
    location = str(tmp_path / "t")
    claim_table(location, fence=FENCE)
    assert _commit(location, spark.createDataFrame([(1, "a", 1)], OLD)) == 0
    row = (2, 7, 2) if "v long" in schema else (2, "b", 2) if "value" in schema else (2, 2)
    with pytest.raises(SchemaMismatchError) as refused:
        _commit(location, spark.createDataFrame([row], schema))
    assert named in str(refused.value), change
    assert "in place" in str(refused.value)
    assert DeltaTable(location).version() == 0  # nothing committed
    assert _rows(spark, location, 0) == [{"k": 1, "v": "a", "_epoch": 1}]


def test_a_job_that_gains_a_column_evolves_its_tables_in_the_next_epoch(tmp_path, spark):
    """Through the runner: the merge job's and the overwrite job's output gain a column in
    epoch 2; a read at epoch 1 has the old schema, at epoch 2 the new one, on Spark and
    DuckDB alike; the catalog records the new schema."""
    import json
    import os

    from catalog import load_catalog
    from etl import FileSource, Pipeline, Runner, snapshot

    incoming, warehouse = tmp_path / "incoming", tmp_path / "wh"
    incoming.mkdir()
    catalog = load_catalog(None, warehouse=warehouse)

    def build(with_note: bool) -> Pipeline:
        note = ", max(customer) AS note" if with_note else ""
        pipeline = Pipeline("evolving")
        pipeline.ingest(
            "ingest",
            source=FileSource("drops", path=incoming, format="json", schema="customer STRING"),
            output="orders",
        )
        pipeline.sql(
            "counts",
            output="counts",
            inputs=["orders"],
            mode="merge",
            keys=["customer"],
            query=f"SELECT customer, count(*) AS n{note} FROM orders GROUP BY customer",
        )
        pipeline.sql(
            "summary",
            output="summary",
            inputs=["counts"],
            mode="overwrite",
            query=f"SELECT count(*) AS customers{note} FROM counts".replace(
                "max(customer)", "max(n)"
            ),
        )
        return pipeline

    def run(pipeline: Pipeline, rows: list[str], n: int) -> None:
        (incoming / f".{n}").write_text("".join(json.dumps({"customer": c}) + "\n" for c in rows))
        os.replace(incoming / f".{n}", incoming / f"{n}.json")
        with Runner(pipeline, catalog=catalog, warehouse=str(warehouse), spark=spark) as runner:
            assert runner.run_once().ok

    run(build(False), ["a", "b", "a"], 1)
    run(build(True), ["b", "c"], 2)
    tables = ["counts", "summary"]
    with snapshot(catalog, tables, as_of_epoch=1, spark=spark) as old:
        assert old.table("counts").columns == ["customer", "n", "_epoch"]
        assert old.duckdb().sql("SELECT * FROM summary").columns == ["customers", "_epoch"]
    with snapshot(catalog, tables, "repeatable-read", spark=spark) as new:
        assert new.epoch == 2
        counts = sorted(tuple(r) for r in new.table("counts").collect())
        assert counts == [("a", 2, 1, None), ("b", 1, 2, "b"), ("c", 1, 2, "c")]
        summary = new.duckdb().sql("SELECT customers, note FROM summary").fetchall()
        assert summary == [(3, 2)]
    recorded = json.loads(catalog.get_table("counts").schema_json)
    assert [f["name"] for f in recorded["fields"]] == ["customer", "n", "_epoch", "note"]


def test_a_widened_type_is_refused_like_any_change_of_type(spark, tmp_path):
    """int to bigint is a widening Delta's typeWidening feature could make in place; it is
    refused, since delta-rs and Polars cannot read such a table (README)."""
    location = str(tmp_path / "t")
    claim_table(location, fence=FENCE)
    assert _commit(location, spark.createDataFrame([(1, 10, 1)], "k long, n int, _epoch long")) == 0
    with pytest.raises(SchemaMismatchError) as refused:
        _commit(location, spark.createDataFrame([(2, 2**40, 2)], "k long, n long, _epoch long"))
    assert "changed types ['n: " in str(refused.value), refused.value
    assert "etl recompute t --downstream" in str(refused.value)
    assert DeltaTable(location).version() == 0
    assert _rows(spark, location, 0) == [{"k": 1, "n": 10, "_epoch": 1}]
