"""The catalog contract runs against every backend: SQLite file, SQLite memory, PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from catalog import (
    PIPELINE_DEFAULT,
    JobSpec,
    Lease,
    SealRequest,
    SqlCatalog,
    TableSpec,
    load_catalog,
)
from catalog.schema import meta_table, metadata, pipelines_table

BACKENDS = [
    pytest.param("sqlite-file", id="sqlite-file"),
    pytest.param("sqlite-memory", id="sqlite-memory"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
SHARED_BACKENDS = [
    pytest.param("sqlite-file", id="sqlite-file"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
"""Backends that several processes (or several opens) can share."""


@pytest.fixture(scope="session")
def postgres_contract_url(postgres_server: str) -> Iterator[str]:
    """One PostgreSQL catalog schema for the contract tests, emptied before each test.

    Creating the catalog's tables costs ~0.2 s on PostgreSQL; emptying them costs a few
    milliseconds. Tests that need a database of their own use ``postgres_url``.
    """
    schema = f"t_contract_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = f"{postgres_server}?options=-csearch_path%3D{schema}"
    load_catalog(url).close()
    try:
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _emptied(url: str) -> str:
    """The catalog as new: no rows but the schema version and the default pipeline."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            if table is not meta_table:
                conn.execute(table.delete())
        conn.execute(meta_table.delete().where(meta_table.c.key != "schema_version"))
        conn.execute(
            pipelines_table.insert().values(name=PIPELINE_DEFAULT, created_at=datetime.now(UTC))
        )
    engine.dispose()
    return url


@pytest.fixture(params=BACKENDS)
def catalog_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    if request.param == "sqlite-memory":
        return "memory://"
    return _emptied(request.getfixturevalue("postgres_contract_url"))


@pytest.fixture(params=SHARED_BACKENDS)
def shared_catalog_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database of its own that several processes (or several opens) can share."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[SqlCatalog]:
    opened = load_catalog(catalog_url)
    assert isinstance(opened, SqlCatalog)
    yield opened
    opened.close()


@dataclass(frozen=True)
class Chain:
    """raw <- ingest(source words); counts <- count(raw); rejects is ingest's side output."""

    catalog: SqlCatalog
    ingest: Lease
    count: Lease

    def seal_root(self, epoch: int, version: int, **kw):
        return self.catalog.seal(
            "ingest", self.ingest.generation, [SealRequest("raw", epoch, version, **kw)]
        )


@pytest.fixture
def chain(catalog: SqlCatalog, tmp_path) -> Chain:
    for name, kind in (("raw", "root"), ("rejects", "rejects"), ("counts", "derived")):
        catalog.register_table(TableSpec(name, str(tmp_path / name), kind=kind))
    catalog.register_job(JobSpec("ingest", "raw", source="words", side_outputs=("rejects",)))
    catalog.register_job(JobSpec("count", "counts", mode="overwrite", inputs=("raw",)))
    return Chain(
        catalog=catalog,
        ingest=catalog.acquire_lease("ingest", "runner-a", ttl_seconds=60),
        count=catalog.acquire_lease("count", "runner-a", ttl_seconds=60),
    )
