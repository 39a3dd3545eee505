"""Quality gates with Great Expectations on real Spark DataFrames: policies, exact quarantine."""

from __future__ import annotations

import json
import math

import great_expectations as gx
import pytest
from great_expectations import expectations as gxe

from etl.quality import (
    ExpectationError,
    GateDefinitionError,
    QualityGate,
    QuarantineMismatchError,
    rules,
    run_gate,
)

pytestmark = [pytest.mark.quality, pytest.mark.spark]

EPOCH = 7
SCHEMA = "id long, name string, note string, amount double, status string, code string, _epoch long"
# Nulls, NaN, bounds, empty strings and non-ASCII text: the cases where a predicate that only
# looks like GX's would drift from GX's own count.
ROWS = [
    (1, "alice", None, 10.0, "new", "AB-123", EPOCH),
    (2, "bob", None, 0.0, "paid", "CD-456", EPOCH),
    (3, None, None, 100.0, "void", "EF-789", EPOCH),
    (4, "", None, -1.0, None, "ab-123", EPOCH),
    (5, "émile", "late", None, "PAID", None, EPOCH),
    (6, "frank", None, math.nan, "refunded", "AB-12", EPOCH),
    (7, "a-very-long-name", None, 100.5, "new", "XY-9999", EPOCH),
    (8, "   ", None, 50.0, "paid", "", EPOCH),
    (9, "ivy", None, 99.9, "new", "GH-000", EPOCH),
    (10, "jo", None, 1.0, "void", "IJ-111", EPOCH),
]

ROW_LEVEL = [
    gxe.ExpectColumnValuesToNotBeNull(column="name"),
    gxe.ExpectColumnValuesToBeNull(column="note"),
    gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["new", "paid", "void"]),
    gxe.ExpectColumnValuesToNotBeInSet(column="status", value_set=["refunded"]),
    gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=100, strict_min=True),
    gxe.ExpectColumnValuesToMatchRegex(column="code", regex=r"^[A-Z]{2}-\d{3}$"),
    gxe.ExpectColumnValuesToNotMatchRegex(column="name", regex=r"^\s*$"),
    gxe.ExpectColumnValueLengthsToBeBetween(column="name", min_value=1, max_value=10),
    gxe.ExpectColumnValueLengthsToEqual(column="code", value=6),
]


@pytest.fixture(scope="module")
def rows(spark):
    return spark.createDataFrame(ROWS, SCHEMA)


def ids(df) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


def gx_unexpected_ids(spark_rows, expectations) -> list[list[int]]:
    """GX's own list of unexpected row ids per expectation (the reference for exactness)."""
    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_spark(name="reference", persist=False)
        .add_dataframe_asset(name="rows")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": spark_rows})
    )
    suite = gx.ExpectationSuite(
        name="reference",
        expectations=[e.copy(update={"meta": {"position": i}}) for i, e in enumerate(expectations)],
    )
    result = batch.validate(
        suite,
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["id"]},
    )
    found: list[list[int]] = [[] for _ in expectations]
    for one in result.results:
        assert one.exception_info.get("raised_exception") is False, one.exception_info
        position = one.expectation_config.meta["position"]
        found[position] = sorted(entry["id"] for entry in one.result["unexpected_index_list"])
    return found


def test_unknown_policy_is_refused_with_the_valid_ones(spark):
    with pytest.raises(GateDefinitionError) as caught:
        QualityGate("orders", [gxe.ExpectColumnValuesToNotBeNull(column="id")], policy="drop")
    message = str(caught.value)
    assert "orders" in message and "'drop'" in message
    assert "block, quarantine, warn" in message


def test_gate_refuses_an_empty_or_foreign_expectation_list(spark):
    with pytest.raises(GateDefinitionError, match="non-empty"):
        QualityGate("orders", [])
    with pytest.raises(GateDefinitionError, match="not a GX Expectation"):
        QualityGate("orders", ["expect_column_values_to_not_be_null"])


def test_every_gate_has_a_quarantine_table_whatever_its_policy(spark):
    not_null = [gxe.ExpectColumnValuesToNotBeNull(column="id")]
    # Under block it receives rows only when `etl resolve --quarantine` splits them, under
    # warn never: a policy change keeps the job's tables.
    assert QualityGate("orders", not_null, policy="warn").quarantine_table == "orders_quarantine"
    assert QualityGate("orders", not_null).quarantine_table == "orders_quarantine"
    assert QualityGate("orders", not_null, policy="quarantine").quarantine_table == (
        "orders_quarantine"
    )
    named = QualityGate("orders", not_null, policy="quarantine", quarantine="bad_orders")
    assert named.quarantine_table == "bad_orders"
    assert QualityGate("orders", not_null, quarantine="held").quarantine_table == "held"
    with pytest.raises(TypeError):
        QualityGate("orders", not_null, "warn")  # the policy is keyword-only


