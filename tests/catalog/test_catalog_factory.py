"""Opening catalogs: URL forms, the warehouse default, and failures that never leak passwords."""

from __future__ import annotations

import os
import re
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from catalog import (
    CatalogNotFoundError,
    CatalogReadOnlyError,
    CatalogUnavailableError,
    CatalogUrlError,
    JobSpec,
    SealRequest,
    SqlCatalog,
    TableSpec,
    load_catalog,
    mask_url,
    url_password,
)

PASSWORD = "s3cr3t-Pa55word"


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_default_catalog_is_a_sqlite_file_in_the_warehouse(tmp_path):
    warehouse = tmp_path / "deep" / "warehouse"
    catalog = load_catalog(warehouse=warehouse)
    assert (warehouse / "_catalog.sqlite").is_file()
    assert catalog.url == f"sqlite:///{warehouse.resolve() / '_catalog.sqlite'}"
    catalog.register_table(TableSpec("t", str(warehouse / "t"), kind="root"))
    catalog.close()
    assert [t.name for t in load_catalog(warehouse=str(warehouse)).list_tables()] == ["t"]
    assert load_catalog(warehouse=f"file://{warehouse}").list_tables()[0].name == "t"


def test_a_sqlite_url_names_a_file(tmp_path):
    path = tmp_path / "sub" / "cat.db"
    load_catalog(f"sqlite:///{path}").open_epoch()
    assert path.is_file()
    assert load_catalog(f"sqlite:///{path}").latest_epoch().id == 1


@pytest.mark.parametrize("url", ["sqlite://", "memory://", "sqlite:///:memory:"])
def test_in_memory_catalogs_are_private(url):
    first, second = load_catalog(url), load_catalog(url)
    first.open_epoch()
    assert first.latest_epoch().id == 1
    assert second.latest_epoch() is None


def test_an_in_memory_catalog_is_usable_from_threads():
    catalog = load_catalog("memory://")
    catalog.register_table(TableSpec("t", "/w/t", kind="root"))
    catalog.register_job(JobSpec("j", "t", source="s"))
    start = threading.Barrier(4)

    def work(_: int) -> list[int]:
        start.wait()
        ids = []
        for _ in range(20):
            ids.append(catalog.open_epoch().id)
            catalog.latest_written(["t"])
        return ids

    with ThreadPoolExecutor(4) as pool:
        issued = [i for ids in pool.map(work, range(4)) for i in ids]
    assert sorted(issued) == list(range(1, 81))


@pytest.mark.postgres
def test_the_url_attribute_masks_the_password(postgres_url):
    # The test server trusts local connections, so any password is accepted.
    with_password = postgres_url.replace("://postgres@", f"://postgres:{PASSWORD}@")
    assert with_password != postgres_url
    catalog = load_catalog(with_password)
    try:
        assert PASSWORD not in catalog.url and "***" in catalog.url
        assert PASSWORD not in repr(catalog)
    finally:
        catalog.close()


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_postgres_url_forms(postgres_url, scheme):
    url = scheme + postgres_url[postgres_url.index("://") :]
    catalog = load_catalog(url)
    assert isinstance(catalog, SqlCatalog) and catalog.backend == "postgresql"
    assert catalog.open_epoch().id == 1
    assert catalog.url.startswith("postgresql+psycopg://")
    catalog.close()


def test_an_unreachable_postgres_is_reported_without_the_password():
    port = closed_port()
    url = f"postgresql://delta:{PASSWORD}@127.0.0.1:{port}/warehouse_db"
    with pytest.raises(CatalogUnavailableError) as raised:
        load_catalog(url)
    error = raised.value
    assert (error.backend, error.host, error.database) == (
        "postgresql",
        f"127.0.0.1:{port}",
        "warehouse_db",
    )
    text = "".join(traceback.format_exception(error))
    for shown in (str(error), repr(error), text):
        assert PASSWORD not in shown
    assert "warehouse_db" in str(error) and f"127.0.0.1:{port}" in str(error)


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://root:{PASSWORD}@localhost/db",
        "oracle://host/db",
        f"::not a url:{PASSWORD}@",
        f"bad url://user:{PASSWORD}@host",
    ],
)
def test_an_unsupported_url_lists_the_supported_ones(url):
    with pytest.raises(CatalogUrlError) as raised:
        load_catalog(url)
    message = str(raised.value)
    assert "sqlite:///" in message and "postgresql://" in message and "memory://" in message
    text = "".join(traceback.format_exception(raised.value))
    assert PASSWORD not in message and PASSWORD not in text


def test_a_catalog_needs_a_url_or_a_local_warehouse():
    with pytest.raises(CatalogUrlError, match="warehouse"):
        load_catalog()
    with pytest.raises(CatalogUrlError, match="PostgreSQL"):
        load_catalog(warehouse="s3://bucket/warehouse")


