"""Deletion vectors: the Delta protocol's way of deleting rows of a data file without
rewriting it (Delta protocol, "Deletion Vectors" and "Deletion Vector Format").

A deletion vector (DV) is a set of row indexes (0-based positions of rows in the Parquet
file) serialised as a 64-bit RoaringTreemap. The log names it by a descriptor
(:class:`DeletionVector`): stored in a file of the table (storage type ``u``, name derived
from a UUID), inline (``i``) or at an absolute path (``p``). A DV file is one version byte
(1), then per DV at its ``offset``: the size (u32 big-endian), the DV's bytes (u32
little-endian magic 1681511377 + the treemap, portable serialisation) and the CRC-32 of
those bytes (u32 big-endian).

Pure codec: no log, no Spark.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs
from pyroaring import BitMap

from etl.errors import DeletionVectorFormatError

DV_FILE_PREFIX = "deletion_vector_"
"""A DV file of storage type ``u`` is ``[<random prefix>/]deletion_vector_<uuid>.bin``."""
_FORMAT_VERSION = 1
_MAGIC = 1681511377
# Z85 (ZeroMQ RFC 32), the encoding of UUIDs and inline DVs in descriptors.
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` (length a multiple of 4): 5 characters per big-endian 4-byte group."""
    if len(data) % 4:
        raise DeletionVectorFormatError(f"z85 needs a multiple of 4 bytes, got {len(data)}")
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise DeletionVectorFormatError(f"z85 needs a multiple of 5 characters: {text!r}")
    out = bytearray()
    for start in range(0, len(text), 5):
        word = 0
        for char in text[start : start + 5]:
            if char not in _Z85_INDEX:
                raise DeletionVectorFormatError(f"{char!r} is not a z85 character")
            word = word * 85 + _Z85_INDEX[char]
        if word > 0xFFFFFFFF:
            raise DeletionVectorFormatError(f"z85 group {text[start : start + 5]!r} overflows")
        out += struct.pack(">I", word)
    return bytes(out)


def serialize_rows(rows: Iterable[int]) -> bytes:
    """The DV bytes of a set of row indexes: magic + RoaringTreemap (portable): the count
    of 32-bit bitmaps (u64 LE), then per bitmap its key, the high 32 bits (u32 LE), and
    the 32-bit Roaring bitmap of the low bits (portable serialisation), keys ascending."""
    by_high: dict[int, list[int]] = {}
    for row in rows:
        if not 0 <= row < 1 << 64:
            raise DeletionVectorFormatError(f"row index {row} out of range")
        by_high.setdefault(row >> 32, []).append(row & 0xFFFFFFFF)
    parts = [struct.pack("<IQ", _MAGIC, len(by_high))]
    for high in sorted(by_high):
        parts.append(struct.pack("<I", high))
        parts.append(BitMap(by_high[high]).serialize())
    return b"".join(parts)


def deserialize_rows(data: bytes) -> list[int]:
    """The row indexes of DV bytes (magic + treemap), ascending."""
    if len(data) < 12:
        raise DeletionVectorFormatError(f"{len(data)} bytes are too short for a DV")
    magic, count = struct.unpack_from("<IQ", data, 0)
    if magic != _MAGIC:
        raise DeletionVectorFormatError(f"bad DV magic {magic}")
    position = 12
    rows: list[int] = []
    for _ in range(count):
        (high,) = struct.unpack_from("<I", data, position)
        position += 4
        bitmap = BitMap.deserialize(data[position:])
        # The portable serialisation's length is known only once parsed.
        position += len(bitmap.serialize())
        rows += [(high << 32) | low for low in bitmap]
    return rows


def frame(dv: bytes) -> bytes:
    """One DV as stored in a DV file at its offset: size, bytes, CRC-32."""
    return struct.pack(">I", len(dv)) + dv + struct.pack(">I", zlib.crc32(dv))


def unframe(data: bytes, offset: int, size: int) -> bytes:
    """The DV bytes at ``offset`` of a DV file's ``data``, size and CRC checked."""
    if offset + 8 + size > len(data):
        raise DeletionVectorFormatError(f"DV at {offset} ({size} bytes) past the file's end")
    (stored,) = struct.unpack_from(">I", data, offset)
    if stored != size:
        raise DeletionVectorFormatError(f"DV at {offset}: size {stored}, descriptor says {size}")
    dv = data[offset + 4 : offset + 4 + size]
    (crc,) = struct.unpack_from(">I", data, offset + 4 + size)
    if crc != zlib.crc32(dv):
        raise DeletionVectorFormatError(f"DV at {offset}: CRC mismatch")
    return dv


