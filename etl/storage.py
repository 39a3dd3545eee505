"""Where a warehouse's files live: a local directory, or an object store (``s3://bucket/prefix``).

One place says how every component reaches a location: pyarrow's file systems (the driver
and Spark tasks), delta-rs and Polars (:func:`storage_options`), DuckDB
(:func:`duckdb_secret`), our own log writer (:func:`put_if_absent`) and Spark
(:func:`spark_io`). Local paths take exactly the paths they always took.

Credentials come from the standard places (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, instance roles), read by each library itself; nothing here holds, logs or
returns a secret except :func:`duckdb_secret` for the process's own in-memory DuckDB.
What is not secret (:class:`ObjectStore`: endpoint, region) is read from the environment
too: ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``).
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from etl.errors import StorageError

if TYPE_CHECKING:
    # pyarrow is imported where a file system is made: a read that only names locations
    # (``etl snapshot``) imports none.
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession

SparkIO = Literal["hadoop", "arrow"]
"""How Spark tasks read and write a table's Parquet files: through Spark's own Hadoop file
system, or through Arrow's file system for the scheme (when Spark's Hadoop has none)."""
SPARK_IO_ENV = "ETL_SPARK_IO"
"""Forces :func:`spark_io` for object-store locations: ``hadoop`` or ``arrow`` (default:
probe whether Spark's Hadoop has a file system for the scheme)."""


def is_local(location: str) -> bool:
    """Whether a normalised location is a local (or mounted) directory."""
    return location.startswith("/")


def scheme(location: str) -> str:
    return "file" if is_local(location) else urlparse(location).scheme


@dataclass(frozen=True)
class ObjectStore:
    """What a reader needs to reach an object store besides credentials (never a secret)."""

    endpoint: str | None
    """``http(s)://host:port`` of an S3-compatible server; None for AWS itself."""
    region: str | None

    @property
    def allow_http(self) -> bool:
        return self.endpoint is not None and self.endpoint.startswith("http://")

    def describe(self) -> dict[str, str | None]:
        return {"endpoint": self.endpoint, "region": self.region}


def object_store() -> ObjectStore:
    """The object store settings of this process's environment."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return ObjectStore(endpoint=endpoint.rstrip("/") if endpoint else None, region=region)


def storage_options(location: str) -> dict[str, str] | None:
    """delta-rs' and Polars' ``storage_options`` for a location (None for a local one).

    Only where and how to connect; credentials are found by the libraries themselves."""
    if is_local(location):
        return None
    store = object_store()
    options: dict[str, str] = {}
    if store.endpoint:
        options["AWS_ENDPOINT_URL"] = store.endpoint
    if store.region:
        options["AWS_REGION"] = store.region
    if store.allow_http:
        options["AWS_ALLOW_HTTP"] = "true"
    return options


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of a normalised location and the location's root on it."""
    if is_local(location):
        return _local(), location
    parsed = urlparse(location)
    if parsed.scheme in ("s3", "s3a"):
        return _s3(object_store()), f"{parsed.netloc}{parsed.path}".rstrip("/")
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(location)


def list_directory(
    fs: pafs.FileSystem, path: str, *, recursive: bool = False
) -> list[pafs.FileInfo]:
    """The entries under directory ``path`` of ``fs`` (with ``recursive``, those of its
    subdirectories too); none when it does not exist.

    Arrow's local listing reports a directory created while it looked (missing when
    opened, present when checked again: a table's ``_delta_log`` whose first commit another
    writer is writing) as FileNotFoundError; a directory once seen stays, so it is listed
    again."""
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(path, recursive=recursive, allow_not_found=True)
    try:
        return fs.get_file_info(selector)
    except FileNotFoundError:
        return fs.get_file_info(selector)


@functools.cache
def _local() -> pafs.FileSystem:
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()


@functools.cache
def _s3(store: ObjectStore) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    endpoint = store.endpoint
    return pafs.S3FileSystem(
        endpoint_override=endpoint.split("://", 1)[1] if endpoint else None,
        scheme="http" if store.allow_http else "https",
        region=store.region,
        # One bucket, many tables: a table directory is a key prefix, not an object.
        check_directory_existence_before_creation=False,
        allow_bucket_creation=False,
    )


def read_object(location: str, relative: str) -> bytes:
    """The bytes of the object ``relative`` under a normalised ``location``
    (FileNotFoundError when there is none): a local file read as a file (no pyarrow), an
    object through the location's pyarrow file system."""
    if is_local(location):
        with open(os.path.join(location, relative), "rb") as file:
            return file.read()
    fs, root = filesystem(location)
    with fs.open_input_stream(f"{root}/{relative}") as stream:
        return stream.read()


def put_if_absent(location: str, relative: str, data: bytes) -> None:
    """Create the object ``relative`` under ``location`` holding ``data``, only if it does
    not exist: FileExistsError when it does (another writer created it first).

    Locally a temporary file hard-linked to the name (fails if the name exists: what
    delta-rs does on local storage); on an object store a conditional PUT
    (``If-None-Match: *``), what delta-rs does for its own commits there."""
    if is_local(location):
        target = os.path.join(location, relative)
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, target)
        finally:
            os.unlink(temporary)
        return
    import obstore
    from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError

    try:
        obstore.put(_object_store(location), relative, data, mode="create")
    except (AlreadyExistsError, PreconditionError) as exc:
        raise FileExistsError(f"{location}/{relative}") from exc
    except BaseError as exc:  # its first line says what failed; the rest is a debug dump
        raise OSError(f"{location}/{relative}: {str(exc).splitlines()[0]}") from exc


