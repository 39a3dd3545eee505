"""Pins, tags, expired epochs and retention policies."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from catalog import (
    CatalogError,
    EpochExpiredError,
    ForeignEpochError,
    InvalidNameError,
    InvalidRetentionPolicyError,
    PinExpiredError,
    TableSpec,
    TagExistsError,
    UnknownEpochError,
    UnknownPipelineError,
    UnknownTagError,
)

SHORT_TTL = 0.2
RULE = "tier 'hourly for 7d' keeps one cut per hour"


def epochs(catalog, n, **kw):
    return [catalog.open_epoch(**kw).id for _ in range(n)]


def test_a_pin_protects_its_epoch_from_expiry(catalog):
    e1, e2, e3 = epochs(catalog, 3)
    pin = catalog.create_pin(
        pipeline="default", epoch=e2, versions={"raw": 4}, holder="reader-1", ttl_seconds=60
    )
    assert len(pin.id) == 32 and pin.versions == {"raw": 4} and pin.epoch == e2
    assert pin.expires_at - pin.created_at == timedelta(seconds=60)
    assert catalog.active_pins() == [pin]
    assert catalog.expire_epochs([e1, e2, e3], rule=RULE) == [e1, e3]
    assert catalog.expiry_of(e2) is None
    expiry = catalog.expiry_of(e1)
    assert (expiry.epoch, expiry.pipeline, expiry.rule) == (e1, "default", RULE)
    assert [x.epoch for x in catalog.expired_epochs()] == [e1, e3]
    catalog.release_pin(pin)
    catalog.release_pin(pin)  # already gone: no-op
    assert catalog.active_pins() == []
    assert catalog.expire_epochs([e1, e2], rule="daily") == [e2]
    assert catalog.expiry_of(e1).rule == RULE  # an expiry is recorded once


def test_expiry_is_decided_by_the_one_retention_rule(catalog, monkeypatch):
    import consistency.retention
    from catalog.retention import sql as retention_store

    calls = []

    def spy(epochs, *, pinned, tagged):
        calls.append((sorted(epochs), set(pinned), set(tagged)))
        return consistency.retention.expirable(epochs, pinned=pinned, tagged=tagged)

    monkeypatch.setattr(retention_store, "expirable", spy)
    e1, e2, e3 = epochs(catalog, 3)
    catalog.create_pin(pipeline=None, epoch=e1, versions={}, holder="r", ttl_seconds=60)
    catalog.create_tag("release", epoch=e2, versions={}, pipeline=None)
    assert catalog.expire_epochs([e1, e2, e3], rule=RULE) == [e3]
    assert catalog.expire_epochs([e1, e3], rule=RULE) == []
    assert calls == [([e1, e2, e3], {e1}, {e2}), ([e1], {e1}, set())]


def test_pinning_or_tagging_an_expired_epoch_names_the_epoch_and_the_rule(catalog):
    (e1,) = epochs(catalog, 1)
    catalog.expire_epochs([e1], rule=RULE)
    with pytest.raises(EpochExpiredError) as raised:
        catalog.create_pin(pipeline=None, epoch=e1, versions={}, holder="r", ttl_seconds=60)
    error = raised.value
    assert (error.epoch, error.rule) == (e1, RULE) and error.expired_at is not None
    assert f"epoch {e1}" in str(error) and RULE in str(error)
    with pytest.raises(EpochExpiredError):
        catalog.create_tag("release_1", epoch=e1, versions={}, pipeline=None)
    assert catalog.active_pins() == [] and catalog.list_tags() == []
    with pytest.raises(UnknownEpochError):
        catalog.create_pin(pipeline=None, epoch=99, versions={}, holder="r", ttl_seconds=60)


def test_a_pin_without_an_epoch_protects_versions_only(catalog):
    pin = catalog.create_pin(
        pipeline=None, epoch=None, versions={"raw": 7, "counts": 3}, holder="rc", ttl_seconds=60
    )
    assert pin.epoch is None and catalog.active_pins()[0].versions == {"raw": 7, "counts": 3}


def test_expired_pins_are_not_active_and_cannot_be_renewed(catalog):
    (e1,) = epochs(catalog, 1)
    short = catalog.create_pin(
        pipeline=None, epoch=e1, versions={}, holder="r", ttl_seconds=SHORT_TTL
    )
    long = catalog.create_pin(pipeline=None, epoch=None, versions={}, holder="r", ttl_seconds=60)
    renewed = catalog.renew_pin(long, ttl_seconds=120)
    assert renewed.expires_at > long.expires_at and renewed.id == long.id
    assert catalog.active_pins(now=short.expires_at - timedelta(seconds=0.01))[0] == short
    time.sleep(SHORT_TTL + 0.1)
    assert catalog.active_pins() == [renewed]
    with pytest.raises(PinExpiredError) as raised:
        catalog.renew_pin(short, ttl_seconds=60)
    assert raised.value.pin_id == short.id and raised.value.expired_at == short.expires_at
    # An expired pin no longer protects its epoch.
    assert catalog.expire_epochs([e1], rule=RULE) == [e1]
    catalog.release_pin(renewed)
    with pytest.raises(PinExpiredError, match="released"):
        catalog.renew_pin(renewed, ttl_seconds=60)
    with pytest.raises(CatalogError, match="positive"):
        catalog.create_pin(pipeline=None, epoch=None, versions={}, holder="r", ttl_seconds=0)


def test_expired_pins_are_removed_live_ones_kept(catalog):
    (e1,) = epochs(catalog, 1)
    # Long enough that the first sweep certainly comes before it expires, however slow.
    ttl = 3.0
    dead = catalog.create_pin(
        pipeline=None, epoch=e1, versions={"t": 1}, holder="r", ttl_seconds=ttl
    )
    live = catalog.create_pin(pipeline=None, epoch=e1, versions={}, holder="r", ttl_seconds=60)
    assert catalog.remove_expired_pins() == 0
    time.sleep(ttl + 0.1)
    assert catalog.remove_expired_pins(dry_run=True) == 1
    assert catalog.remove_expired_pins() == 1
    assert catalog.remove_expired_pins() == 0
    assert catalog.active_pins() == [live]
    with pytest.raises(PinExpiredError):
        catalog.renew_pin(dead, ttl_seconds=60)
    assert catalog.renew_pin(live, ttl_seconds=60).id == live.id


def test_tags_live_until_deleted_and_protect_their_epoch(catalog):
    e1, e2 = epochs(catalog, 2)
    tag = catalog.create_tag("month_end", epoch=e1, versions={"raw": 1}, pipeline="default")
    assert (tag.name, tag.epoch, tag.pipeline, tag.versions) == (
        "month_end",
        e1,
        "default",
        {"raw": 1},
    )
    assert tag.created_at is not None and catalog.get_tag("month_end") == tag
    with pytest.raises(TagExistsError) as raised:
        catalog.create_tag("month_end", epoch=e2, versions={}, pipeline=None)
    assert (raised.value.name, raised.value.epoch) == ("month_end", e1)
    catalog.create_tag("audit", epoch=e2, versions={}, pipeline=None)
    assert [t.name for t in catalog.list_tags()] == ["audit", "month_end"]
    assert catalog.expire_epochs([e1, e2], rule=RULE) == []
    catalog.delete_tag("month_end")
    with pytest.raises(UnknownTagError):
        catalog.get_tag("month_end")
    with pytest.raises(UnknownTagError):
        catalog.delete_tag("month_end")
    assert catalog.expire_epochs([e1, e2], rule=RULE) == [e1]
    for bad in ("../x", "-x", "a b", "x/y", "a..b", "x" * 129):
        with pytest.raises(InvalidNameError) as invalid:
            catalog.create_tag(bad, epoch=e2, versions={}, pipeline=None)
        assert invalid.value.kind == "tag"


def test_tag_names_may_hold_hyphens_and_dots(catalog):
    (e1,) = epochs(catalog, 1)
    for name in ("before-migration", "v1.2", "2026-01-05"):
        catalog.create_tag(name, epoch=e1, versions={}, pipeline=None)
        assert catalog.get_tag(name).name == name


def test_expiry_checks_epochs_and_pipelines(catalog):
    catalog.register_table(TableSpec("orders", "/w/orders", kind="root", pipeline="sales"))
    (mine,) = epochs(catalog, 1)
    (theirs,) = epochs(catalog, 1, pipeline="sales")
    assert catalog.expire_epochs([], rule=RULE) == []
    with pytest.raises(UnknownEpochError):
        catalog.expire_epochs([mine, 99], rule=RULE)
    with pytest.raises(ForeignEpochError) as raised:
        catalog.expire_epochs([mine, theirs], rule=RULE, pipeline="sales")
    assert raised.value.epoch == mine
    assert catalog.expired_epochs() == []  # nothing half done
    assert catalog.expire_epochs([theirs], rule=RULE, pipeline="sales") == [theirs]
    assert catalog.expire_epochs([mine], rule="daily") == [mine]
    assert [x.epoch for x in catalog.expired_epochs(pipeline="sales")] == [theirs]
    assert [x.pipeline for x in catalog.expired_epochs()] == ["default", "sales"]


def test_retention_policies_fall_back_to_the_catalog_default(catalog):
    catalog.register_table(TableSpec("orders", "/w/orders", kind="root", pipeline="sales"))
    assert catalog.retention_policy(None) is None
    assert catalog.retention_policy("sales") is None
    default = json.dumps({"tiers": [{"every": "epoch", "for": "1d"}]})
    catalog.set_retention_policy(None, default)
    assert catalog.retention_policy("sales") == default
    assert catalog.retention_policy("default") == default
    own = json.dumps({"tiers": [{"every": "1h", "for": "7d"}]})
    catalog.set_retention_policy("sales", own)
    assert catalog.retention_policy("sales") == own
    assert catalog.retention_policy(None) == default
    assert {p.name: p.retention_policy for p in catalog.list_pipelines()} == {
        "default": None,
        "sales": own,
    }
    catalog.set_retention_policy("sales", None)
    assert catalog.retention_policy("sales") == default
    catalog.set_retention_policy(None, None)
    assert catalog.retention_policy("sales") is None
    with pytest.raises(InvalidRetentionPolicyError):
        catalog.set_retention_policy("sales", "{not json")
    with pytest.raises(UnknownPipelineError):
        catalog.set_retention_policy("nowhere", default)
    with pytest.raises(UnknownPipelineError):
        catalog.retention_policy("nowhere")
