"""An out-of-range index is reported as given: uint64's 2**63 is not cast to int64's -2**63 first."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from chunkstore import ChunkedArray
from chunkstore.priority import PriorityIndex
from sb3_integration import CompressedPrioritizedReplayBuffer

BIG = 2**63


def test_chunk_indices(tmp_path):
    arr = ChunkedArray(64, (2,), np.uint8, chunk_len=8)
    arr.write(0, np.ones((64, 2), np.uint8))
    arr.flush()
    with pytest.raises(IndexError, match=f"chunk {BIG} out of range"):
        list(arr.iter_chunk_bytes(np.array([0, BIG], np.uint64)))


def test_priority_slots():
    index = PriorityIndex(16)
    with pytest.raises(ValueError, match=rf"got 0\.\.{BIG}$"):
        index.update(np.array([0, BIG], np.uint64), np.ones(2))


@pytest.fixture
def prioritized():
    buf = CompressedPrioritizedReplayBuffer(64, spaces.Box(0, 255, (4,), np.uint8), spaces.Discrete(2), device="cpu")
    o = np.zeros((1, 4), np.uint8)
    for _ in range(5):
        buf.add(o, o, np.array([0]), np.array([1.0]), np.array([False]), [{}])
    return buf


def test_update_priorities(prioritized):
    with pytest.raises(ValueError, match=rf"got {BIG}$"):
        prioritized.update_priorities(np.array([BIG], np.uint64), np.array([1.0]))


def test_buffer_array_views(prioritized):
    with pytest.raises(IndexError, match=f"index {BIG} is out of bounds"):
        prioritized.observations[np.uint64(BIG)]
