"""The chunk-level calls of a ChunkedArray take a chunk index in range, or raise naming it.

Before, ``chunk(-1)`` returned the last chunk (negative item indices wrapped), ``chunk(5)`` of a
5-chunk array an empty array, ``chunk_rows(99)`` a number, ``chunk_bytes(99)`` numpy's bare
``IndexError: index 99 is out of bounds for axis 0 with size 5`` and ``iter_chunk_bytes([-1])``
the last chunk's bytes; ``put_chunk_bytes`` and ``writable_chunk`` already said
``chunk 99 out of range for a (5 chunks)``, which all of them say now.
"""

from __future__ import annotations

import numpy as np
import pytest

from chunkstore import ChunkedArray


@pytest.fixture
def arr() -> ChunkedArray:
    a = ChunkedArray(18, (3,), np.uint8, chunk_len=4, codec="zstd3", name="a")  # 5 chunks, the last of 2
    a[:] = np.arange(54, dtype=np.uint8).reshape(18, 3)
    a.flush()
    return a


CALLS = {
    "chunk": lambda a, c: a.chunk(c),
    "chunk_rows": lambda a, c: a.chunk_rows(c),
    "chunk_bytes": lambda a, c: a.chunk_bytes(c),
    "iter_chunk_bytes": lambda a, c: list(a.iter_chunk_bytes(np.array([0, c]))),
    "put_chunk_bytes": lambda a, c: a.put_chunk_bytes(c, bytes(a.chunk_bytes(0))),
    "writable_chunk": lambda a, c: a.writable_chunk(c),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("c", [-1, -5, 5, 99, 2**62])
def test_a_chunk_out_of_range_is_an_index_error_naming_it(arr, call, c):
    before = np.asarray(arr).copy()
    with pytest.raises(IndexError, match=rf"chunk {c} out of range for a \(5 chunks\)"):
        CALLS[call](arr, c)
    np.testing.assert_array_equal(np.asarray(arr), before)


@pytest.mark.parametrize("call", ["chunk", "chunk_rows", "chunk_bytes"])
@pytest.mark.parametrize("c", [1.0, "1", True, None])
def test_a_chunk_index_that_is_not_an_int_is_a_type_error(arr, call, c):
    with pytest.raises(TypeError, match="a chunk index must be an int"):
        CALLS[call](arr, c)


def test_iter_chunk_bytes_takes_a_1d_integer_array(arr):
    with pytest.raises(TypeError, match="chunks must be a 1-D array of ints"):
        list(arr.iter_chunk_bytes(np.array([0.0, 1.0])))
    with pytest.raises(TypeError, match="chunks must be a 1-D array of ints"):
        list(arr.iter_chunk_bytes(np.array([[0, 1]])))
    assert list(arr.iter_chunk_bytes(np.array([], np.int64))) == []


@pytest.mark.parametrize("c", [0, 3, 4, np.int64(4), np.uint8(2)])
def test_chunks_in_range_read_as_before(arr, c):
    rows = 2 if c == 4 else 4
    want = np.arange(54, dtype=np.uint8).reshape(18, 3)[int(c) * 4:int(c) * 4 + rows]
    np.testing.assert_array_equal(arr.chunk(c), want)
    assert arr.chunk_rows(c) == rows
    assert bytes(arr.chunk_bytes(c)) == bytes(next(arr.iter_chunk_bytes(np.array([c]))))


# -- discard: whole numbers only; DeviceArray.discard_chunks: chunk indices in range -----------------
@pytest.mark.parametrize(("start", "stop"), [(1.5, 8), (0, 8.0), (True, 8), ("0", 8), (None, 8)])
def test_discard_takes_int_bounds(arr, start, stop):
    before = np.asarray(arr).copy()
    with pytest.raises(TypeError, match=r"discard's (start|stop) must be an int"):
        arr.discard(start, stop)
    np.testing.assert_array_equal(np.asarray(arr), before)


def test_discard_with_ints_still_frees_whole_chunks(arr):
    arr.discard(np.int64(3), 12)  # chunks 1 and 2 lie wholly inside [3, 12)
    got = np.asarray(arr)
    assert not got[4:12].any()
    np.testing.assert_array_equal(got[:4], np.arange(12, dtype=np.uint8).reshape(4, 3))


@pytest.mark.parametrize(("chunks", "error", "match"), [
    ([1.5], TypeError, "chunks must be a 1-D array of ints"),
    ([[1]], TypeError, "chunks must be a 1-D array of ints"),
    ([-1], IndexError, r"chunk -1 out of range for d \(5 chunks\)"),
    ([5], IndexError, r"chunk 5 out of range for d \(5 chunks\)"),
])
def test_device_array_discard_chunks_refuses_bad_indices(chunks, error, match):
    from chunkstore.device import DeviceArray

    d = DeviceArray(18, (3,), np.uint8, chunk_len=4, device="cpu", name="d")
    d[:] = np.arange(1, 55, dtype=np.uint8).reshape(18, 3)
    before = d.take(np.arange(18)).numpy().copy()
    with pytest.raises(error, match=match):
        d.discard_chunks(np.array(chunks))
    np.testing.assert_array_equal(d.take(np.arange(18)).numpy(), before)  # 1.5 freed chunk 1 before
    d.discard_chunks(np.array([1]))
    assert not d.take(np.arange(4, 8)).numpy().any()
    d.close()
