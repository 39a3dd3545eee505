"""The campaign's scenario generator and seed selection (no Spark)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from etl.faults import FAULT_POINTS, parse_faults
from tests.support.faults import campaign as C
from tests.support.faults import pipelines as P

pytestmark = pytest.mark.faults


def test_generation_is_deterministic_and_specs_parse():
    for seed in range(64):
        scenario = C.generate(seed)
        assert scenario == C.generate(seed)
        for fault in scenario.faults:
            assert fault.job in P.JOBS[scenario.kind]
            assert 1 <= fault.epoch <= P.EPOCHS
            if fault.action != "fail":
                (spec,) = parse_faults(fault.spec)
                assert (spec.action, spec.point, spec.job, spec.epoch, spec.nth) == fault.key()


def test_a_short_campaign_covers_every_pipeline_injection_and_point():
    scenarios = [C.generate(seed) for seed in range(40)]
    pairs = len(P.KINDS) * len(C.INJECTIONS)
    assert {(s.kind, s.injection) for s in scenarios[:pairs]} == {
        (k, i) for k in P.KINDS for i in C.INJECTIONS
    }
    points = {f.point for s in scenarios for f in s.faults if f.action != "fail"}
    assert points == set(FAULT_POINTS)
    assert any(s.open_ahead for s in scenarios) and any(s.late_zombie for s in scenarios)
    assert {s.catalog for s in scenarios} == set(C.CATALOGS)
    assert {s.zombie_first for s in scenarios if s.injection == "zombie_race"} == {True, False}
    assert len({s.schedule for s in scenarios}) > 30


def test_zombie_races_reach_a_create_in_epoch_1():
    """Some zombie races freeze both runners before a commit of epoch 1, where the job's
    tables (output or side output) do not exist yet: the create race of issue 22."""
    races = [C.generate(seed) for seed in range(300)]
    creates = [
        s
        for s in races
        if s.injection == "zombie_race"
        and all(f.point == "before_commit" and f.epoch == 1 for f in s.faults)
    ]
    assert {s.kind for s in creates} == set(P.KINDS)
    assert {s.zombie_first for s in creates} == {True, False}


def test_a_new_fault_point_is_exercised_without_code_changes(monkeypatch):
    monkeypatch.setattr(C, "FAULT_POINTS", (*FAULT_POINTS, "after_fence"))
    points = {f.point for seed in range(80) for f in C.generate(seed).faults}
    assert "after_fence" in points


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("", [0, 1]), ("3", [0, 1, 2]), ("5-7", [5, 6, 7]), ("2,9", [2, 9]), ("7,", [7])],
)
def test_seeds_from_the_environment(monkeypatch, text, seeds):
    monkeypatch.setenv(C.SEEDS_ENV, text)
    assert C.seeds_from_env([0, 1]) == seeds


def test_seeds_draw_their_store_and_an_s3_warehouse_has_a_postgresql_catalog():
    scenarios = [C.generate(seed) for seed in range(40)]
    assert {s.store for s in scenarios} == set(C.STORES)
    assert all(s.catalog == "postgres" for s in scenarios if s.store == "s3")
    forced = C.generate(7, "s3")
    assert (forced.store, forced.catalog) == ("s3", "postgres")
    assert replace(forced, store="local", catalog="sqlite") == C.generate(7, "local")
    with pytest.raises(ValueError, match="store 'gcs'"):
        C.generate(7, "gcs")


@pytest.mark.parametrize(
    ("seeds", "store", "scenarios"),
    [
        ("", "", [(4, "local"), (20, "s3")]),
        ("", "s3", [(4, "s3"), (20, "s3")]),
        ("3,", "", [(3, None)]),
        ("3,", "both", [(3, "local"), (3, "s3")]),
        ("2", "local", [(0, "local"), (1, "local")]),
    ],
)
def test_scenarios_from_the_environment(monkeypatch, seeds, store, scenarios):
    monkeypatch.setenv(C.SEEDS_ENV, seeds)
    monkeypatch.setenv(C.STORE_ENV, store)
    assert C.scenarios_from_env([(4, "local"), (20, "s3")]) == scenarios


def test_an_unknown_store_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv(C.STORE_ENV, "gcs")
    with pytest.raises(ValueError, match="DELTA_BARRIER_FAULT_STORE='gcs'"):
        C.stores_from_env()
