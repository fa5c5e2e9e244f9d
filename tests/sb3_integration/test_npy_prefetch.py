"""NpyStream.prefetched_blocks: the DQN import's blocks read by a helper thread, as blocks() reads them."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

import numpy as np
import pytest

from sb3_integration.offline._npy_stream import CheckpointError, NpyStream


def _npy_gz(path, arr: np.ndarray) -> str:
    with gzip.open(path, "wb", compresslevel=1) as f:
        np.save(f, arr)
    return str(path)


def _prefetchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "npy-prefetch"]


@pytest.mark.parametrize("rows, stop", [(7, None), (7, 50), (64, None), (1, 5), (100, 0)])
def test_prefetched_blocks_equal_blocks(tmp_path, rows, stop):
    arr = np.random.default_rng(0).integers(0, 255, (61, 5, 3), dtype=np.uint8)
    path = _npy_gz(tmp_path / "a.npy.gz", arr)
    with NpyStream(path) as a, NpyStream(path) as b:
        plain = [(s, blk.copy()) for s, blk in a.blocks(rows, stop=stop)]
        fetched = [(s, blk.copy()) for s, blk in b.prefetched_blocks(rows, stop=stop)]
        b.finish()  # the rest and the gzip trailer, after the thread is done
    assert [s for s, _ in fetched] == [s for s, _ in plain]
    for (_, x), (_, y) in zip(plain, fetched, strict=True):
        np.testing.assert_array_equal(x, y)
    n = len(arr) if stop is None else stop
    if n:
        np.testing.assert_array_equal(np.concatenate([blk for _, blk in fetched]), arr[:n])
    assert not _prefetchers()


def test_a_block_stays_valid_until_the_next_is_asked_for(tmp_path):
    arr = np.arange(40 * 8, dtype=np.int32).reshape(40, 8)
    path = _npy_gz(tmp_path / "a.npy.gz", arr)
    with NpyStream(path) as s:
        for start, blk in s.prefetched_blocks(3):
            threading.Event().wait(0.002)  # the reader runs ahead meanwhile
            np.testing.assert_array_equal(blk, arr[start:start + len(blk)])


def test_a_truncated_file_raises_in_the_caller_naming_it(tmp_path):
    arr = np.random.default_rng(1).integers(0, 255, (8000, 256), dtype=np.uint8)  # 2 MB, incompressible
    path = _npy_gz(tmp_path / "a.npy.gz", arr)
    data = Path(path).read_bytes()
    cut = tmp_path / "cut.npy.gz"
    cut.write_bytes(data[: len(data) // 2])
    got = []
    with NpyStream(cut) as s, pytest.raises(CheckpointError, match=r"cut\.npy\.gz.*truncated"):
        for _, blk in s.prefetched_blocks(512):
            got.append(blk.copy())
    assert not _prefetchers()
    assert got  # the blocks before the cut came through, then the reader's error
    np.testing.assert_array_equal(np.concatenate(got), arr[:512 * len(got)])


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_leaving_the_loop_early_stops_the_thread(tmp_path, exc):
    arr = np.zeros((500, 32), np.uint8)
    path = _npy_gz(tmp_path / "a.npy.gz", arr)
    with NpyStream(path) as s, pytest.raises(exc):
        for start, _ in s.prefetched_blocks(4):
            if start >= 8:
                raise exc("stop")
    assert not _prefetchers()
    with NpyStream(path) as s:  # break without an exception
        blocks = s.prefetched_blocks(4)
        next(blocks)
        blocks.close()
    assert not _prefetchers()
