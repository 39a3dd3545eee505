"""The actions of a Delta log entry, built from what a commit request asks and the version
it is committed on (Delta protocol, "Actions"): metadata with an evolved or replaced
schema, a new table's protocol and metadata, removes (with their deletion vectors) and
re-adds with new deletion vectors, a RESTORE's removes and adds. A file to remove or
change that is gone, or whose deletion vector changed since the commit was planned, is
CommitConflictError: the caller re-plans on the new version.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.transaction import AddAction, RemoveAction

from etl.delta.dv import DeletionVector
from etl.delta.files import DataFile
from etl.delta.layout import serialize_partition_value
from etl.delta.log import ActiveFile, active_files
from etl.delta.logfile import DELETION_VECTORS, active_adds, deletion_vector
from etl.errors import CommitConflictError, SchemaMismatchError


@dataclass(frozen=True)
class DeletedRows:
    """Rows a commit deletes from a committed data file: the file's new deletion vector
    (the rows it deleted before and the new ones), replacing the one it had when the
    commit was planned (Delta protocol, "Deletion Vectors")."""

    path: str
    """Relative to the table root, decoded (as :class:`~etl.delta.log.ActiveFile`)."""
    old: DeletionVector | None
    new: DeletionVector


def column_types(schema_json: str) -> dict[str, str]:
    """Column name -> Delta type, nullability and field metadata left out."""

    def strip(node: object) -> object:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    fields = json.loads(schema_json)["fields"]
    return {
        f["name"]: f["type"] if isinstance(f["type"], str) else json.dumps(strip(f["type"]))
        for f in fields
    }


def added_columns(table_schema: str, location: str, schema: pa.Schema) -> list[pa.Field]:
    """The columns of rows of ``schema`` that the table (of Delta schema ``table_schema``,
    as JSON) does not have yet, as nullable fields: the schema change Delta makes in place
    (the commit that brings them adds them to the table's schema; versions before it keep
    theirs, and their files read the new columns as null). Any other difference (a column
    the rows lack, a changed type) is SchemaMismatchError, naming it."""
    expected = column_types(table_schema)
    got = column_types(Schema.from_arrow(schema).to_json())
    if any(got.get(column) != kind for column, kind in expected.items()):
        raise SchemaMismatchError(location, expected, got)
    return [schema.field(column).with_nullable(True) for column in got if column not in expected]


def table_metadata(table: DeltaTable) -> dict:
    """The body of the ``metaData`` action in force at ``table``'s loaded version."""
    metadata = table.metadata()
    return {
        "id": metadata.id,
        "name": metadata.name,
        "description": metadata.description,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": table.schema().to_json(),
        "partitionColumns": list(metadata.partition_columns),
        "configuration": dict(metadata.configuration),
        "createdTime": metadata.created_time,
    }


def evolved_metadata(metadata: Mapping[str, Any], added: Sequence[pa.Field]) -> dict:
    """The ``metaData`` action ``metadata`` (its body) with ``added`` appended to its
    schema (Delta protocol, "Change Metadata": a new nullable column needs no other action)."""
    schema = json.loads(metadata["schemaString"])
    schema["fields"] += json.loads(Schema.from_arrow(pa.schema(added)).to_json())["fields"]
    return metadata_action(metadata, schema)


def metadata_action(metadata: Mapping[str, Any], schema: Mapping[str, Any]) -> dict:
    """The ``metaData`` action ``metadata`` (its body) with ``schema`` (a Delta schema as
    JSON)."""
    return {"metaData": {**metadata, "schemaString": json.dumps(schema)}}


def remove_actions(
    table: DeltaTable,
    location: str,
    removes: Sequence[DataFile | ActiveFile | str],
    *,
    data_change: bool,
) -> list[RemoveAction]:
    current = {f.path: f for f in active_files(table)}
    paths = [path_of(remove) for remove in removes]
    missing = [path for path in paths if path not in current]
    if missing:
        # Another commit removed them since the caller read the table: committing now
        # would lose that commit's rows or duplicate ours.
        raise CommitConflictError(
            table=location,
            reason=f"files to remove are not in the current version {table.version()}: {missing}",
        )
    now = int(time.time() * 1000)
    return [
        RemoveAction(
            path,
            data_change,
            now,
            current[path].size,
            _serialized_partition_values(current[path].partition_values),
        )
        for path in paths
    ]


def _serialized_partition_values(values: Mapping[str, object]) -> dict[str, str | None] | None:
    """The log form of typed partition values; None (omitted, as the protocol allows in a
    remove action) when a type has no serialisation here."""
    try:
        return {k: serialize_partition_value(v) for k, v in values.items()}
    except TypeError:
        return None


def add_action(file: DataFile, *, data_change: bool) -> AddAction:
    # delta-rs URL-encodes the path when it writes the log.
    return AddAction(
        path=file.path,
        size=file.size,
        partition_values=dict(file.partition_values),
        modification_time=file.modification_time,
        data_change=data_change,
        stats=file.stats,
    )


TIMESTAMP_NTZ = "timestampNtz"
"""The reader and writer table feature a TIMESTAMP_NTZ column needs (Delta protocol,
"Timestamp without timezone")."""
# The writer features a legacy writer version implies (Delta protocol, "Table Features"):
# a protocol moved to table features must list them.
_LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}
_LEGACY_READER_FEATURES = {2: ("columnMapping",)}


def _has_timestamp_ntz(node: object) -> bool:
    if isinstance(node, dict):
        return any(_has_timestamp_ntz(v) for k, v in node.items() if k != "metadata")
    if isinstance(node, list):
        return any(_has_timestamp_ntz(v) for v in node)
    return node == "timestamp_ntz"


