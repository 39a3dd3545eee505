"""The deletion-vector codec (etl/delta/dv.py), without Spark: round trips, the
delta-kernel-rs inline test vector, CRC, z85, several DVs in one file."""

from __future__ import annotations

import struct
import uuid

import pyarrow.fs as pafs
import pytest

from etl.delta.dv import (
    DV_FILE_PREFIX,
    DeletionVector,
    deserialize_rows,
    frame,
    read_rows,
    serialize_rows,
    unframe,
    write_dv_file,
    z85_decode,
    z85_encode,
)
from etl.errors import DeletionVectorFormatError

# delta-kernel-rs (DeletionVectorDescriptor tests): an inline DV of rows {3,4,7,11,18,29}.
KERNEL_INLINE = "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"


def test_kernel_inline_vector_decodes_to_its_rows() -> None:
    dv = DeletionVector("i", KERNEL_INLINE, size_in_bytes=44, cardinality=6)
    assert read_rows(pafs.LocalFileSystem(), "/nowhere", dv) == [3, 4, 7, 11, 18, 29]
    assert dv.unique_id == "i" + KERNEL_INLINE  # no offset for inline DVs


def test_z85_matches_the_rfc_example_and_round_trips() -> None:
    # ZeroMQ RFC 32's test vector.
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld") == data
    ident = uuid.uuid4()
    assert len(z85_encode(ident.bytes)) == 20
    assert z85_decode(z85_encode(ident.bytes)) == ident.bytes
    with pytest.raises(DeletionVectorFormatError):
        z85_decode("Hell~")
    with pytest.raises(DeletionVectorFormatError):
        z85_encode(b"abc")


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [0],
        list(range(5000)),  # > 4096 in one container: a bitmap container
        list(range(0, 300_000, 3)),  # row ids > 65535: several containers
        [1, 70_000, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 7],  # several 32-bit bitmaps
        list(range(100_000, 110_000)),  # a run
    ],
)
def test_rows_round_trip(rows: list[int]) -> None:
    data = serialize_rows(rows)
    assert struct.unpack_from("<I", data)[0] == 1681511377
    assert deserialize_rows(data) == sorted(rows)


def test_frame_checks_size_and_crc() -> None:
    dv = serialize_rows([1, 2, 3])
    framed = b"\x01" + frame(dv)
    assert unframe(framed, 1, len(dv)) == dv
    corrupt = bytearray(framed)
    corrupt[10] ^= 0xFF
    with pytest.raises(DeletionVectorFormatError, match="CRC"):
        unframe(bytes(corrupt), 1, len(dv))
    with pytest.raises(DeletionVectorFormatError, match="size"):
        unframe(framed, 1, len(dv) - 1)


def test_a_file_of_two_dvs_at_different_offsets(tmp_path) -> None:
    fs = pafs.LocalFileSystem()
    first, second = [5, 6, 7], list(range(70_000, 75_000))
    a, b = write_dv_file(fs, str(tmp_path), [first, second])
    assert a.path_or_inline_dv == b.path_or_inline_dv and a.relative_path() == b.relative_path()
    assert a.offset == 1 and b.offset == 1 + 4 + a.size_in_bytes + 4
    assert (a.cardinality, b.cardinality) == (3, 5000)
    (name,) = [p.name for p in tmp_path.iterdir()]
    assert name == a.relative_path() and name.startswith(DV_FILE_PREFIX)
    assert read_rows(fs, str(tmp_path), a) == first
    assert read_rows(fs, str(tmp_path), b) == second
    assert DeletionVector.from_json(b.to_json()) == b
    assert b.unique_id == f"u{b.path_or_inline_dv}@{b.offset}"


def test_a_prefixed_descriptor_names_a_file_in_a_subdirectory() -> None:
    ident = uuid.uuid4()
    dv = DeletionVector("u", "ab" + z85_encode(ident.bytes), 40, 1, offset=1)
    assert dv.relative_path() == f"ab/{DV_FILE_PREFIX}{ident}.bin"


def test_a_wrong_cardinality_is_refused(tmp_path) -> None:
    fs = pafs.LocalFileSystem()
    (dv,) = write_dv_file(fs, str(tmp_path), [[1, 2]])
    wrong = DeletionVector(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes, 3, dv.offset)
    with pytest.raises(DeletionVectorFormatError, match="3"):
        read_rows(fs, str(tmp_path), wrong)