def test_an_unusable_sqlite_path_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CatalogUnavailableError) as raised:
        load_catalog(f"sqlite:///{blocker / 'sub' / 'cat.db'}")
    assert raised.value.backend == "sqlite"


# -- opening without creating, and read-only catalogs ----------------------------------


def populated_warehouse(warehouse) -> None:
    catalog = load_catalog(warehouse=warehouse)
    catalog.register_table(TableSpec("raw", str(warehouse / "raw"), kind="root"))
    catalog.register_job(JobSpec("ingest", "raw", source="words"))
    lease = catalog.acquire_lease("ingest", "me", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    catalog.seal("ingest", lease.generation, [SealRequest("raw", epoch, 3)])
    catalog.create_tag("first", epoch=epoch, versions={"raw": 3}, pipeline=None)
    catalog.release_lease(lease)
    catalog.close()


def test_a_missing_catalog_is_not_created_without_create(tmp_path):
    warehouse = tmp_path / "no" / "warehouse"
    with pytest.raises(CatalogNotFoundError) as raised:
        load_catalog(warehouse=warehouse, create=False)
    message = str(raised.value)
    assert str(warehouse / "_catalog.sqlite") in message and "etl run" in message
    assert not (tmp_path / "no").exists()
    with pytest.raises(CatalogNotFoundError):
        load_catalog(f"sqlite:///{tmp_path / 'cat.db'}", create=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CatalogNotFoundError):
        load_catalog("memory://", create=False)


def test_an_existing_catalog_opens_without_create(tmp_path):
    populated_warehouse(tmp_path)
    catalog = load_catalog(warehouse=tmp_path, create=False)
    assert [t.name for t in catalog.list_tables()] == ["raw"]
    assert catalog.open_epoch().id == 2
    catalog.close()


@pytest.mark.postgres
def test_a_missing_postgres_catalog_is_not_created_without_create(postgres_url):
    with_password = postgres_url.replace("://postgres@", f"://postgres:{PASSWORD}@")
    with pytest.raises(CatalogNotFoundError) as raised:
        load_catalog(with_password, create=False)
    message = "".join(traceback.format_exception(raised.value))
    assert PASSWORD not in message and "etl run" in str(raised.value)
    assert "schema 't_" in str(raised.value)
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    engine.dispose()
    load_catalog(postgres_url).close()
    load_catalog(postgres_url, create=False).close()


def check_read_only(catalog, url_path) -> None:
    """Every read works; every write fails saying the catalog is read-only."""
    assert catalog.read_only
    assert [t.name for t in catalog.list_tables()] == ["raw"]
    assert catalog.get_job("ingest").source == "words"
    assert catalog.latest_epoch().id == 1
    assert catalog.latest_written(["raw"])["raw"].delta_version == 3
    assert catalog.latest_commit().epoch == 1
    assert [s.table for s in catalog.table_status()] == ["raw"]
    assert len(catalog.state_history("raw")) == 1
    assert catalog.get_tag("first").epoch == 1
    assert catalog.get_lease("ingest").generation == 1
    assert catalog.failures() == [] and catalog.active_pins() == []
    assert catalog.retention_policy(None) is None
    for write in (
        lambda: catalog.open_epoch(),
        lambda: catalog.register_table(TableSpec("other", "/w/other", kind="root")),
        lambda: catalog.acquire_lease("ingest", "me", ttl_seconds=60),
        lambda: catalog.create_pin(pipeline=None, epoch=1, versions={}, holder="r", ttl_seconds=9),
    ):
        with pytest.raises(CatalogReadOnlyError) as raised:
            write()
        message = str(raised.value)
        assert f"the catalog at sqlite:///{url_path} is read-only" in message
        assert "server is running" not in message


def test_a_catalog_opened_read_only_reads_everything_and_refuses_writes(tmp_path):
    populated_warehouse(tmp_path)
    path = tmp_path / "_catalog.sqlite"
    catalog = SqlCatalog(f"sqlite:///{path}", create=False, read_only=True)
    check_read_only(catalog, path)
    catalog.close()


def test_a_write_refused_by_sqlite_itself_says_read_only(tmp_path):
    populated_warehouse(tmp_path)
    path = tmp_path / "_catalog.sqlite"
    catalog = SqlCatalog(f"sqlite:///{path}", create=False, read_only=True)
    catalog.read_only = False  # as if the permissions had looked writable: mode=ro refuses
    with pytest.raises(CatalogReadOnlyError, match="is read-only"):
        catalog.open_epoch()
    catalog.close()


def test_a_catalog_without_write_permission_opens_read_only(tmp_path):
    warehouse = tmp_path / "shared"
    populated_warehouse(warehouse)
    path = warehouse / "_catalog.sqlite"
    for leftover in warehouse.glob("_catalog.sqlite-*"):
        leftover.unlink()
    path.chmod(0o444)
    warehouse.chmod(0o555)
    try:
        if os.access(path, os.W_OK) or os.access(warehouse, os.W_OK):
            pytest.skip("running as root: permissions do not stop writes (mode=ro is tested)")
        catalog = load_catalog(warehouse=warehouse, create=False)
        check_read_only(catalog, path)
        catalog.close()
        assert sorted(p.name for p in warehouse.iterdir()) == ["_catalog.sqlite"]
    finally:
        warehouse.chmod(0o755)
        path.chmod(0o644)


# -- passwords with special characters --------------------------------------------------

SPECIAL_PASSWORDS = ["pq7@ss9@wx1", "abq:dzf/gqi#jkv?mnz%pqy", "tqx@zsv:jqw/kxz", "uvw%40xyq"]


def pieces(password: str) -> set[str]:
    """The password raw and percent-decoded, and each piece of 3+ characters of either."""
    from urllib.parse import unquote

    whole = {password, unquote(password)}
    return whole | {p for w in whole for p in re.split(r"[@:/#?%]", w) if len(p) >= 3}


def assert_hidden(password: str, *texts: str) -> None:
    for text in texts:
        for secret in pieces(password):
            assert secret not in text, (secret, text)


@pytest.mark.parametrize("password", SPECIAL_PASSWORDS)
@pytest.mark.parametrize(
    "template",
    [
        "postgresql+psycopg://user:{}@db-host:5432/db",
        "postgresql://user:{}@db-host/db?sslmode=require",
        "postgres://us@er:{}@db-host/db",
    ],
)
def test_mask_url_hides_every_password_whole(template, password):
    url = template.format(password)
    assert url_password(url) == password
    masked = mask_url(url)
    assert masked == template.format("***")
    assert_hidden(password, masked)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://db-host:5432/db",
        "postgresql://user@db-host:5432/db",
        "postgresql://user:@db-host/db",
        "sqlite:////tmp/we:ird@dir/cat.sqlite",
        "memory://",
    ],
)
def test_mask_url_leaves_urls_without_a_password_alone(url):
    assert url_password(url) is None
    assert mask_url(url) == url


