"""Late priority updates land only on the transitions their own sample drew (issue 34, item 2),
and priorities that cannot be held as the index promises are refused in our words (item 4).

Two samples can return the same index values with different generations (concentrated
priorities, small batches): an update of the older one must be dropped, whichever sample
returned those values last. The property test drives a buffer with interleaved adds,
samples and late updates (of the returned indices object, or of a copy of it) against a plain
fp64 model of what each update may change.
"""

from __future__ import annotations

import collections
import gc

import numpy as np
import pytest
import torch as th
from conftest import random_transitions
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as hst

from chunkstore.priority import PriorityIndex
from sb3_integration import CompressedPrioritizedReplayBuffer
from sb3_integration.buffers.prioritized import PENDING_SAMPLES, checked_update

OBS, ACT = spaces.Box(0, 255, (2, 3, 3), np.uint8), spaces.Discrete(3)


def concentrated(buffer_device=None):  # type: ignore[no-untyped-def]
    """The issue's case up to sample A: 4 slots, alpha 1, eps 0, all the mass on slot 0."""
    buf = CompressedPrioritizedReplayBuffer(4, OBS, ACT, "cpu", chunk_len=2, alpha=1.0, epsilon=0.0,
                                            buffer_device=buffer_device)
    trs = list(random_transitions(OBS, ACT, 5, 1, seed=4))
    for tr in trs[:4]:
        buf.add(*tr)
    buf.update_priorities(np.arange(4), np.array([1000.0, 0.0, 0.0, 0.0]))
    return buf, trs[4]


@pytest.mark.parametrize("buffer_device", [None, "cpu"])
def test_a_late_update_of_an_earlier_sample_with_the_same_indices_is_dropped(buffer_device) -> None:  # type: ignore[no-untyped-def]
    buf, new = concentrated(buffer_device)
    a = buf.sample(1)
    assert int(a.indices[0]) == 0
    buf.add(*new)  # overwrites slot 0 (pos was 0): a new transition, at the largest priority (1000)
    b = buf.sample(1)
    assert int(b.indices[0]) == 0
    buf.update_priorities(a.indices, np.array([7.0]))  # A's, late: slot 0 holds another transition now
    assert buf.priorities()[0] == 1000.0
    buf.update_priorities(b.indices, np.array([5.0]))  # B's is current
    assert buf.priorities()[0] == 5.0


def test_a_copy_of_indices_two_samples_returned_is_never_applied_to_the_newer_transition() -> None:
    buf, new = concentrated()
    a = buf.sample(1)
    buf.add(*new)
    b = buf.sample(1)
    buf.update_priorities(a.indices.copy(), np.array([7.0]))  # A's or B's? It might be A's: dropped
    buf.update_priorities(b.indices.tolist(), np.array([7.0]))  # the same values: dropped too
    assert buf.priorities()[0] == 1000.0
    del a
    gc.collect()
    buf.update_priorities(b.indices, np.array([5.0]))  # B's own object: B's record, applied
    assert buf.priorities()[0] == 5.0


def test_an_update_long_after_its_sample_is_still_checked_by_its_indices_object() -> None:
    """The object's record lives as long as the object, beyond the window of copies."""
    buf, new = concentrated()
    a = buf.sample(1)
    buf.add(*new)
    for _ in range(PENDING_SAMPLES + 10):  # A's values leave the by-value window
        buf.sample(1)
    buf.update_priorities(a.indices, np.array([7.0]))
    assert buf.priorities()[0] == 1000.0


def test_records_of_freed_indices_are_forgotten() -> None:
    buf, _ = concentrated()
    for _ in range(1000):
        buf.sample(2)
    gc.collect()
    assert len(buf._pending._by_object) == 0 and len(buf._pending) == PENDING_SAMPLES
    kept = [buf.sample(2) for _ in range(5)]
    assert len(buf._pending._by_object) == 5 and kept


