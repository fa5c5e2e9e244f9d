"""sample()'s batch_size on the prioritized buffers: a clear error naming it, the buffer unchanged.

Before, the priority index's own check answered ("k must be an int >= 1, got -1": a name the
caller never gave, a bound that batch size 0 does not obey) with ValueError for floats and bools,
where SB3's uniform buffers (and ours) raise TypeError.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from sb3_integration import (
    CompressedPrioritizedDictReplayBuffer,
    CompressedPrioritizedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
)

OBS = spaces.Box(0, 255, (2, 3), np.uint8)
DICT_OBS = spaces.Dict({"img": OBS})
CLASSES = {"replay": (CompressedPrioritizedReplayBuffer, OBS),
           "dict": (CompressedPrioritizedDictReplayBuffer, DICT_OBS),
           "nstep": (CompressedPrioritizedNStepReplayBuffer, OBS)}


def filled(kind: str):  # type: ignore[no-untyped-def]
    cls, space = CLASSES[kind]
    buf = cls(16, space, spaces.Discrete(3), device="cpu", n_envs=2)
    for t in range(5):
        o = np.full((2, 2, 3), t, np.uint8)
        o = {"img": o} if kind == "dict" else o
        buf.add(o, o, np.zeros((2, 1)), np.ones(2, np.float32), np.zeros(2), [{}, {}])
    return buf


@pytest.mark.parametrize("kind", CLASSES)
@pytest.mark.parametrize(("batch_size", "error", "match"), [
    (-1, ValueError, "batch_size must be >= 0, got -1"),
    (np.int64(-3), ValueError, "batch_size must be >= 0, got -3"),
    (2.0, TypeError, r"batch_size must be an int, got 2.0 \(float\)"),
    (np.float32(2), TypeError, "batch_size must be an int"),
    (True, TypeError, r"batch_size must be an int, got True \(bool\)"),
    ("4", TypeError, "batch_size must be an int"),
    (None, TypeError, "batch_size must be an int"),
    (th.tensor(4), TypeError, "batch_size must be an int"),
])
def test_a_bad_batch_size_is_refused_and_nothing_changes(kind, batch_size, error, match) -> None:  # type: ignore[no-untyped-def]
    buf = filled(kind)
    masses, pending, state = buf.priorities().copy(), len(buf._pending), np.random.get_state()[1].copy()  # noqa: NPY002 - SB3 draws from the global RNG
    with pytest.raises(error, match=match):
        buf.sample(batch_size)
    np.testing.assert_array_equal(buf.priorities(), masses)
    assert len(buf._pending) == pending
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002 - no draw was made


@pytest.mark.parametrize("kind", CLASSES)
@pytest.mark.parametrize("batch_size", [0, 1, np.int32(4), np.uint8(3), np.int64(7)])
def test_integer_batch_sizes_of_any_integer_type_sample(kind, batch_size) -> None:  # type: ignore[no-untyped-def]
    s = filled(kind).sample(batch_size)
    assert len(s.indices) == int(batch_size) == len(s.weights) == len(s.rewards)
    assert (s.indices < 10).all()
