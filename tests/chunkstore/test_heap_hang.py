"""A damaged global heap collection is a FormatError, never HDF5's endless loop.

HDF5 2.0 walks a global heap collection (where every string attribute of a chunkstore
file lives) by each object's declared size without checking that a step moves forward:
a free-space object of size 0 (one flipped bit of a size can land the walk on one) loops
forever with the GIL held, inside ``h5py``'s attribute read. The load runs in a child
process here, so a regression fails by the child's timeout instead of hanging the suite.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from chunkstore import ChunkedArray, hdf5
from chunkstore.hdf5._heapcheck import check_collection


def collections(data: bytes) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """Each collection's offset and its objects: (offset of the object, index, declared size)."""
    out = []
    at = data.find(b"GCOL")
    while at >= 0:
        (size,) = struct.unpack_from("<Q", data, at + 8)
        objects, p = [], 16
        while size - p >= 16:
            (index,) = struct.unpack_from("<H", data, at + p)
            (nbytes,) = struct.unpack_from("<Q", data, at + p + 8)
            objects.append((at + p, index, nbytes))
            p += 16 + ((nbytes + 7) & ~7) if index else nbytes
        out.append((at, objects))
        at = data.find(b"GCOL", at + size)
    return out


@pytest.fixture
def saved(tmp_path) -> Path:
    a = ChunkedArray(64, (3,), np.int16, chunk_len=8, codec="zstd3", name="a")
    a[:40] = np.arange(120).reshape(40, 3)
    path = tmp_path / "s.h5"
    hdf5.save(path, {"a": a}, {"e": np.arange(5)}, {"pos": 40}, progress=False)
    return path


def load_in_child(path: Path) -> str:
    code = textwrap.dedent(f"""
        from chunkstore import FormatError, hdf5
        for what in ("load", "verify"):
            try:
                if what == "load":
                    hdf5.load({str(path)!r}).close()
                    print(what, "ok")
                else:
                    print(what, [p.message for p in hdf5.verify({str(path)!r})])
            except FormatError as e:
                print(what, "FormatError", e)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_free_space_object_of_size_0_is_a_format_error_not_a_hang(saved):
    data = bytearray(saved.read_bytes())
    found = [(o, i, n) for _, objs in collections(bytes(data)) for o, i, n in objs if i == 0]
    assert found, "the file holds a global heap collection with free space"
    offset = found[0][0]
    data[offset + 8:offset + 16] = bytes(8)  # the free-space object's size: 0
    saved.write_bytes(bytes(data))
    out = load_in_child(saved)
    assert "load FormatError" in out and "global heap collection" in out, out
    verify = out.splitlines()[-1]
    assert verify.startswith("verify") and "global heap collection" in verify, out


def test_an_object_size_flipped_past_the_collection_is_a_format_error(saved):
    data = bytearray(saved.read_bytes())
    offset, index, nbytes = next(x for _, objs in collections(bytes(data)) for x in objs if x[1] > 0)
    data[offset + 8:offset + 16] = struct.pack("<Q", nbytes | 1 << 62)  # a step that wraps the pointer
    saved.write_bytes(bytes(data))
    out = load_in_child(saved)
    assert "load FormatError" in out and f"object {index} at byte {offset}" in out, out


def test_every_object_of_a_good_file_walks(saved):
    data = saved.read_bytes()
    for at, _ in collections(data):
        check_collection(memoryview(data)[at:], at, len(data))  # nothing raised
    with hdf5.load(saved) as store:
        np.testing.assert_array_equal(store.arrays["a"][:40], np.arange(120).reshape(40, 3))


@pytest.mark.parametrize(("size", "match"), [(2**64 - 1, "declares 18446744073709551615 bytes"),
                                              (8, "declares 8 bytes")])
def test_a_collection_size_beyond_the_file_or_below_its_header_is_refused(size, match):
    buf = bytearray(b"GCOL\x01\x00\x00\x00" + struct.pack("<Q", size) + bytes(4080))
    with pytest.raises(OSError, match=match):
        check_collection(memoryview(buf), 100, 100 + len(buf))


def test_a_collection_larger_than_hdf5s_first_read_is_walked_whole(tmp_path):
    """HDF5 reads a collection's first 4096 bytes, then the rest from where they end: an
    object beyond the first 4096 bytes (a 20 KB attribute) is checked too."""
    a = ChunkedArray(64, (3,), np.int16, chunk_len=8, codec="zstd3", name="a")
    a[:40] = 5
    path = tmp_path / "big_attr.h5"
    hdf5.save(path, {"a": a}, attrs={"pos": 1, "note": "n" * 20000}, progress=False)
    data = bytearray(path.read_bytes())
    big = [(at, objs) for at, objs in collections(bytes(data)) if struct.unpack_from("<Q", data, at + 8)[0] > 4096]
    assert big, "the 20 KB attribute sits in a collection larger than 4096 bytes"
    _, objects = big[0]
    first = objects[0][0]  # the attribute's object; a forged size steps past HDF5's first 4096 bytes
    data[first + 8:first + 16] = struct.pack("<Q", 8000)
    offset = first + 16 + 8000
    data[offset:offset + 16] = bytes(16)  # where the step lands: a free-space object of size 0
    path.write_bytes(bytes(data))
    out = load_in_child(path)
    assert "load FormatError" in out and f"object 0 at byte {offset} declares 0 bytes" in out, out
