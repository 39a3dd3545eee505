"""Schema versions: a fresh catalog is current, another version is refused until upgraded."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from catalog import SCHEMA_VERSION, CatalogError, SchemaVersionError, SqlCatalog, load_catalog
from catalog import migrations as catalog_migrations
from catalog import schema as catalog_schema


def stored_version(url: str) -> int:
    catalog = SqlCatalog.open_for_upgrade(url)
    try:
        with catalog._engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(catalog_schema.meta_table.c.value).where(
                        catalog_schema.meta_table.c.key == "schema_version"
                    )
                ).scalar_one()
            )
    finally:
        catalog.close()


def fake_version(url: str, version: int) -> None:
    catalog = SqlCatalog.open_for_upgrade(url)
    try:
        with catalog._engine.begin() as conn:
            conn.execute(
                catalog_schema.meta_table.update()
                .where(catalog_schema.meta_table.c.key == "schema_version")
                .values(value=str(version))
            )
    finally:
        catalog.close()


def test_a_fresh_catalog_is_at_the_current_version(shared_catalog_url):
    load_catalog(shared_catalog_url).close()
    assert stored_version(shared_catalog_url) == SCHEMA_VERSION
    reopened = load_catalog(shared_catalog_url)
    reopened.open_epoch()
    reopened.close()
    assert load_catalog(shared_catalog_url).latest_epoch().id == 1


def test_an_older_catalog_is_refused_until_upgraded(shared_catalog_url, monkeypatch):
    catalog = load_catalog(shared_catalog_url)
    catalog.open_epoch()
    catalog.close()
    fake_version(shared_catalog_url, SCHEMA_VERSION - 1)

    with pytest.raises(SchemaVersionError) as raised:
        load_catalog(shared_catalog_url)
    assert (raised.value.found, raised.value.expected) == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
    assert "upgrade" in str(raised.value)

    applied = []

    def migration(conn: sa.Connection) -> None:
        applied.append(SCHEMA_VERSION)
        conn.execute(sa.text("CREATE TABLE migration_probe (id INTEGER)"))

    monkeypatch.setitem(catalog_migrations.MIGRATIONS, SCHEMA_VERSION, migration)
    old = SqlCatalog.open_for_upgrade(shared_catalog_url)
    assert old.upgrade() == SCHEMA_VERSION - 1
    assert applied == [SCHEMA_VERSION]
    assert old.upgrade() == SCHEMA_VERSION  # already current: nothing to apply
    assert applied == [SCHEMA_VERSION]
    old.close()

    current = load_catalog(shared_catalog_url)
    assert current.latest_epoch().id == 1
    with current._engine.connect() as conn:
        assert sa.inspect(conn).has_table("migration_probe")
    current.close()


def test_a_failing_migration_leaves_the_catalog_as_it_was(shared_catalog_url, monkeypatch):
    load_catalog(shared_catalog_url).close()
    fake_version(shared_catalog_url, SCHEMA_VERSION - 1)

    def migration(conn: sa.Connection) -> None:
        conn.execute(sa.text("CREATE TABLE migration_probe (id INTEGER)"))
        raise RuntimeError("migration failed half way")

    monkeypatch.setitem(catalog_migrations.MIGRATIONS, SCHEMA_VERSION, migration)
    with pytest.raises(RuntimeError):
        SqlCatalog.open_for_upgrade(shared_catalog_url).upgrade()
    assert stored_version(shared_catalog_url) == SCHEMA_VERSION - 1
    catalog = SqlCatalog.open_for_upgrade(shared_catalog_url)
    with catalog._engine.connect() as conn:
        assert not sa.inspect(conn).has_table("migration_probe")
    catalog.close()


def test_a_version_without_a_migration_cannot_be_upgraded(shared_catalog_url, monkeypatch):
    monkeypatch.delitem(catalog_migrations.MIGRATIONS, SCHEMA_VERSION)
    load_catalog(shared_catalog_url).close()
    fake_version(shared_catalog_url, SCHEMA_VERSION - 1)
    with pytest.raises(CatalogError, match="no migration"):
        SqlCatalog.open_for_upgrade(shared_catalog_url).upgrade()
    assert stored_version(shared_catalog_url) == SCHEMA_VERSION - 1


def test_a_newer_catalog_is_refused(shared_catalog_url):
    load_catalog(shared_catalog_url).close()
    fake_version(shared_catalog_url, SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError) as raised:
        load_catalog(shared_catalog_url)
    assert raised.value.found == SCHEMA_VERSION + 1 and "newer" in str(raised.value)
    with pytest.raises(SchemaVersionError):
        SqlCatalog.open_for_upgrade(shared_catalog_url).upgrade()
