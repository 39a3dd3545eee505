"""Where a table's files live: Hive-style partition directories and partition values.

Directories are escaped as Spark escapes them (ExternalCatalogUtils.escapePathName), so
Spark's partition discovery reads them back; values are serialised as the Delta
protocol's partitionValues are ("Partition Value Serialization").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from datetime import date
from urllib.parse import quote, unquote, urlparse

from etl.errors import DeltaIOError
from etl.storage import filesystem

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_ESCAPED_CHARS = frozenset(
    [chr(c) for c in range(0x01, 0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)
# Partition types whose value serialisation is unambiguous, so a Hive directory can be
# checked against the log's value and parsed back by Spark: the types a job may
# partition by.
PARTITION_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})


def escape_path_name(value: str) -> str:
    """Escape a partition column name or value for a Hive directory name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED_CHARS else c for c in value)


def unescape_path_name(text: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def serialize_partition_value(value: object) -> str | None:
    """Serialise a partition value as the Delta protocol's partitionValues do.

    Only the types in ``PARTITION_TYPES``. An empty string is null (Delta protocol,
    "Partition Value Serialization").
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"unsupported partition value {value!r}")


def hive_directory(partition_by: Sequence[str], values: Mapping[str, str | None]) -> str:
    """The relative directory of a partition: ``col=value/...`` (empty when unpartitioned)."""
    parts = []
    for col in partition_by:
        value = values[col]
        parts.append(
            f"{escape_path_name(col)}={HIVE_NULL if value is None else escape_path_name(value)}"
        )
    return "/".join(parts)


def written_partition_values(
    directories: Sequence[str], partition_by: Sequence[str]
) -> dict[str, str | None]:
    """The Delta-serialised partition values of a file Spark wrote under ``col=value/``
    directories (Spark writes each value in the form the Delta protocol serialises)."""
    values: dict[str, str | None] = {}
    for directory, column in zip(directories, partition_by, strict=True):
        name, _, text = directory.partition("=")
        if unescape_path_name(name) != column:
            raise DeltaIOError(
                table=column,
                operation="write",
                reason=f"Spark wrote partition directory {directory!r}, expected column {column!r}",
            )
        value = unescape_path_name(text)
        values[column] = None if value in (HIVE_NULL, "") else value
    return values


def normalize_location(location: str) -> str:
    """An absolute local path (also for ``file:`` URIs), or the URI when it has another scheme."""
    if location.startswith("file:"):
        return os.path.normpath(unquote(urlparse(location).path))
    if has_scheme(location):
        return location.rstrip("/")
    return os.path.abspath(location)


def absolute_path(location: str, path: str) -> str:
    """Where Spark finds a file of the table (``path`` as in :class:`ActiveFile`)."""
    return path if has_scheme(path) else f"{location}/{path}"


def spark_file_path(uri: str) -> str:
    """A URI Spark reports for a file (URL-encoded) in the form of :func:`absolute_path`."""
    if uri.startswith("file:"):
        return os.path.normpath(unquote(urlparse(uri).path))
    return unquote(uri)


def spark_location(location: str) -> str:
    """``location`` as Spark must be given it: an absolute path without a scheme would be
    read against Hadoop's default file system, which on a cluster is HDFS, not the local
    disk."""
    return f"file://{location}" if location.startswith("/") else location


# The characters delta-rs percent-encodes in a log path (besides control characters and
# non-ASCII bytes): readers such as delta-rs and DuckDB identify a logical file by the
# path string of its actions, so a remove must spell a path exactly as its add did.
_LOG_PATH_ENCODED = frozenset(' \\{^}%`]">[<#|*?')
_LOG_PATH_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in _LOG_PATH_ENCODED)


def log_path(path: str) -> str:
    """A file's path as the Delta log stores it (URL-encoded; Delta protocol, "Add File
    and Remove File"), encoded exactly as delta-rs encodes it."""
    return quote(path, safe=_LOG_PATH_SAFE)


def has_scheme(path: str) -> bool:
    """True for a URI (``s3://...``, ``file:...``), False for a plain path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) is not None


__all__ = [
    "HIVE_NULL",
    "PARTITION_TYPES",
    "absolute_path",
    "escape_path_name",
    "filesystem",
    "has_scheme",
    "hive_directory",
    "log_path",
    "normalize_location",
    "serialize_partition_value",
    "spark_file_path",
    "spark_location",
    "unescape_path_name",
    "written_partition_values",
]