def protocol_for_schema(protocol: Mapping[str, Any], schema_json: str) -> dict | None:
    """The ``protocol`` action a table of ``protocol`` needs to hold columns of
    ``schema_json`` (a Delta schema as JSON); None when it needs no change. A
    TIMESTAMP_NTZ column needs the ``timestampNtz`` reader and writer feature: the protocol
    moves to table features (reader 3, writer 7), listing the features its legacy versions
    implied, or gains the feature."""
    if not _has_timestamp_ntz(json.loads(schema_json)):
        return None
    reader = int(protocol.get("minReaderVersion", 1))
    writer = int(protocol.get("minWriterVersion", 1))
    readers = set(protocol.get("readerFeatures") or ())
    writers = set(protocol.get("writerFeatures") or ())
    if reader == 3 and writer == 7 and TIMESTAMP_NTZ in readers and TIMESTAMP_NTZ in writers:
        return None
    if reader < 3:
        readers |= {f for v, names in _LEGACY_READER_FEATURES.items() if v <= reader for f in names}
    if writer < 7:
        writers |= {f for v, names in _LEGACY_WRITER_FEATURES.items() if v <= writer for f in names}
    return {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": sorted(readers | {TIMESTAMP_NTZ}),
            "writerFeatures": sorted(writers | {TIMESTAMP_NTZ}),
        }
    }


def table_protocol(table: DeltaTable) -> dict:
    """The body of the ``protocol`` action in force at ``table``'s loaded version."""
    protocol = table.protocol()
    body: dict[str, Any] = {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
    }
    if protocol.reader_features is not None:
        body["readerFeatures"] = list(protocol.reader_features)
    if protocol.writer_features is not None:
        body["writerFeatures"] = list(protocol.writer_features)
    return body


def creation_actions(schema: pa.Schema, partition_by: Sequence[str]) -> list[dict]:
    """The protocol and metadata of a new table with deletion vectors (Delta protocol,
    "Deletion Vectors": reader version 3 / writer version 7 with the table feature, and
    ``delta.enableDeletionVectors`` for writers to use them)."""
    features = [DELETION_VECTORS]
    if any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in schema):
        features.append(TIMESTAMP_NTZ)
    return [
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": features,
                "writerFeatures": features,
            }
        },
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": Schema.from_arrow(schema).to_json(),
                "partitionColumns": list(partition_by),
                "configuration": {"delta.enableDeletionVectors": "true"},
                "createdTime": int(time.time() * 1000),
            }
        },
    ]


def file_actions(
    location: str,
    version: int,
    current: Mapping[str, Mapping[str, Any]],
    removes: Sequence[DataFile | ActiveFile | str],
    deletes: Sequence[DeletedRows],
    *,
    data_change: bool,
) -> list[dict]:
    """remove (and re-add) actions on the files of ``version``, whose active files' ``add``
    actions are ``current``; CommitConflictError when a file is gone or its deletion vector
    is not the one the commit was planned on."""
    paths = [path_of(remove) for remove in removes]
    missing = [path for path in [*paths, *(d.path for d in deletes)] if path not in current]
    # A file read with one deletion vector must not be removed or given a new DV on
    # top of another: the rows deleted meanwhile would come back, or be lost.
    planned = [(d.path, d.old) for d in deletes] + [
        (r.path, r.deletion_vector) for r in removes if isinstance(r, ActiveFile)
    ]
    changed = [
        path
        for path, dv in planned
        if path in current and _dv_id(deletion_vector(current[path])) != _dv_id(dv)
    ]
    if missing or changed:
        # Another commit removed them or deleted rows of them since the caller read the
        # table: committing now would lose that commit's rows or duplicate ours.
        raise CommitConflictError(
            table=location,
            reason=f"files to remove or delete rows of changed since they were read: "
            f"{missing + changed} (current version {version})",
        )
    now = int(time.time() * 1000)
    actions = [remove_json(current[path], data_change, now) for path in paths]
    for deleted in deletes:
        add = current[deleted.path]
        actions.append(remove_json(add, True, now))
        # The same file with its new DV; statistics stay those of the physical file.
        actions.append(
            {"add": {**add, "dataChange": True, "deletionVector": deleted.new.to_json()}}
        )
    return actions


def remove_json(add: Mapping[str, Any], data_change: bool, now: int) -> dict:
    """The remove of the logical file an ``add`` action made: its path and its deletion
    vector, if any (Delta protocol, "Deletion Vectors")."""
    body: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues") or {},
        "size": add.get("size"),
    }
    if add.get("deletionVector"):
        body["deletionVector"] = add["deletionVector"]
    return {"remove": body}


def restore_actions(location: str, to_version: int, planned_at: int) -> list[dict]:
    """The actions of a RESTORE of ``to_version`` on top of ``planned_at``: remove every
    logical file (path and deletion vector) the target does not have, add back every one
    it has and the current version does not. delta-rs' RESTORE re-adds a file whose
    deletion vector changed since the target without any DV, which brings deleted rows
    back."""
    target = {_logical(a): a for a in active_adds(location, to_version).values()}
    current = {_logical(a): a for a in active_adds(location, planned_at).values()}
    now = int(time.time() * 1000)
    return [remove_json(a, True, now) for k, a in current.items() if k not in target] + [
        {"add": {**a, "dataChange": True}} for k, a in target.items() if k not in current
    ]


def _logical(add: Mapping[str, Any]) -> tuple[str, str | None]:
    return unquote(add["path"]), _dv_id(deletion_vector(add))


def path_of(remove: DataFile | ActiveFile | str) -> str:
    return remove if isinstance(remove, str) else remove.path


def _dv_id(dv: DeletionVector | None) -> str | None:
    return None if dv is None else dv.unique_id