# -- the property test ----------------------------------------------------------------------------
class Model:
    """What a prioritized buffer should hold, in fp64: p^alpha, generation and max per slot, and
    which samples' records an update of a copy of their indices finds (see ``_pending``)."""

    def __init__(self, slots: int, n_envs: int, alpha: float, eps: float) -> None:
        self.n_envs, self.alpha, self.eps = n_envs, alpha, eps
        self.mass = np.zeros(slots)
        self.gen = np.zeros(slots, np.int64)
        self.max = 1.0
        self.window: collections.deque[tuple[bytes, np.ndarray]] = collections.deque(maxlen=PENDING_SAMPLES)

    def add(self, pos: int) -> None:
        s = pos * self.n_envs + np.arange(self.n_envs)
        self.mass[s], self.gen[s] = self.max, self.gen[s] + 1

    def sampled(self, slots: np.ndarray) -> np.ndarray:
        gens = self.gen[slots].copy()
        self.window.append((slots.tobytes(), gens))
        return gens

    def update(self, slots: np.ndarray, pri: np.ndarray, gens: np.ndarray | None) -> None:
        """``gens``: the sample's own (its indices object), or None: a copy, found by value, which
        applies only where every recent sample with those values drew the current generation."""
        if gens is None:
            ok = np.logical_and.reduce([g == self.gen[slots] for v, g in self.window if v == slots.tobytes()]
                                       + [np.ones(len(slots), bool)])
        else:
            ok = gens == self.gen[slots]
        for s, p, k in zip(slots, pri, ok, strict=True):
            if k:
                self.mass[s] = (p + self.eps) ** self.alpha
                self.max = max(self.max, self.mass[s])


