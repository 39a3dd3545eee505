"""Quality gates inside a running pipeline: write, audit, then publish."""

from __future__ import annotations

import great_expectations as gx
import pytest

from catalog import EpochState
from consistency import NoCommonEpochError
from etl import Pipeline, Runner, snapshot
from etl.quality import ExpectationError, QualityGate
from tests.etl.engine.test_jobs import Env, orders_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.quality]

GOOD = [{"id": 1, "customer": "ann", "amount": 5.0}, {"id": 2, "customer": "bob", "amount": 7.0}]
BAD = [{"id": 3, "customer": "ann", "amount": -1.0}, {"id": 4, "customer": None, "amount": 3.0}]


def shop(tmp_path, *, policy: str, expectations=None) -> Pipeline:
    pipeline = orders_pipeline(tmp_path / "incoming")
    pipeline.sql(
        "per_customer",
        output="per_customer",
        query="SELECT customer, count(*) AS n FROM orders GROUP BY customer",
        inputs=["orders"],
        mode="overwrite",
    )
    pipeline.expect(
        QualityGate(
            "orders",
            expectations
            or [
                gx.expectations.ExpectColumnValuesToNotBeNull(column="customer"),
                gx.expectations.ExpectColumnValuesToBeBetween(column="amount", min_value=0),
            ],
            policy=policy,
        )
    )
    return pipeline


def test_block_holds_the_chain_and_repeatable_read_at_the_last_good_epoch(tmp_path, spark):
    env = Env(tmp_path, spark, shop(tmp_path, policy="block"))
    env.drop(GOOD)
    assert env.runner.run_once().ok
    env.drop(BAD)
    result = env.runner.run_once()
    assert result.exit_code == 4 and [b.job for b in result.blocked] == ["ingest_orders"]
    assert "failed" in result.blocked[0].blocked_reason

    assert env.catalog.table_epoch("orders", 2).state is EpochState.PROCESSED
    assert env.catalog.latest_written(["per_customer"])["per_customer"].epoch == 1
    (check,) = env.catalog.validations("orders", epoch=2)
    assert not check.success and check.policy == "block"

    rr = snapshot(env.catalog, ["orders", "per_customer"], "repeatable-read", spark=spark)
    assert rr.epoch == 1 and rr.table("orders").count() == 2
    assert (
        snapshot(env.catalog, ["orders"], "read-uncommitted", spark=spark).table("orders").count()
        == 4
    )
    assert (
        snapshot(env.catalog, ["orders"], "read-committed", spark=spark).table("orders").count()
        == 2
    )

    # Still blocked on a rerun (validated again, not written again); then the expectation
    # is fixed and the pipeline moves on.
    rerun = env.runner.run_once()
    assert [s.action for s in rerun.recovered if s.table == "orders"] == ["blocked"]
    assert env.catalog.table_epoch("orders", 2).state is EpochState.PROCESSED
    assert (
        snapshot(env.catalog, ["orders"], "read-uncommitted", spark=spark).table("orders").count()
        == 4
    )
    relaxed = shop(
        tmp_path,
        policy="block",
        expectations=[
            gx.expectations.ExpectColumnValuesToBeBetween(column="amount", min_value=-10)
        ],
    )
    fixed = Runner(relaxed, catalog=env.catalog, warehouse=env.runner.warehouse, spark=spark)
    result = fixed.run_once()
    assert result.ok and not result.blocked
    assert env.catalog.table_epoch("orders", 2).state is EpochState.WRITTEN
    assert snapshot(env.catalog, ["per_customer"], "repeatable-read", spark=spark).epoch == 4


def test_quarantine_accounts_for_every_row(tmp_path, spark):
    env = Env(tmp_path, spark, shop(tmp_path, policy="quarantine"))
    env.drop(GOOD + BAD)
    result = env.runner.run_once()
    assert result.ok and not result.blocked
    (ingest,) = [b for b in result.batches if b.job == "ingest_orders"]
    assert ingest.quarantined == 2
    assert env.rows("orders", "id") == [(1,), (2,)]
    quarantined = snapshot(env.catalog, ["orders_quarantine"], "repeatable-read", spark=spark)
    rows = {
        r["id"]: sorted(r["_failed_expectations"])
        for r in quarantined.table("orders_quarantine").collect()
    }
    assert set(rows) == {3, 4}
    assert any("amount" in label for label in rows[3]) and any(
        "customer" in label for label in rows[4]
    )
    commit = env.catalog.latest_commit()
    assert commit is not None and commit.epoch == 1 and "orders_quarantine" in commit.versions
    assert env.rows("per_customer", "customer", "n") == [("ann", 1), ("bob", 1)]


def test_warn_seals_and_records_the_failure(tmp_path, spark):
    env = Env(tmp_path, spark, shop(tmp_path, policy="warn"))
    env.drop(GOOD + BAD)
    result = env.runner.run_once()
    assert result.ok and not result.blocked
    assert env.rows("orders", "id") == [(1,), (2,), (3,), (4,)]
    (check,) = env.catalog.validations("orders", epoch=1)
    assert not check.success and check.policy == "warn"


def test_an_expectation_that_raises_names_table_and_expectation(tmp_path, spark):
    pipeline = shop(
        tmp_path,
        policy="block",
        expectations=[gx.expectations.ExpectColumnValuesToNotBeNull(column="no_such_column")],
    )
    env = Env(tmp_path, spark, pipeline)
    env.drop(GOOD)
    (failure,) = env.runner.run_once().failures
    assert isinstance(failure.exception, ExpectationError)
    assert "orders" in failure.error and "no_such_column" in failure.error
    assert env.catalog.table_epoch("orders", 1).state is EpochState.PROCESSED


def test_a_table_never_sealed_reads_empty_below_read_uncommitted(tmp_path, spark):
    env = Env(tmp_path, spark, shop(tmp_path, policy="block"))
    env.drop(BAD)
    assert [b.job for b in env.runner.run_once().blocked] == ["ingest_orders"]

    committed = snapshot(env.catalog, ["orders"], "read-committed", spark=spark)
    assert committed.versions["orders"] is None
    assert committed.table("orders").count() == 0
    assert committed.sql("SELECT count(*) AS n FROM orders").first()["n"] == 0
    assert committed.arrow("orders").num_rows == 0
    assert list(committed.pandas("orders", columns=["id"]).columns) == ["id"]
    dirty = snapshot(env.catalog, ["orders"], "read-uncommitted", spark=spark)
    assert dirty.table("orders").count() == 2 and dirty.arrow("orders").num_rows == 2
    with pytest.raises(NoCommonEpochError):
        snapshot(env.catalog, ["orders"], "repeatable-read", spark=spark)