def _object_store(location: str):
    from obstore.store import from_url

    if scheme(location) not in ("s3", "s3a"):
        return from_url(location)  # the cloud's own environment configures it
    store = object_store()
    settings = {"endpoint": store.endpoint, "region": store.region}
    config: Any = {k: v for k, v in settings.items() if v is not None}
    client: Any = {"allow_http": store.allow_http}
    return from_url("s3://" + location.split("://", 1)[1], config=config, client_options=client)


_PROBE_DIR = "_delta_barrier_probe"


def check_conditional_writes(location: str) -> None:
    """Refuse an object store that does not honour conditional writes (put if absent): a
    second create of one key must fail. Delta commits rely on it (a version is created
    once); a store that ignores it silently loses commits of concurrent writers."""
    if is_local(location):
        return
    key = f"{_PROBE_DIR}/{uuid.uuid4().hex}"
    try:
        put_if_absent(location, key, b"first")
        try:
            put_if_absent(location, key, b"second")
        except FileExistsError:
            return
        raise StorageError(
            location=location,
            reason="the object store ignores conditional writes (a second PUT with "
            "If-None-Match: * of the same key succeeded), so concurrent Delta commits would "
            "overwrite each other; use a store that honours them (AWS S3, MinIO, R2, ...)",
        )
    except OSError as exc:  # unreachable, no bucket, no credentials
        raise StorageError(location=location, reason=f"cannot write there: {exc}") from exc
    finally:
        try:
            fs, root = filesystem(location)
            fs.delete_file(f"{root}/{key}")
        except OSError:
            pass


def duckdb_secret(location: str, *, with_credentials: bool) -> str | None:
    """DuckDB's ``CREATE SECRET`` statement reaching ``location`` (None for a local one).

    ``with_credentials`` adds the environment's key (for the process's own in-memory
    DuckDB only: the statement is never printed or logged); without, a reader supplies
    them (a script for another process)."""
    if is_local(location) or scheme(location) not in ("s3", "s3a"):
        return None
    store = object_store()
    parts = ["TYPE s3"]
    if store.endpoint:
        parts += [
            f"ENDPOINT '{_sql(store.endpoint.split('://', 1)[1])}'",
            "URL_STYLE 'path'",
            f"USE_SSL {'false' if store.allow_http else 'true'}",
        ]
    if store.region:
        parts.append(f"REGION '{_sql(store.region)}'")
    if with_credentials:
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if key and secret:
            parts += [f"KEY_ID '{_sql(key)}'", f"SECRET '{_sql(secret)}'"]
            if token := os.environ.get("AWS_SESSION_TOKEN"):
                parts.append(f"SESSION_TOKEN '{_sql(token)}'")
    return f"CREATE OR REPLACE SECRET delta_barrier_s3 ({', '.join(parts)})"


def _sql(text: str) -> str:
    return text.replace("'", "''")


_SPARK_IO: dict[str, SparkIO] = {}


def spark_io(spark: SparkSession, location: str) -> SparkIO:
    """How Spark tasks reach ``location``'s files: Hadoop for local paths and for schemes
    Spark's Hadoop has a file system for (a cluster with S3A), Arrow otherwise;
    ``ETL_SPARK_IO`` forces it for object-store locations."""
    if is_local(location):
        return "hadoop"
    forced = os.environ.get(SPARK_IO_ENV, "").strip().lower()
    if forced in ("hadoop", "arrow"):
        return forced  # type: ignore[return-value]
    if forced:
        raise StorageError(
            location=location, reason=f"{SPARK_IO_ENV}={forced!r}: use 'hadoop' or 'arrow'"
        )
    name = scheme(location)
    if name not in _SPARK_IO:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(name, conf)
            _SPARK_IO[name] = "hadoop"
        except Exception:  # py4j: UnsupportedFileSystemException, ClassNotFoundException
            _SPARK_IO[name] = "arrow"
    return _SPARK_IO[name]


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


__all__ = [
    "SPARK_IO_ENV",
    "ObjectStore",
    "SparkIO",
    "check_conditional_writes",
    "duckdb_secret",
    "filesystem",
    "is_local",
    "list_directory",
    "object_store",
    "put_if_absent",
    "read_object",
    "scheme",
    "spark_io",
    "storage_options",
]
