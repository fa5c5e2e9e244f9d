"""The frame store's native write path (sb3_integration.engine._native_put) against its Python path.

Two stores get the same puts, one with the native layer and one with it disabled
(``FrameStore._put`` env by env, the reference); after every step their
descriptors, streams, last stacks and every stored stack must be identical.
Streams mix what VecFrameStack produces (one new frame per step, zero-padded
stacks after resets) with repeats, stacks that share nothing, writes out of
order (a next observation before its observation: far deltas on the first lap) and ring wrap,
over dtypes whose bits must survive (-0.0, NaN payloads), channel-first and
channel-last stacks, chunk lengths that split a fresh stack over two chunks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstore import native
from sb3_integration.engine.frames import FrameStore, StackLayout

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native layer")

STATE = ("slots", "deltas", "pads", "heads", "released", "last_slot", "last_pad", "has_last", "last", "used")


def assert_same_state(a: FrameStore, b: FrameStore, where: str) -> None:
    for name in STATE:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8)), f"{name} {where}"
        else:
            assert x == y, f"{name} {where}"
    assert a.far == b.far, where
    assert a.ring_frames == b.ring_frames, where
    rows = np.repeat(np.arange(a.n_rows), a.n_envs)
    envs = np.tile(np.arange(a.n_envs), a.n_rows)
    requests = [(w, rows) for w in range(a.stacks_per_row)]
    for got, want in zip(a.gather(requests, envs), b.gather(requests, envs), strict=True):
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"stacks {where}"


def special(dtype: np.dtype, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values whose bits matter: -0.0 and NaN payloads for floats, extremes for integers."""
    if dtype.kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        flat[rng.random(flat.size) < 0.2] = -0.0
        bits = flat.view(f"u{dtype.itemsize}")
        nan = rng.random(flat.size) < 0.1
        bits[nan] = np.array(np.nan, dtype).view(f"u{dtype.itemsize}") | 1  # a NaN with a payload
        return x
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


class Streams:
    """Per env a frame stack that moves on, resets, repeats or jumps, as bytes of any dtype."""

    def __init__(self, rng, n_envs, k, frame, dtype, channels_last):
        self.rng, self.k, self.frame, self.dtype, self.cl = rng, k, frame, np.dtype(dtype), channels_last
        self.stack = np.zeros((n_envs, k, *frame), self.dtype)
        for e in range(n_envs):
            self.stack[e, -1] = special(self.dtype, rng, frame)

    def step(self, e: int, how: str) -> None:
        s = self.stack
        if how == "shift":
            s[e] = np.roll(s[e], -1, axis=0)
            s[e, -1] = special(self.dtype, self.rng, self.frame)
        elif how == "reset":
            s[e] = 0
            s[e, -1] = special(self.dtype, self.rng, self.frame)
        elif how == "jump":
            s[e] = special(self.dtype, self.rng, s[e].shape)
        elif how == "zeros":
            s[e] = 0

    def current(self) -> np.ndarray:
        x = self.stack
        n = len(x)
        if self.cl:
            return np.moveaxis(x, 1, -2).reshape(n, *self.frame[:-1], self.k * self.frame[-1]).copy()
        return x.reshape(n, self.k * self.frame[0], *self.frame[1:]).copy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31),
    n_envs=st.integers(1, 3),
    k=st.integers(1, 4),
    chunk_len=st.integers(1, 5),
    n_rows=st.integers(2, 12),
    dtype=st.sampled_from(["uint8", "float32", "int16", "bool", "float64"]),
    channels_last=st.booleans(),
    spr=st.sampled_from([1, 2]),
    steps=st.integers(5, 60),
)
def test_native_puts_equal_python_puts(seed, n_envs, k, chunk_len, n_rows, dtype, channels_last, spr, steps):
    rng = np.random.default_rng(seed)
    frame = (3, 2, 2) if channels_last else (2, 3, 2)
    streams = Streams(rng, n_envs, k, frame, dtype, channels_last)
    obs_shape = streams.current().shape[1:]
    kw = dict(stacks_per_row=spr, chunk_len=chunk_len, codec="zstd1")
    fast, slow = FrameStore(obs_shape, dtype, n_rows, n_envs, **kw), FrameStore(obs_shape, dtype, n_rows, n_envs, **kw)
    if k > 1:  # the layout is given: detection is not what this test is about
        axis = len(obs_shape) - 1 if channels_last else 0
        lay = StackLayout(tuple(obs_shape), axis, frame[-1] if channels_last else frame[0], k)
        fast.set_layout(lay)
        slow.set_layout(lay)
    hows = ["shift"] * 6 + ["reset", "jump", "same", "zeros"]
    for t in range(steps):
        row = t % n_rows
        if t >= n_rows and row % chunk_len == 0:  # as the replay buffer calls it
            for fs in (fast, slow):
                if fs is slow:
                    with native.disabled():
                        fs.release_before((row + 1) % n_rows)
                else:
                    fs.release_before((row + 1) % n_rows)
        obs = streams.current()
        for e in range(n_envs):
            streams.step(e, hows[rng.integers(len(hows))])
        nxt = streams.current()
        order = rng.random()
        for fs in (fast, slow):
            ctx = native.disabled() if fs is slow else _nothing()
            with ctx:
                if spr == 1:
                    fs.put(0, row, obs)
                elif order < 0.7:
                    fs.put_row(row, (obs, nxt))
                elif order < 0.85:  # one kind at a time
                    fs.put(0, row, obs)
                    fs.put(1, row, nxt)
                else:  # the next observation first: on the first lap its delta is far (obs unwritten)
                    fs.put(1, row, nxt)
                    fs.put(0, row, obs)
        assert_same_state(fast, slow, f"after step {t}")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_native_path_is_taken_and_python_path_when_disabled(monkeypatch):
    """The native writer does the puts (no Python ``_put_env``) unless the native layer is off."""
    calls = []
    real = FrameStore._put_env
    monkeypatch.setattr(FrameStore, "_put_env", lambda self, *a: calls.append(a[:3]) or real(self, *a))
    fs = FrameStore((4, 3, 3), np.uint8, 20, 2, chunk_len=4, codec="zstd1")
    fs.set_layout(StackLayout((4, 3, 3), 0, 1, 4))
    rng = np.random.default_rng(0)
    stack = rng.integers(1, 255, (2, 4, 3, 3), dtype=np.uint8)
    for row in range(20):
        nxt = np.roll(stack, -1, axis=1)
        nxt[:, -1] = rng.integers(1, 255, (2, 3, 3))
        fs.put_row(row, (stack, nxt))
        stack = nxt
    assert calls == []  # every stack stored natively (chunks opened in between)
    with native.disabled():
        fs.put_row(0, (stack, stack))
    assert calls == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
