"""Lazy reads: CRC32s checked on the bytes read, and nothing of the file left resident.

* The native read path's CRC32 (zlib's ``crc32`` called by address, and the kernels'
  own slicing-by-8 table used when no libz loads) is bit-exact with ``zlib.crc32``.
* A chunk damaged before the load is caught at its first read, native (one thread and
  shared between threads) and Python paths, naming the chunk and the file; a batch that
  fails marks none of its chunks checked.
* Reading every chunk of a lazily loaded file, in random batches, leaves none of the
  file's mapped pages resident (the file mapping's ``Rss`` in ``/proc/self/smaps``),
  where reading the same chunks through the mapping does (the control).
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstore import ChunkedArray, CorruptChunkError, hdf5, native


def _kernels():
    if not native.available():
        pytest.skip("the native layer is not available here")
    from chunkstore.native import _kernels, _lib

    return _kernels, _lib


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=5000), start=st.integers(0, 7))
def test_native_crc32_is_bit_exact_with_zlib(data, start):
    k, lib = _kernels()
    buf = np.frombuffer(b"\x00" * start + data, np.uint8)  # unaligned starts too
    addr = buf.ctypes.data + start
    want = zlib.crc32(data)
    assert int(k.crc32_table(addr, len(data))) == want
    assert int(k.crc32_at(0, addr, len(data))) == want  # no libz: the table
    fn = lib.crc32_address()
    if fn:
        assert int(k.crc32_at(fn, addr, len(data))) == want


def test_native_crc32_of_a_large_buffer():
    k, lib = _kernels()
    data = np.random.default_rng(0).integers(0, 256, (3 << 20) + 13, dtype=np.uint8)
    want = zlib.crc32(data)
    assert int(k.crc32_table(data.ctypes.data, data.size)) == want
    fn = lib.crc32_address()
    if fn:
        assert int(k.crc32_at(fn, data.ctypes.data, data.size)) == want


def _store(path: Path, n: int = 512, item: tuple[int, ...] = (16, 16), chunk_len: int = 8) -> np.ndarray:
    arr = ChunkedArray(n, item, np.uint8, chunk_len=chunk_len, codec="zstd3", name="obs")
    data = np.random.default_rng(1).integers(0, 256, (n, *item), dtype=np.uint8)
    data[::3] = 7  # some chunks compress, some do not
    arr[:] = data
    hdf5.save(path, {"obs": arr}, {"pos": np.array(n - 1)}, {}, progress=False)
    return data


def _damage(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x10]))


@pytest.mark.parametrize("path_kind", ["native", "native-threads", "python"])
def test_a_chunk_damaged_before_the_load_is_caught_at_its_first_read(tmp_path, monkeypatch, path_kind):
    if path_kind == "python":
        monkeypatch.setattr(native, "available", lambda: False)
    elif not native.available():
        pytest.skip("the native layer is not available here")
    path = tmp_path / "buf.h5"
    want = _store(path)
    spans = hdf5.chunk_spans(path, "obs")
    c, off, n = (int(v) for v in spans[21])
    _damage(path, off + n - 1)
    rows = np.random.default_rng(2).permutation(512)[:200]  # a batch that holds the damaged chunk
    rows[0] = c * 8 + 3
    with hdf5.load(path, cache=0) as store:
        arr = store.arrays["obs"]
        if path_kind == "native-threads":
            arr.threads = 2
            monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)  # 200 items of 256 B: shared all the same
        for _ in range(2):
            with pytest.raises(CorruptChunkError, match=rf"obs: chunk {c} in .*buf.h5 is corrupt") as e:
                arr[rows]
            assert (e.value.array, e.value.chunk) == ("obs", c)
        if path_kind != "python":  # one native batch: none of its chunks counts as checked
            assert arr.tier.info()["verified_chunks"] == 0
        good = rows[rows // 8 != c]
        assert np.array_equal(arr[good], want[good])
        assert arr.tier.info()["verified_chunks"] == len(np.unique(good // 8))
        with pytest.raises(CorruptChunkError, match=rf"chunk {c} in "):
            arr[[c * 8]]


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (by inode), from /proc/self/smaps."""
    ino = os.stat(path).st_ino
    total, mine = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
                mine = head[4].isdigit() and int(head[4]) == ino
            elif mine and line.startswith("Rss:"):
                total += int(head[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
@pytest.mark.parametrize("path_kind", ["native", "python"])
def test_lazy_reads_leave_no_file_page_resident(tmp_path, monkeypatch, path_kind):
    if path_kind == "python":
        monkeypatch.setattr(native, "available", lambda: False)
    elif not native.available():
        pytest.skip("the native layer is not available here")
    path = tmp_path / "big.h5"
    want = _store(path, n=2048, item=(64, 64), chunk_len=4)  # ~6 MB of chunks, 512 of them
    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("no /proc/self/smaps")
    with hdf5.load(path, cache=0) as store:
        arr = store.arrays["obs"]
        assert _mapped_rss_kb(path) < 1024
        rng = np.random.default_rng(3)
        for rows in np.array_split(rng.permutation(2048), 16):  # every chunk, in random batches
            assert np.array_equal(arr[rows], want[rows])
        assert arr.tier.info()["verified_chunks"] == 512
        assert _mapped_rss_kb(path) < 1024  # what the reads left mapped in: nothing of 6 MB
        # the control: the same chunks read through the mapping are resident (the measure works)
        spans = hdf5.chunk_spans(path, "obs")
        view = store._file.view(0, store._file.size)
        for _c, o, n in spans.tolist():
            zlib.crc32(view[o:o + n])
        assert _mapped_rss_kb(path) > int(spans[:, 2].sum()) // 1024 // 2