@pytest.mark.parametrize("password", [p for p in SPECIAL_PASSWORDS if "@" in p])
def test_an_unencoded_at_in_the_password_is_refused_without_showing_it(password):
    url = f"postgresql+psycopg://user:{password}@127.0.0.1:{closed_port()}/db"
    with pytest.raises(CatalogUrlError) as raised:
        load_catalog(url, create=False)
    message = str(raised.value)
    assert "%40" in message and "postgresql+psycopg://user:***@127.0.0.1" in message
    assert_hidden(password, message, "".join(traceback.format_exception(raised.value)))


@pytest.mark.parametrize("password", [p for p in SPECIAL_PASSWORDS if "@" not in p])
def test_an_unreachable_server_never_shows_a_special_password(password):
    port = closed_port()
    with pytest.raises(CatalogUnavailableError) as raised:
        load_catalog(f"postgresql://user:{password}@127.0.0.1:{port}/db")
    assert raised.value.host == f"127.0.0.1:{port}"
    assert_hidden(password, str(raised.value), "".join(traceback.format_exception(raised.value)))


@pytest.mark.postgres
@pytest.mark.parametrize("password", SPECIAL_PASSWORDS)
def test_a_refused_login_names_the_host_but_never_the_password(postgres_server, password):
    from urllib.parse import quote

    encoded = quote(password, safe="")
    rest = postgres_server.split("@", 1)[1]
    # No such role: the server refuses the login (its trust authentication accepts any
    # password of a role that exists).
    url = f"postgresql+psycopg://no_such_role_13:{encoded}@{rest}"
    with pytest.raises(CatalogUnavailableError) as raised:
        load_catalog(url, create=False)
    assert raised.value.host == "127.0.0.1:5432"
    assert "no_such_role_13" in str(raised.value)
    assert_hidden(password, str(raised.value), "".join(traceback.format_exception(raised.value)))


@pytest.mark.postgres
@pytest.mark.parametrize("password", SPECIAL_PASSWORDS)
def test_an_encoded_special_password_connects_and_stays_hidden(postgres_url, password):
    from urllib.parse import quote

    url = postgres_url.replace("://postgres@", f"://postgres:{quote(password, safe='')}@")
    catalog = load_catalog(url)
    try:
        assert catalog.open_epoch().id == 1
        assert_hidden(password, catalog.url, repr(catalog))
    finally:
        catalog.close()