def test_quarantine_refuses_row_level_expectations_it_cannot_split(spark):
    increasing = gxe.ExpectColumnValuesToBeIncreasing(column="id")
    with pytest.raises(GateDefinitionError) as caught:
        QualityGate("orders", [increasing], policy="quarantine")
    assert caught.value.table == "orders"
    assert "expect_column_values_to_be_increasing" in str(caught.value)
    assert "expect_column_values_to_be_in_set" in str(caught.value)  # lists what is supported
    # The same expectation is fine where no split is needed.
    assert QualityGate("orders", [increasing], policy="block").policy == "block"

    mostly = gxe.ExpectColumnValuesToNotBeNull(column="name", mostly=0.9)
    with pytest.raises(GateDefinitionError, match="mostly"):
        QualityGate("orders", [mostly], policy="quarantine")


def test_block_seals_only_when_every_expectation_passes(spark, rows):
    good = QualityGate(
        "orders",
        [
            gxe.ExpectColumnValuesToNotBeNull(column="id"),
            gxe.ExpectTableRowCountToBeBetween(min_value=1, max_value=100),
        ],
    )
    outcome = run_gate(spark, good, rows, epoch=EPOCH)
    assert outcome.success and outcome.policy == "block"
    assert outcome.failed_expectations == () and outcome.blocking == ()
    assert outcome.passing is None and outcome.quarantined is None

    bad = QualityGate(
        "orders", [*good.expectations, gxe.ExpectColumnValuesToNotBeNull(column="name")]
    )
    outcome = run_gate(spark, bad, rows, epoch=EPOCH)
    assert not outcome.success
    assert outcome.failed_expectations == outcome.blocking
    assert outcome.failed_expectations == ('expect_column_values_to_not_be_null(column="name")',)
    assert [r["success"] for r in outcome.results] == [True, True, False]
    assert outcome.results[2]["unexpected_count"] == 1
    assert outcome.results[1]["observed_value"] == len(ROWS)


def test_warn_seals_a_failing_epoch_and_records_why(spark, rows):
    gate = QualityGate(
        "orders",
        [gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["new"])],
        policy="warn",
    )
    outcome = run_gate(spark, gate, rows, epoch=EPOCH)
    assert outcome.success and outcome.blocking == ()
    assert outcome.failed_expectations == (outcome.results[0]["expectation"],)
    # Nulls are outside the domain of in-set: 9 non-null statuses, 3 of them "new".
    assert outcome.results[0]["unexpected_count"] == 6
    assert outcome.results[0]["missing_count"] == 1


def test_quarantine_splits_exactly_the_rows_gx_counts_unexpected(spark, rows):
    gate = QualityGate(
        "orders",
        [*ROW_LEVEL, gxe.ExpectTableRowCountToBeBetween(min_value=1, max_value=100)],
        policy="quarantine",
    )
    outcome = run_gate(spark, gate, rows, epoch=EPOCH)
    assert outcome.success and outcome.blocking == ()
    assert len(outcome.failed_expectations) == len(ROW_LEVEL)  # every row rule catches something

    passing, quarantined = outcome.passing, outcome.quarantined
    assert passing.columns == rows.columns
    assert quarantined.columns == [*rows.columns, "_failed_expectations"]
    assert dict(quarantined.dtypes)["_failed_expectations"] == "array<string>"

    passing_ids, quarantined_ids = ids(passing), ids(quarantined)
    assert not set(passing_ids) & set(quarantined_ids)
    assert sorted(passing_ids + quarantined_ids) == [r[0] for r in ROWS]
    assert outcome.quarantined_count == len(quarantined_ids)
    assert passing_ids == [1, 9, 10]

    tagged = {r["id"]: (r["_failed_expectations"], r["_epoch"]) for r in quarantined.collect()}
    assert {epoch for _, epoch in tagged.values()} == {EPOCH}
    labels = [r["expectation"] for r in outcome.results[: len(ROW_LEVEL)]]
    reference = gx_unexpected_ids(rows, ROW_LEVEL)
    for label, gx_ids, result in zip(labels, reference, outcome.results, strict=False):
        ours = sorted(i for i, (failed, _) in tagged.items() if label in failed)
        assert ours == gx_ids, label
        assert result["unexpected_count"] == len(gx_ids), label