def drive(seed: int, rows: int, n_envs: int, alpha: float, eps: float, n_ops: int) -> int:
    """``n_ops`` interleaved adds, samples and late updates, each checked against the model."""
    rng = np.random.default_rng(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - the buffer draws with SB3's global RNG
    buf = CompressedPrioritizedReplayBuffer(rows * n_envs, OBS, ACT, "cpu", n_envs=n_envs, chunk_len=2,
                                            alpha=alpha, epsilon=eps, beta=0.5)
    model = Model(rows * n_envs, n_envs, alpha, eps)
    pool = list(random_transitions(OBS, ACT, 7, n_envs, seed=seed % 1000))  # contents do not matter here
    held: list[tuple[object, np.ndarray, np.ndarray]] = []  # samples not yet updated: (indices, slots, gens)
    p_add, p_sample = rng.uniform(0.1, 0.5), rng.uniform(0.2, 0.5)
    for _ in range(n_ops):
        u = rng.random()
        stored = (rows if buf.full else buf.pos) * n_envs
        if u < p_add or not stored:
            pos = buf.pos
            buf.add(*pool[pos % len(pool)])
            model.add(pos)
        elif u < p_add + p_sample:
            k = int(rng.integers(1, 4))
            if not model.mass[:stored].sum() > 0:
                with pytest.raises(ValueError, match="priority 0"):
                    buf.sample(k)
                continue
            s = buf.sample(k)
            slots = np.asarray(s.indices)
            assert (model.mass[slots] > 0).all() and slots.max() < stored
            m = model.mass[slots]
            np.testing.assert_allclose(s.weights.numpy(), (m / model.mass[model.mass > 0].min()) ** -0.5, rtol=1e-5)
            held.append((s.indices, slots.copy(), model.sampled(slots)))
            if len(held) > 12:  # a learner that never updates some samples: their objects go
                held.pop(int(rng.integers(len(held))))
        elif held:
            indices, slots, gens = held.pop(int(rng.integers(len(held))))
            # concentrated: most priorities 0 (no mass with eps 0), the rest over seven decades
            pri = np.where(rng.random(len(slots)) < 0.6, 0.0, 10.0 ** rng.uniform(-3, 4, len(slots)))
            if rng.random() < 0.25:  # a copy of the indices: found by value
                buf.update_priorities(slots.tolist(), pri)
                model.update(slots, pri, None)
            else:
                buf.update_priorities(indices, pri)
                model.update(slots, pri, gens)
        got, want = buf.priorities(), model.mass ** (1.0 / alpha)
        if not (np.abs(got - want) <= 2e-6 * want).all():  # fp32 masses: relative rounding below 6e-8
            np.testing.assert_allclose(got, want, rtol=2e-6)
    return n_ops


PROPERTY = dict(seed=hst.integers(0, 2**63 - 1), rows=hst.integers(1, 6), n_envs=hst.sampled_from([1, 2]),
                alpha=hst.sampled_from([1.0, 0.5]), eps=hst.sampled_from([0.0, 1e-3]))


@settings(max_examples=12, deadline=None)
@given(**PROPERTY)
def test_interleaved_adds_samples_and_late_updates_match_an_fp64_model(seed, rows, n_envs, alpha, eps) -> None:  # type: ignore[no-untyped-def]
    drive(seed, rows, n_envs, alpha, eps, 300)


@pytest.mark.slow
@settings(max_examples=50, deadline=None)
@given(**PROPERTY)
def test_interleaved_adds_samples_and_late_updates_match_an_fp64_model_long(seed, rows, n_envs, alpha, eps) -> None:  # type: ignore[no-untyped-def]
    """50 examples of 2000 operations: 10^5 interleaved adds, samples and late updates."""
    drive(seed, rows, n_envs, alpha, eps, 2000)


# -- priorities in our words ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [th.bfloat16, th.float16])
def test_low_precision_tensor_priorities_are_accepted(dtype) -> None:  # type: ignore[no-untyped-def]
    buf, _ = concentrated()
    s = buf.sample(1)
    buf.update_priorities(s.indices, th.tensor([3.5], dtype=dtype))
    assert buf.priorities()[0] == 3.5
    _, pri, _ = checked_update(th.tensor([0, 1]), th.tensor([0.25, 2.0], dtype=dtype), 1.0, 0.0)  # Ray's check
    np.testing.assert_array_equal(pri, [0.25, 2.0])


def test_indices_on_the_meta_device_are_refused_in_our_words() -> None:
    buf = CompressedPrioritizedReplayBuffer(8, OBS, ACT, "meta", buffer_device="meta", chunk_len=2)
    for tr in random_transitions(OBS, ACT, 4, 1):
        buf.add(*tr)
    s = buf.sample(2)
    with pytest.raises(ValueError, match="meta device"):
        buf.update_priorities(s.indices, np.ones(2))
    with pytest.raises(ValueError, match="meta device"):
        buf.update_priorities(np.arange(2), th.ones(2, device="meta"))


@pytest.mark.parametrize("p", [1e-46, 1e-45, 2e-45, 1e-39])
def test_priorities_below_float32s_normal_range_are_refused(p) -> None:  # type: ignore[no-untyped-def]
    """A mass fp32 holds only with less precision than the index promises (or as 0) is refused."""
    buf, _ = concentrated()
    before = buf.priorities().copy()
    with pytest.raises(ValueError, match="smallest normal"):
        buf.update_priorities(np.arange(4), np.full(4, p))
    np.testing.assert_array_equal(buf.priorities(), before)
    index = PriorityIndex(4)
    with pytest.raises(ValueError, match="smallest normal"):
        index.update([0], [p])
    with pytest.raises(ValueError, match="smallest normal"):
        index.set([0], [p])


def test_the_smallest_normal_priority_and_zero_are_held_exactly() -> None:
    buf, _ = concentrated()
    tiny = float(np.finfo(np.float32).tiny)
    buf.update_priorities(np.arange(4), np.array([tiny, 2 * tiny, 0.0, 3.0]))
    np.testing.assert_array_equal(buf.priorities(), [tiny, 2 * tiny, 0.0, 3.0])
    # alpha < 1: a priority below fp32's range whose mass is inside it is fine
    index_buf = CompressedPrioritizedReplayBuffer(4, OBS, ACT, "cpu", chunk_len=2, alpha=0.5, epsilon=0.0)
    for tr in random_transitions(OBS, ACT, 4, 1):
        index_buf.add(*tr)
    index_buf.update_priorities(np.arange(4), np.full(4, 1e-46))
    np.testing.assert_allclose(index_buf.priority_index.get(np.arange(4)), 1e-23, rtol=1e-7)