@dataclass(frozen=True)
class DeletionVector:
    """A ``deletionVector`` descriptor of an ``add``/``remove`` action (Delta protocol,
    "Deletion Vector Descriptor Schema")."""

    storage_type: str
    """``u`` (relative file named by a UUID), ``i`` (inline) or ``p`` (absolute path)."""
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    """Where the DV starts in its file; absent for inline DVs."""

    @property
    def unique_id(self) -> str:
        """With the file's path, what identifies a logical file (protocol: path + this)."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"

    def relative_path(self) -> str | None:
        """The DV file relative to the table root for storage type ``u``, else None."""
        if self.storage_type != "u":
            return None
        prefix, encoded = self.path_or_inline_dv[:-20], self.path_or_inline_dv[-20:]
        name = f"{DV_FILE_PREFIX}{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return f"{prefix}/{name}" if prefix else name

    def to_json(self) -> dict[str, object]:
        action: dict[str, object] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
        }
        if self.offset is not None:
            action["offset"] = self.offset
        action["sizeInBytes"] = self.size_in_bytes
        action["cardinality"] = self.cardinality
        return action

    @classmethod
    def from_json(cls, action: dict) -> DeletionVector:
        offset = action.get("offset")
        return cls(
            storage_type=str(action["storageType"]),
            path_or_inline_dv=str(action["pathOrInlineDv"]),
            size_in_bytes=int(action["sizeInBytes"]),
            cardinality=int(action["cardinality"]),
            offset=None if offset is None else int(offset),
        )


def read_rows(fs: pafs.FileSystem, root: str, dv: DeletionVector) -> list[int]:
    """The deleted row indexes ``dv`` names, for the table at ``root`` on ``fs``."""
    return read_many(fs, root, [dv])[0]


def read_many(fs: pafs.FileSystem, root: str, dvs: Sequence[DeletionVector]) -> list[list[int]]:
    """The deleted row indexes of each of ``dvs``; each DV file is read once."""
    contents: dict[str, bytes] = {}
    result = []
    for dv in dvs:
        if dv.storage_type == "i":
            rows = deserialize_rows(z85_decode(dv.path_or_inline_dv)[: dv.size_in_bytes])
        else:
            if dv.storage_type == "p":
                where, path = pafs.FileSystem.from_uri(dv.path_or_inline_dv)
            elif dv.storage_type == "u":
                where, path = fs, f"{root}/{dv.relative_path()}"
            else:
                raise DeletionVectorFormatError(f"unknown storage type {dv.storage_type!r}")
            if path not in contents:
                with where.open_input_file(path) as handle:
                    contents[path] = handle.read()
            data = contents[path]
            if not data or data[0] != _FORMAT_VERSION:
                raise DeletionVectorFormatError(f"{path}: not a version {_FORMAT_VERSION} DV file")
            rows = deserialize_rows(unframe(data, dv.offset or 1, dv.size_in_bytes))
        if len(rows) != dv.cardinality:
            raise DeletionVectorFormatError(
                f"DV {dv.unique_id} holds {len(rows)} rows, its descriptor says {dv.cardinality}"
            )
        result.append(rows)
    return result


def write_dv_file(
    fs: pafs.FileSystem, root: str, row_sets: Sequence[Iterable[int]]
) -> list[DeletionVector]:
    """Write one DV file at the table root holding a DV per entry of ``row_sets``;
    returns their descriptors (storage type ``u``), in order. Nothing for no sets."""
    if not row_sets:
        return []
    ident = uuid.uuid4()
    data = bytearray([_FORMAT_VERSION])
    descriptors = []
    for rows in row_sets:
        unique = sorted(set(rows))
        dv = serialize_rows(unique)
        descriptors.append(
            DeletionVector(
                storage_type="u",
                path_or_inline_dv=z85_encode(ident.bytes),
                size_in_bytes=len(dv),
                cardinality=len(unique),
                offset=len(data),
            )
        )
        data += frame(dv)
    name = f"{DV_FILE_PREFIX}{ident}.bin"
    temporary = f"{root}/.{name}.{os.getpid()}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(bytes(data))
    fs.move(temporary, f"{root}/{name}")
    return descriptors


__all__ = [
    "DV_FILE_PREFIX",
    "DeletionVector",
    "deserialize_rows",
    "frame",
    "read_many",
    "read_rows",
    "serialize_rows",
    "unframe",
    "write_dv_file",
    "z85_decode",
    "z85_encode",
]
