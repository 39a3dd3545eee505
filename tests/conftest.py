"""Fixtures shared by every test package: one SparkSession per test session, PostgreSQL."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator

import pytest

pytest_plugins = [
    "tests.support.kafka_fixtures",
    "tests.support.demo_run",
    "tests.support.s3_server",
    "tests.support.faults.summary",
]

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Options of every Spark driver JVM the tests start (the session's, and every ``etl`` or
child process's, which inherit the environment): each runs small jobs for seconds to
minutes, where C2's and G1's background threads cost more CPU than they save (about half
of a JVM's CPU to start and run a few small queries, on 2 cores shared with the test)."""
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


def _import_great_expectations() -> None:
    """Import great_expectations once here. In a pytest-xdist worker, whose ``__main__`` has
    neither ``__spec__`` nor ``__file__``, the ``pyspark.sql.connect`` it tries takes that
    for a doctest run without grpc and exits the worker; for the import only, ``__main__``
    names a file (no longer: a multiprocessing child would run it)."""
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is not None or hasattr(main, "__file__"):
        return
    main.__file__ = "pytest-worker"
    try:
        import great_expectations  # noqa: F401
    finally:
        del main.__file__


_import_great_expectations()
# Kept query translations (etl/reader/translation.py) go to a directory of this test
# session, never to the user's cache (child processes inherit it).
os.environ.setdefault("DELTA_BARRIER_CACHE_DIR", tempfile.mkdtemp(prefix="delta-barrier-cache-"))

POSTGRES_ADMIN_URL = os.environ.get(
    "DELTA_BARRIER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def spark():
    from etl.spark import build_spark

    session = build_spark(
        app_name="delta-barrier-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    )
    yield session
    session.stop()


def _postgres_reachable() -> str | None:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(POSTGRES_ADMIN_URL)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - reported as the skip/fail reason
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The PostgreSQL admin URL; on CI a missing server fails the test instead of skipping."""
    problem = _postgres_reachable()
    if problem:
        if os.environ.get("DELTA_BARRIER_REQUIRE_POSTGRES") or os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required on CI but unreachable: {problem}")
        pytest.skip(f"PostgreSQL unreachable: {problem}")
    return POSTGRES_ADMIN_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A URL to a fresh, empty PostgreSQL schema, dropped after the test."""
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(postgres_server)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{postgres_server}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()
