"""Contract tests every frame store runs: subclass :class:`FrameStoreTests` and supply ``make_store``.

A frame store (:class:`~sb3_integration.engine.frames.FrameStoreAPI`: what the buffers ask of
one) proves itself by subclassing in a test module::

    from sb3_integration.testing import FrameStoreTests

    class TestMyFrameStore(FrameStoreTests):
        def make_store(self, obs_shape, dtype, n_rows, n_envs, **kw):
            return MyFrameStore(obs_shape, dtype, n_rows, n_envs, **kw)

The tests drive the store with frame stacks as SB3's ``VecFrameStack`` makes them
(zero padding after resets, channel-first and channel-last, several dtypes) the way
a replay buffer does (rows written in a ring, ``release_before`` once it wraps), and
compare every ``gather`` with a plain numpy model; then state in and out, pickling,
``clear``, ``close`` and sizes. ``gather`` may return numpy arrays or tensors.

Needs pytest and hypothesis (the ``dev`` extra).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

__all__ = ["FrameStoreTests", "stack_stream"]


def stack_stream(T: int, n_envs: int, *, k: int = 4, frame: tuple[int, ...] = (1, 6, 5),
                 channels_last: bool = False, ep_len: int = 7, dtype: Any = np.uint8,
                 seed: int = 0, high: int = 100) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(obs, next_obs)`` per step, ``(n_envs, *obs_shape)`` each, as VecFrameStack makes them.

    Frames of ``frame`` shape are random (integers in ``[1, high)``, or normal floats), ``k``
    of them stacked on the first axis (or the last, ``channels_last``); env ``e``'s episodes
    last ``ep_len + e`` steps, and a new episode's stack is zeros but its newest frame.
    """
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)

    def new(n: int) -> np.ndarray:
        if dtype.kind == "f":
            return rng.standard_normal((n, *frame)).astype(dtype)
        return rng.integers(1, high, (n, *frame)).astype(dtype)

    stack = np.zeros((n_envs, k, *frame), dtype)
    stack[:, -1] = new(n_envs)
    age = np.zeros(n_envs, int)
    for _ in range(T):
        obs = stack.copy()
        nxt = np.roll(stack, -1, axis=1)
        nxt[:, -1] = new(n_envs)
        age += 1
        done = age % (ep_len + np.arange(n_envs)) == 0
        stack = nxt.copy()
        for e in np.flatnonzero(done):
            stack[e] = 0
            stack[e, -1] = new(1)[0]
        yield _layout(obs, channels_last), _layout(nxt, channels_last)


def _layout(x: np.ndarray, channels_last: bool) -> np.ndarray:
    n, k, *frame = x.shape
    if channels_last:  # (n, k, h, w, c) -> (n, h, w, k * c)
        return np.moveaxis(x, 1, -2).reshape(n, *frame[:-1], k * frame[-1])
    return x.reshape(n, k * frame[0], *frame[1:])


def _numpy(x: Any) -> np.ndarray:
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind in "fc" else x


