"""A Ctrl-C at every traced point of a ChunkedArray write, on every host tier, with native reads between.

The native read path keeps a table of segment addresses that a tier rebuilds only when told its
storage moved. A write interrupted after a new segment was published but before the table was
marked stale left a segment the table did not know; the next write's repair handed it to the
free list, and a reuse put chunks into it: every later read raised "no host address" (seen in
the slow suite's random-signal run on a lazily loaded file). Reads between writes are what keep
the table fresh, so they are part of the scenario.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import count_events, interrupted

from chunkstore import ChunkedArray, hdf5
from chunkstore.tiers import DiskTier, HybridTier, MemoryTier

ROWS, ROW = 48, 600  # random bytes: ~600-byte chunk parts, a few chunks per 4 KiB segment


def _array(kind: str, directory, data: np.ndarray) -> ChunkedArray:
    if kind == "file":  # a lazily loaded file: new chunks go to the FileTier's MemoryTier
        first = ChunkedArray(ROWS, (ROW,), np.uint8, chunk_len=2, codec="zstd")
        first[:4] = data[:4]
        first.flush()
        directory.mkdir()
        hdf5.save(directory / "a.h5", {"a": first}, progress=False)
        arr = hdf5.load(directory / "a.h5").arrays["a"]
        arr.tier.writable.segment_bytes = 4096
        arr.tier.writable.adaptive = False
        return arr
    tier = {"memory": lambda: MemoryTier(segment_bytes=4096),
            "disk": lambda: DiskTier(directory, segment_bytes=4096),
            "hybrid": lambda: HybridTier(8192, directory, segment_bytes=4096)}[kind]()
    return ChunkedArray(ROWS, (ROW,), np.uint8, chunk_len=2, codec="zstd", tier=tier, own_tier=True)


@pytest.mark.parametrize("kind", ["memory", "disk", "hybrid", "file"])
def test_an_interrupted_write_never_strands_a_chunk_outside_the_read_table(kind, tmp_path):
    data = np.random.default_rng(0).integers(0, 255, (ROWS, ROW), dtype=np.uint8)

    def write(arr: ChunkedArray, rows: range) -> None:
        for i in rows:
            arr[i] = data[i]
            np.testing.assert_array_equal(arr.take(np.arange(i + 1)), data[:i + 1])  # a native read

    failures, points = [], 0
    for r in range(4, 16, 3):
        probe = _array(kind, tmp_path / f"probe{r}", data)
        write(probe, range(r))
        n = count_events(lambda probe=probe, r=r: probe.__setitem__(r, data[r]))
        for k in range(1, n + 1):
            arr = _array(kind, tmp_path / f"r{r}k{k}", data)
            write(arr, range(r))
            points += interrupted(lambda arr=arr, r=r: arr.__setitem__(r, data[r]), k)
            try:
                write(arr, range(r, ROWS))  # the retry, then writes that open and reuse segments
            except Exception as e:
                failures.append((r, k, f"{type(e).__name__}: {e}"))
            arr.close()
    assert points > 50, points  # the interrupts did land inside the writes
    assert not failures, failures[:5]
