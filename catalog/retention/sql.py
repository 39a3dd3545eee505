"""Retention: pins, tags, expired epochs and retention policies. In SQL."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from catalog import rows
from catalog.errors import (
    EpochExpiredError,
    ForeignEpochError,
    InvalidRetentionPolicyError,
    PinExpiredError,
    TagExistsError,
    UnknownEpochError,
    UnknownPipelineError,
    UnknownTagError,
)
from catalog.models import EpochExpiry, Pin, Tag, encode_versions, pin_ttl, validate_tag_name
from catalog.retention.base import RetentionStore
from catalog.rows import json_text
from catalog.schema import (
    META_RETENTION_POLICY,
    epoch_expiries_table,
    epochs_table,
    meta_table,
    pins_table,
    pipelines_table,
    tags_table,
)
from catalog.store import SqlStore
from consistency.records import PIPELINE_DEFAULT
from consistency.retention import expirable
from consistency.timestamps import as_utc


class SqlRetentionStore(SqlStore, RetentionStore):
    """Retention: pins, tags, expired epochs and retention policies."""

    @staticmethod
    def _expiry_row(conn: sa.Connection, epoch: int) -> Any:
        x = epoch_expiries_table
        return conn.execute(sa.select(x).where(x.c.epoch == epoch)).first()

    def _check_not_expired(self, conn: sa.Connection, epoch: int) -> None:
        self._epoch_row(conn, epoch)
        expired = self._expiry_row(conn, epoch)
        if expired is not None:
            raise EpochExpiredError(epoch=epoch, rule=expired.rule, expired_at=expired.expired_at)

    _pin = staticmethod(rows.pin)

    def create_pin(
        self,
        *,
        pipeline: str | None,
        epoch: int | None,
        versions: Mapping[str, int],
        holder: str,
        ttl_seconds: float,
    ) -> Pin:
        pin_ttl(ttl_seconds)
        with self._write() as conn:
            if epoch is not None:
                self._check_not_expired(conn, epoch)
            pin = Pin.new(
                pipeline=pipeline,
                epoch=epoch,
                versions=versions,
                holder=holder,
                ttl_seconds=ttl_seconds,
                now=self._now(conn),
            )
            conn.execute(
                pins_table.insert().values(
                    **{**dataclasses.asdict(pin), "versions": json_text(pin.versions)}
                )
            )
            return pin

    def renew_pin(self, pin: Pin, *, ttl_seconds: float) -> Pin:
        ttl = pin_ttl(ttl_seconds)
        with self._write() as conn:
            row = conn.execute(sa.select(pins_table).where(pins_table.c.id == pin.id)).first()
            now = self._now(conn)
            if row is None or row.expires_at <= now:
                raise PinExpiredError(
                    pin_id=pin.id,
                    holder=pin.holder,
                    expired_at=None if row is None else row.expires_at,
                )
            conn.execute(
                pins_table.update().where(pins_table.c.id == pin.id).values(expires_at=now + ttl)
            )
            return dataclasses.replace(self._pin(row), expires_at=now + ttl)

    def release_pin(self, pin: Pin) -> None:
        with self._write() as conn:
            conn.execute(pins_table.delete().where(pins_table.c.id == pin.id))

    def active_pins(self, *, now: datetime | None = None) -> list[Pin]:
        p = pins_table
        with self._read() as conn:
            at = self._now(conn) if now is None else as_utc(now)
            rows = conn.execute(sa.select(p).where(p.c.expires_at > at).order_by(p.c.created_at))
            return [self._pin(row) for row in rows]

    def remove_expired_pins(self, *, dry_run: bool = False) -> int:
        p = pins_table
        with self._read() if dry_run else self._write() as conn:
            expired = p.c.expires_at <= self._now(conn)
            if dry_run:
                return conn.execute(
                    sa.select(sa.func.count()).select_from(p).where(expired)
                ).scalar_one()
            return conn.execute(p.delete().where(expired)).rowcount

    _tag = staticmethod(rows.tag)

    def create_tag(
        self, name: str, *, epoch: int, versions: Mapping[str, int], pipeline: str | None
    ) -> Tag:
        validate_tag_name(name)
        encoded = encode_versions(versions)
        with self._write() as conn:
            existing = conn.execute(sa.select(tags_table).where(tags_table.c.name == name)).first()
            if existing is not None:
                raise TagExistsError(name=name, epoch=existing.epoch)
            self._check_not_expired(conn, epoch)
            tag = Tag(
                name=name,
                epoch=epoch,
                versions=encoded,
                pipeline=pipeline,
                created_at=self._now(conn),
            )
            conn.execute(
                tags_table.insert().values(
                    name=name,
                    epoch=epoch,
                    pipeline=pipeline,
                    versions=json_text(encoded),
                    created_at=tag.created_at,
                )
            )
            return tag

    def get_tag(self, name: str) -> Tag:
        with self._read() as conn:
            row = conn.execute(sa.select(tags_table).where(tags_table.c.name == name)).first()
        if row is None:
            raise UnknownTagError(name)
        return self._tag(row)

    def list_tags(self) -> list[Tag]:
        with self._read() as conn:
            return [
                self._tag(row)
                for row in conn.execute(sa.select(tags_table).order_by(tags_table.c.name))
            ]

    def delete_tag(self, name: str) -> None:
        with self._write() as conn:
            deleted = conn.execute(tags_table.delete().where(tags_table.c.name == name)).rowcount
        if not deleted:
            raise UnknownTagError(name)

    def expire_epochs(
        self, epochs: Sequence[int], *, rule: str, pipeline: str | None = None
    ) -> list[int]:
        wanted = sorted(set(epochs))
        if not wanted:
            return []
        e, x, p, t = epochs_table, epoch_expiries_table, pins_table, tags_table
        with self._write() as conn:
            now = self._now(conn)
            found = dict(
                conn.execute(sa.select(e.c.id, e.c.pipeline).where(e.c.id.in_(wanted))).all()
            )
            for epoch in wanted:
                if epoch not in found:
                    raise UnknownEpochError(epoch)
                if pipeline is not None and found[epoch] != pipeline:
                    raise ForeignEpochError(
                        epoch=epoch, epoch_pipeline=found[epoch], pipeline=pipeline
                    )
            # Under the write lock: a pin or tag made before this point protects its epoch;
            # one made after it sees the expiry and fails with EpochExpiredError.
            pinned = set(
                conn.execute(
                    sa.select(p.c.epoch).where(p.c.epoch.in_(wanted), p.c.expires_at > now)
                ).scalars()
            )
            tagged = set(conn.execute(sa.select(t.c.epoch).where(t.c.epoch.in_(wanted))).scalars())
            already = set(conn.execute(sa.select(x.c.epoch).where(x.c.epoch.in_(wanted))).scalars())
            expired = expirable(set(wanted) - already, pinned=pinned, tagged=tagged)
            if expired:
                conn.execute(
                    x.insert(), [{"epoch": ep, "rule": rule, "expired_at": now} for ep in expired]
                )
            return expired

    def _expiry_query(self) -> sa.Select[Any]:
        x, e = epoch_expiries_table, epochs_table
        return sa.select(x.c.epoch, e.c.pipeline, x.c.rule, x.c.expired_at).join(
            e, e.c.id == x.c.epoch
        )

    def expiry_of(self, epoch: int) -> EpochExpiry | None:
        with self._read() as conn:
            row = conn.execute(
                self._expiry_query().where(epoch_expiries_table.c.epoch == epoch)
            ).first()
        return None if row is None else EpochExpiry(*row)

    def expired_epochs(self, *, pipeline: str | None = None) -> list[EpochExpiry]:
        query = self._expiry_query().order_by(epoch_expiries_table.c.epoch)
        if pipeline is not None:
            query = query.where(epochs_table.c.pipeline == pipeline)
        with self._read() as conn:
            return [EpochExpiry(*row) for row in conn.execute(query)]

    def set_retention_policy(self, pipeline: str | None, policy_json: str | None) -> None:
        if policy_json is not None:
            try:
                json.loads(policy_json)
            except ValueError as exc:
                raise InvalidRetentionPolicyError(pipeline=pipeline, reason=str(exc)) from None
        m = meta_table
        with self._write() as conn:
            if pipeline is not None:
                self._pipeline_row(conn, pipeline)
                conn.execute(
                    pipelines_table.update()
                    .where(pipelines_table.c.name == pipeline)
                    .values(retention_policy=policy_json)
                )
                return
            conn.execute(m.delete().where(m.c.key == META_RETENTION_POLICY))
            if policy_json is not None:
                conn.execute(m.insert().values(key=META_RETENTION_POLICY, value=policy_json))

    def retention_policy(self, pipeline: str | None) -> str | None:
        m, p = meta_table, pipelines_table
        with self._read(snapshot=True) as conn:
            if pipeline is not None:
                row = conn.execute(sa.select(p).where(p.c.name == pipeline)).first()
                if row is None and pipeline != PIPELINE_DEFAULT:
                    raise UnknownPipelineError(pipeline)
                if row is not None and row.retention_policy is not None:
                    return row.retention_policy
            return conn.execute(
                sa.select(m.c.value).where(m.c.key == META_RETENTION_POLICY)
            ).scalar_one_or_none()
