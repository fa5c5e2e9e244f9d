"""Held bytes and reused output memory: what a buffer reports holding is what it holds.

* The reported ``nbytes_held`` matches what tracemalloc counts a store allocating.
* MemoryTier's adaptive segments keep the slack of a ring to about a segment.
* gather's output blocks are reused only when nothing refers to them: a batch a
  caller (or a torch tensor made from it) still holds is never overwritten.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
import torch as th
from conftest import frame_stack_stream
from gymnasium import spaces

from chunkstore import ChunkedArray
from chunkstore.tiers import MemoryTier
from chunkstore.tiers._segments import MIN_SEGMENT_BYTES
from sb3_integration import CompressedReplayBuffer, CompressedRolloutBuffer
from sb3_integration.engine._outputs import OUTPUT_BLOCK_MAX_BYTES
from sb3_integration.engine.frames import FrameStore


def fill_store(fs: FrameStore, steps: int, seed: int = 0) -> None:
    for t, (obs, nxt) in enumerate(frame_stack_stream(steps, fs.n_envs, frame=(1, 24, 20), seed=seed)):
        row = t % fs.n_rows
        if t >= fs.n_rows and row % fs.chunk_len == 0:
            fs.release_before((row + 1) % fs.n_rows)
        fs.put_row(row, (obs, nxt))


# -- accounting --------------------------------------------------------------------------------
def test_held_parts_sum_and_cover_what_is_stored():
    fs = FrameStore((4, 24, 20), np.uint8, 300, 2, chunk_len=4, codec="zstd1")
    fill_store(fs, 400)
    held = fs.held_info()
    assert sum(held.values()) == fs.nbytes_held == fs.info()["nbytes_held"]
    arr = fs.frames
    assert held["tier"] == arr.tier.held_nbytes >= arr.tier.used_nbytes + arr.tier.table_nbytes
    assert held["open_chunks"] == arr.open_nbytes and held["chunk_table"] == arr.table_nbytes
    assert held["index"] == fs.index_nbytes and held["output_blocks"] == 0
    # stored counts encoded chunks only: held adds the tier's slack and columns, spare buffers
    assert fs.nbytes_held >= fs.nbytes_stored


def test_tracemalloc_counts_what_the_store_reports():
    """Random (incompressible) frames so the chunks dominate; the store is measured from its birth."""
    def make_and_fill(n_rows: int) -> tuple[FrameStore, int]:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        fs = FrameStore((4, 24, 20), np.uint8, n_rows, 1, chunk_len=4, codec="zstd1")
        fill_store(fs, n_rows + n_rows // 4, seed=n_rows)
        gc.collect()
        return fs, tracemalloc.get_traced_memory()[0] - before

    make_and_fill(200)[0].close()  # first-use allocations (codec contexts, kernels) happen here
    tracemalloc.start()
    try:
        small, traced_small = make_and_fill(1000)
        big, traced_big = make_and_fill(3000)
    finally:
        tracemalloc.stop()
    marginal_traced = traced_big - traced_small
    marginal_reported = big.nbytes_held - small.nbytes_held
    assert 0.95 <= marginal_traced / marginal_reported <= 1.05, (marginal_traced, marginal_reported)


def test_adaptive_segments_keep_a_rings_slack_to_about_a_segment():
    rng = np.random.default_rng(0)
    arr = ChunkedArray(4000, (64, 64), np.uint8, chunk_len=4, codec="zstd1", max_open=2)
    for _lap in range(3):
        for start in range(0, 4000, 4):
            arr.discard(start, start + 4)  # the ring frees its oldest chunk before writing it again
            arr[start:start + 4] = rng.integers(0, 8, (4, 64, 64), dtype=np.uint8)
    tier = arr.tier
    assert isinstance(tier, MemoryTier) and tier.adaptive
    info = tier.info()
    largest = max(seg.capacity for seg in tier._segments.values())
    chunk = int(arr.chunk_nbytes().max())
    # the oldest segment's released prefix, the newest one's unfilled rest, one free segment, and
    # per segment an end too short for the next chunk: nothing grows with the number of laps
    assert info["nbytes"] - info["used_nbytes"] <= 3 * largest + info["nsegments"] * chunk
    assert largest <= max(MIN_SEGMENT_BYTES, 32 * chunk, info["nbytes"] // 128)


def test_fixed_segments_are_still_available():
    tier = MemoryTier(segment_bytes=1 << 16)
    refs = [tier.put(bytes(1000)) for _ in range(100)]
    assert not tier.adaptive and all(seg.capacity == 1 << 16 for seg in tier._segments.values())
    for ref in refs:
        tier.release(ref)


# -- reused output blocks ------------------------------------------------------------------------
def gather_all(fs: FrameStore) -> list[np.ndarray]:
    rows = np.arange(fs.n_rows)
    return fs.gather([(0, rows), (1, rows)], np.zeros(fs.n_rows, np.int64))


def test_a_held_batch_is_never_overwritten():
    fs = FrameStore((4, 24, 20), np.uint8, 40, 1, chunk_len=4, codec="zstd1")
    fill_store(fs, 40)
    first = gather_all(fs)
    want = [x.copy() for x in first]
    fill_store(fs, 40, seed=7)  # new contents: a reuse of first's memory would change it
    second = gather_all(fs)
    assert all(np.array_equal(a, b) for a, b in zip(first, want, strict=True))
    assert not np.shares_memory(first[0], second[0])


def test_a_block_is_reused_once_nothing_refers_to_it():
    fs = FrameStore((4, 24, 20), np.uint8, 40, 1, chunk_len=4, codec="zstd1")
    fill_store(fs, 40)
    first = gather_all(fs)
    address = first[0].__array_interface__["data"][0]
    del first
    again = gather_all(fs)
    assert again[0].__array_interface__["data"][0] == address  # no new block, no page faults
    tensor = th.as_tensor(again[1])  # a tensor shares the block: it stays out of reuse
    del again
    third = gather_all(fs)
    assert third[0].__array_interface__["data"][0] != address
    assert not np.shares_memory(third[1], tensor.numpy())
    assert fs.output_nbytes == 2 * third[0].base.nbytes  # the block the tensor holds, and third's


def test_large_reads_get_fresh_blocks_not_kept(monkeypatch):
    import sb3_integration.engine._outputs as outputs_module

    fs = FrameStore((4, 24, 20), np.uint8, 40, 1, chunk_len=4, codec="zstd1")
    fill_store(fs, 40)
    monkeypatch.setattr(outputs_module, "OUTPUT_BLOCK_MAX_BYTES", 1000)
    first = gather_all(fs)
    del first
    assert fs.output_nbytes == 0
    assert OUTPUT_BLOCK_MAX_BYTES >= 32 << 20  # a sample(256) of Atari stacks (14.5 MB) is kept


def test_sb3_samples_held_across_calls_keep_their_values():
    """DQN keeps its last batch while it samples the next: neither may change the other."""
    space = spaces.Box(0, 255, (4, 24, 20), np.uint8)
    buf = CompressedReplayBuffer(60, space, spaces.Discrete(3), "cpu", chunk_len=4)
    for obs, nxt in frame_stack_stream(80, 1, frame=(1, 24, 20)):
        buf.add(obs, nxt, np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1), [{}])
    np.random.seed(0)  # noqa: NPY002 - SB3 samples with the global RNG
    held = [buf.sample(16) for _ in range(5)]  # five live batches: five distinct blocks
    copies = [(s.observations.clone(), s.next_observations.clone()) for s in held]
    for _ in range(3):
        buf.sample(16)  # reuses only blocks nothing holds
    for s, (o, n) in zip(held, copies, strict=True):
        assert th.equal(s.observations, o) and th.equal(s.next_observations, n)
    ptrs = {s.observations.data_ptr() for s in held}
    assert len(ptrs) == 5


@pytest.mark.parametrize("batch", [None, 64])
def test_rollout_batches_held_keep_their_values(batch):
    space = spaces.Box(0, 255, (4, 24, 20), np.uint8)
    buf = CompressedRolloutBuffer(32, space, spaces.Discrete(3), "cpu", n_envs=2)
    for obs, _ in frame_stack_stream(32, 2, frame=(1, 24, 20)):
        buf.add(obs, np.zeros((2, 1)), np.zeros(2, np.float32), np.zeros(2, np.float32),
                th.zeros(2), th.zeros(2))
    buf.compute_returns_and_advantage(last_values=th.zeros(2), dones=np.zeros(2))
    np.random.seed(1)  # noqa: NPY002 - SB3 samples with the global RNG
    batches = list(buf.get(batch))
    copies = [b.observations.clone() for b in batches]
    for _ in range(2):
        for _ in buf.get(batch):
            pass
    for b, c in zip(batches, copies, strict=True):
        assert th.equal(b.observations, c)