def test_an_empty_epoch_passes_quarantine_with_nothing_quarantined(spark, rows):
    gate = QualityGate("orders", ROW_LEVEL[:3], policy="quarantine")
    outcome = run_gate(spark, gate, rows.limit(0), epoch=EPOCH)
    assert outcome.success and outcome.quarantined_count == 0
    assert outcome.passing.count() == 0 and outcome.quarantined.count() == 0


def test_quarantine_blocks_on_a_failed_table_level_expectation(spark, rows):
    row_count = gxe.ExpectTableRowCountToBeBetween(min_value=100, max_value=200)
    # Map expectations that are not row-local (uniqueness) or, on Spark, schema-only (type)
    # cannot be split: they pass or fail the epoch as a whole.
    unique = gxe.ExpectColumnValuesToBeUnique(column="status")
    of_type = gxe.ExpectColumnValuesToBeOfType(column="id", type_="StringType")
    gate = QualityGate(
        "orders",
        [gxe.ExpectColumnValuesToNotBeNull(column="name"), row_count, unique, of_type],
        policy="quarantine",
    )
    outcome = run_gate(spark, gate, rows, epoch=EPOCH)
    assert not outcome.success
    assert [r["level"] for r in outcome.results] == ["row", "table", "table", "table"]
    assert outcome.blocking == tuple(r["expectation"] for r in outcome.results[1:])
    assert len(outcome.failed_expectations) == 4
    assert outcome.passing is None and outcome.quarantined is None


def test_a_missing_column_raises_naming_table_and_expectation(spark, rows):
    for policy in ("warn", "block", "quarantine"):
        gate = QualityGate(
            "orders",
            [
                gxe.ExpectColumnValuesToNotBeNull(column="id"),
                gxe.ExpectColumnValuesToNotBeNull(column="no_such_column"),
            ],
            policy=policy,
        )
        with pytest.raises(ExpectationError) as caught:
            run_gate(spark, gate, rows, epoch=EPOCH)
        error = caught.value
        assert error.table == "orders" and error.epoch == EPOCH
        assert error.expectation == 'expect_column_values_to_not_be_null(column="no_such_column")'
        assert "no_such_column" in error.reason and "does not exist" in error.reason


def test_results_are_json_for_the_catalog(spark, rows):
    gate = QualityGate(
        "orders",
        [
            gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0, max_value=100),
            gxe.ExpectTableRowCountToBeBetween(min_value=1, max_value=100),
        ],
    )
    outcome = run_gate(spark, gate, rows, epoch=EPOCH)
    text = json.dumps(outcome.summary())
    assert len(text) < 1000
    stored = json.loads(text)
    assert stored["expectations"] == [dict(r) for r in outcome.results]
    assert stored["blocking"] == list(outcome.blocking) and stored["success"] is False
    between = stored["expectations"][0]
    assert between["type"] == "expect_column_values_to_be_between"
    assert between["kwargs"] == {"column": "amount", "min_value": 0.0, "max_value": 100.0}
    assert between["element_count"] == len(ROWS) and between["unexpected_count"] == 3
    assert between["expectation"] in outcome.blocked_reason and "orders" in outcome.blocked_reason


def test_the_shared_context_does_not_reuse_results_across_epochs(spark, rows):
    gate = QualityGate("orders", [gxe.ExpectColumnValuesToNotBeNull(column="name")])
    first = run_gate(spark, gate, rows, epoch=EPOCH)
    second = run_gate(spark, gate, rows.filter("name IS NOT NULL"), epoch=EPOCH + 1)
    assert not first.success and second.success
    assert second.results[0]["element_count"] == len(ROWS) - 1


def test_a_predicate_that_disagrees_with_gx_stops_the_split(spark, rows, monkeypatch):
    # A deliberately wrong translation: the gate must refuse it rather than mis-quarantine.
    monkeypatch.setitem(
        rules.ROW_RULES,
        "expect_column_values_to_be_in_set",
        rules.RowRule(lambda column, expectation: column.isin(["new"]), skips_nulls=False),
    )
    gate = QualityGate(
        "orders",
        [gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["new", "paid", "void"])],
        policy="quarantine",
    )
    with pytest.raises(QuarantineMismatchError) as caught:
        run_gate(spark, gate, rows, epoch=EPOCH)
    assert caught.value.gx_unexpected == 2 and caught.value.predicate_rows == 6