class FrameStoreTests:
    """What every frame store promises. Subclasses define ``make_store``."""

    def make_store(self, obs_shape: tuple[int, ...], dtype: Any, n_rows: int, n_envs: int, **kw: Any) -> Any:
        raise NotImplementedError("a FrameStoreTests subclass supplies make_store(...)")

    # -- driving a store like a replay buffer, beside a numpy model -------------------------
    def _fill(self, store: Any, model: np.ndarray, T: int, *, seed: int, channels_last: bool = False,
              dtype: Any = np.uint8) -> None:
        n_rows, n_envs = model.shape[1], model.shape[2]
        for t, (obs, nxt) in enumerate(stack_stream(T, n_envs, channels_last=channels_last, dtype=dtype,
                                                    seed=seed)):
            row = t % n_rows
            if t >= n_rows and row % 4 == 0:
                store.release_before((row + 1) % n_rows)
            store.put_row(row, (obs, nxt))
            model[0, row], model[1, row] = obs, nxt

    def _check(self, store: Any, model: np.ndarray, rows: np.ndarray, envs: np.ndarray) -> None:
        got = store.gather([(0, rows), (1, rows)], envs)
        for which, out in enumerate(got):
            out = _numpy(out)
            want = model[which, rows, envs]
            assert out.shape == want.shape and out.dtype == want.dtype
            assert np.array_equal(_bits(out), _bits(want)), f"stack kind {which} differs"

    def _every_row(self, store: Any, model: np.ndarray, written: int) -> None:
        n_rows, n_envs = model.shape[1], model.shape[2]
        rows = np.repeat(np.arange(min(written, n_rows)), n_envs)
        envs = np.tile(np.arange(n_envs), min(written, n_rows))
        self._check(store, model, rows.astype(np.int64), envs.astype(np.int64))

    # -- the contract --------------------------------------------------------------------
    # one test method inherited by every store's subclass: each subclass is its own executor by design
    @settings(max_examples=20, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.differing_executors])
    @given(T=st.integers(1, 70), n_envs=st.integers(1, 3), n_rows=st.integers(4, 24),
           channels_last=st.booleans(), dtype=st.sampled_from(["uint8", "float32", "int16"]),
           seed=st.integers(0, 2**16))
    def test_every_row_reads_back_what_was_put(self, T, n_envs, n_rows, channels_last, dtype, seed):
        obs = next(stack_stream(1, 1, channels_last=channels_last, dtype=dtype))[0]
        store = self.make_store(obs.shape[1:], dtype, n_rows, n_envs)
        model = np.zeros((2, n_rows, n_envs, *obs.shape[1:]), dtype)
        self._fill(store, model, T, seed=seed, channels_last=channels_last, dtype=dtype)
        self._every_row(store, model, T)
        rng = np.random.default_rng(seed)
        for n in (1, 32):  # random batches, repeats included
            rows = rng.integers(0, min(T, n_rows), n).astype(np.int64)
            self._check(store, model, rows, rng.integers(0, n_envs, n).astype(np.int64))
        store.close()

    def test_float_bit_patterns_survive(self):
        store = self.make_store((4, 2, 3), np.float32, 8, 1)
        x = np.zeros((1, 4, 2, 3), np.float32)
        x[0, 1, 0, 0], x[0, 2, 0, 0], x[0, 3, 0, 0] = -0.0, np.float32("nan"), np.inf
        store.put_row(0, (x, x))
        got = _numpy(store.gather([(0, np.array([0]))], np.array([0]))[0])
        assert np.array_equal(_bits(got), _bits(x))
        store.close()

    def test_unwritten_rows_read_as_zeros(self):
        store = self.make_store((4, 6, 5), np.uint8, 10, 2)
        model = np.zeros((2, 10, 2, 4, 6, 5), np.uint8)
        self._fill(store, model, 3, seed=1)
        self._check(store, model, np.arange(10, dtype=np.int64), np.zeros(10, np.int64))
        store.close()

    def test_state_dict_round_trip_and_later_writes(self):
        store = self.make_store((4, 6, 5), np.uint8, 16, 2)
        model = np.zeros((2, 16, 2, 4, 6, 5), np.uint8)
        self._fill(store, model, 40, seed=2)
        other = self.make_store((4, 6, 5), np.uint8, 16, 2)
        with store.state_dict() as state:
            other.load_state_dict(state)
        self._every_row(other, model, 40)
        for t, (obs, nxt) in enumerate(stack_stream(10, 2, seed=3)):  # both keep going alike
            row = (40 + t) % 16
            for s in (store, other):
                if row % 4 == 0:
                    s.release_before((row + 1) % 16)
                s.put_row(row, (obs, nxt))
            model[0, row], model[1, row] = obs, nxt
        self._every_row(store, model, 50)
        self._every_row(other, model, 50)
        store.close()
        other.close()

    def test_pickle_round_trip(self):
        store = self.make_store((4, 6, 5), np.uint8, 12, 1)
        model = np.zeros((2, 12, 1, 4, 6, 5), np.uint8)
        self._fill(store, model, 30, seed=4)
        clone = pickle.loads(pickle.dumps(store))
        self._every_row(clone, model, 30)
        store.close()
        clone.close()

    def test_clear_reads_zeros_and_accepts_new_rows(self):
        store = self.make_store((4, 6, 5), np.uint8, 12, 1)
        model = np.zeros((2, 12, 1, 4, 6, 5), np.uint8)
        self._fill(store, model, 20, seed=5)
        store.clear()
        self._every_row(store, np.zeros_like(model), 12)
        model[...] = 0
        self._fill(store, model, 15, seed=6)
        self._every_row(store, model, 15)
        store.close()

    #: bytes a store reserves before it holds anything (a device store's first heap segment and
    #: read inbox): a subclass sets it to that store's reservation, and the size check is on the rest
    reserved_nbytes = 0

    def test_sizes_and_info(self):
        store = self.make_store((4, 6, 5), np.uint8, 64, 1)
        model = np.zeros((2, 64, 1, 4, 6, 5), np.uint8)
        self._fill(store, model, 64, seed=7)
        info = store.info()
        assert info["nbytes_stored"] == store.nbytes_stored > 0
        # each frame once: less than the stacks
        assert store.nbytes_stored - self.reserved_nbytes < model.nbytes
        store.close()

    def test_close_releases_and_refuses_use(self):
        store = self.make_store((4, 6, 5), np.uint8, 8, 1)
        model = np.zeros((2, 8, 1, 4, 6, 5), np.uint8)
        self._fill(store, model, 5, seed=8)
        store.close()
        store.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            store.gather([(0, np.array([0]))], np.array([0]))
