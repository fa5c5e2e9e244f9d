"""The native read path (chunkstore.native) against the Python path and a plain numpy model.

Every read through the native kernels must equal, bit for bit, what the Python
path and a numpy array give: every native codec, dtype, tier, open/sealed/unwritten
chunk, zero ids, strided outputs, and thread count. A damaged chunk raises
CorruptChunkError naming the array and chunk; a missing native layer falls back
to the Python path with one warning.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstore import (
    ChunkedArray,
    CorruptChunkError,
    DeviceTier,
    DiskTier,
    HybridTier,
    MemoryTier,
    native,
)
from chunkstore import hdf5 as fmt

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native layer: {native.unavailable_reason()}")

DTYPES = [np.uint8, np.int16, np.float32, np.float64]
SHAPES = [(), (3,), (2, 5), (6, 5, 2)]
CODECS = ["zstd3", "zstd-1", "none", "zstd3+dict"]


def tier_for(kind, tmp_path):
    if kind == "memory":
        return MemoryTier(segment_bytes=1 << 12)
    if kind == "disk":
        return DiskTier(tmp_path, segment_bytes=1 << 12, max_mapped_bytes=1 << 14)
    if kind == "hybrid":
        return HybridTier(1 << 13, tmp_path, segment_bytes=1 << 12)
    return DeviceTier("cpu", segment_bytes=1 << 12)


def values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        a = rng.standard_normal(shape).astype(dtype)
        flat = a.reshape(-1)
        if flat.size > 3:  # bit patterns a careless path would lose
            flat[0], flat[1], flat[2] = -0.0, np.nan, np.inf
            flat[3:4].view(np.uint8)[:] ^= 1
        return a
    return rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


def fill(arr, model, rng, n_writes):
    """Random runs and scattered items: sealed, open and never-written chunks all occur."""
    cap = arr.capacity
    for _ in range(n_writes):
        if rng.random() < 0.6:
            a = int(rng.integers(0, cap))
            b = int(rng.integers(a, min(cap, a + 3 * arr.chunk_len) + 1))
            v = values(rng, (b - a, *arr.item_shape), arr.dtype)
            arr[a:b] = v
            model[a:b] = v
        else:
            idx = rng.choice(cap, size=min(cap, 3), replace=False)
            v = values(rng, (len(idx), *arr.item_shape), arr.dtype)
            arr[idx] = v
            model[idx] = v


def bits(a):
    """``a`` as unsigned integers of its item size: equality is bit equality (NaN, -0.0)."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def assert_reads_equal(arr, model, rng):
    ids = rng.integers(-1, arr.capacity, size=int(rng.integers(1, 3 * arr.capacity)))
    want = np.where((ids >= 0).reshape(-1, *([1] * len(arr.item_shape))), model[ids.clip(0)], 0).astype(arr.dtype)
    got = np.empty_like(want)
    arr.take_into(ids, got)
    with native.disabled():
        slow = np.empty_like(want)
        arr.take_into(ids, slow)
        assert np.array_equal(bits(arr.take(ids.clip(0))), bits(model[ids.clip(0)]))
    assert np.array_equal(bits(got), bits(want))
    assert np.array_equal(bits(slow), bits(want))
    assert np.array_equal(bits(arr.take(ids.clip(0))), bits(model[ids.clip(0)]))
    # a strided output: items interleaved along a new last axis (a channel-last stack)
    if arr.item_shape:
        k = 3
        out = np.zeros((len(ids), *arr.item_shape, k), arr.dtype)
        view = np.moveaxis(out, -1, 1)[:, 1]
        arr.take_into(ids, view)
        assert np.array_equal(bits(view), bits(want))
        assert not out[..., 0].any() and not out[..., 2].any()  # nothing written beside it


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    capacity=st.integers(1, 70),
    chunk_len=st.integers(1, 9),
    shape=st.sampled_from(SHAPES),
    dtype=st.sampled_from(DTYPES),
    codec=st.sampled_from(CODECS[:3]),
    tier=st.sampled_from(["memory", "disk", "hybrid", "device"]),
    seed=st.integers(0, 2**16),
)
def test_native_reads_equal_python_and_numpy(tmp_path, capacity, chunk_len, shape, dtype, codec, tier, seed):
    rng = np.random.default_rng(seed)
    arr = ChunkedArray(capacity, shape, dtype, chunk_len=chunk_len, codec=codec, tier=tier_for(tier, tmp_path),
                       max_open=2, name="obs")
    model = np.zeros((capacity, *shape), dtype)
    for _ in range(3):
        fill(arr, model, rng, 4)
        assert_reads_equal(arr, model, rng)
    arr.tier.close()


def test_a_threaded_read_inside_one_chunk_needs_no_pool(monkeypatch):
    """Enough items for threads, all in one chunk: one part, served on the calling thread."""
    from chunkstore import _threads

    assert native.available()
    monkeypatch.setattr(_threads, "_pools", {})  # no pool made yet (as in a fresh process)
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)  # 600 bytes: threaded but for the one chunk
    arr = ChunkedArray(2048, (), np.uint8, chunk_len=1024, codec="zstd3", threads=2)
    arr[:] = np.arange(2048) % 251
    ids = np.arange(600)
    assert np.array_equal(arr.take(ids), (ids % 251).astype(np.uint8))
    assert "chunkstore-native" not in _threads._pools


@pytest.mark.parametrize(("min_bytes", "pooled"), [(native.PARALLEL_MIN_BYTES, False), (0, True)])
def test_a_read_of_few_bytes_runs_on_the_caller_alone(monkeypatch, min_bytes, pooled):
    """600 items of 4 bytes in 150 chunks: enough items for a helper, too few bytes to pay for one."""
    from chunkstore import _threads

    assert native.available() and native.PARALLEL_MIN_BYTES > 600 * 4
    monkeypatch.setattr(_threads, "_pools", {})
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", min_bytes)
    arr = ChunkedArray(2048, (), np.float32, chunk_len=4, codec="zstd1", threads=2)
    arr[:] = np.arange(2048, dtype=np.float32)
    ids = np.random.default_rng(0).permutation(2048)[:600]
    assert np.array_equal(arr.take(ids), ids.astype(np.float32))
    assert ("chunkstore-native" in _threads._pools) is pooled


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_trained_dictionary_and_threads(threads, monkeypatch):
    """zstd with a trained dictionary, read with several threads, before and after training."""
    monkeypatch.setattr(native, "PARALLEL_MIN_ITEMS", 1)  # every read split, however small
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)
    rng = np.random.default_rng(threads)
    base = rng.integers(0, 255, (64, 64), dtype=np.uint8)
    frames = np.repeat(base[None], 1200, axis=0)  # a shared background (what a dictionary learns)
    frames[np.arange(1200)[:, None], rng.integers(0, 64, (1200, 8)), rng.integers(0, 64, (1200, 8))] = 7
    arr = ChunkedArray(1200, (64, 64), np.uint8, chunk_len=4, codec="zstd3+dict", threads=threads)
    arr[:1199] = frames[:1199]  # the last chunk stays open
    model = np.zeros_like(frames)
    model[:1199] = frames[:1199]
    assert arr.codec.wants_training
    assert_reads_equal(arr, model, rng)
    arr.train_codec()
    assert arr.codec.dictionary is not None
    assert_reads_equal(arr, model, rng)


def test_torch_threads_unchanged_by_threaded_reads(monkeypatch):
    monkeypatch.setattr(native, "PARALLEL_MIN_ITEMS", 1)
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)
    before = th.get_num_threads()
    arr = ChunkedArray(400, (16,), np.uint8, chunk_len=4, threads=4)
    arr[:] = np.arange(400, dtype=np.uint8)[:, None]
    for _ in range(5):
        arr.take(np.arange(400)[::-1])
    assert th.get_num_threads() == before


def test_lazily_loaded_file_reads_natively(tmp_path):
    rng = np.random.default_rng(0)
    arr = ChunkedArray(300, (7, 3), np.float32, chunk_len=8, codec="zstd3", name="obs")
    model = values(rng, (300, 7, 3), np.float32)
    arr[:] = model
    fmt.save(tmp_path / "s.h5", {"obs": arr}, progress=False)
    with fmt.load(tmp_path / "s.h5", lazy=True, cache=0) as store:
        loaded = store.arrays["obs"]
        assert loaded.tier.kind == "file" and loaded.tier.checks_reads
        loaded[5] = model[5] + 1  # a chunk rewritten after the load lives in RAM
        model[5] += 1
        assert_reads_equal(loaded, model, rng)
        assert loaded.tier.info()["verified_chunks"] > 0  # CRCs checked on first native read


def test_corrupt_chunks_raise_naming_array_and_chunk():
    arr = ChunkedArray(64, (8,), np.uint8, chunk_len=16, codec="zstd1", name="obs")
    arr[:] = np.random.default_rng(0).integers(0, 4, size=(64, 8), dtype=np.uint8)
    data = bytearray(arr.chunk_bytes(2))
    data[len(data) // 2:] = b"\xff" * (len(data) - len(data) // 2)
    arr.put_chunk_bytes(2, bytes(data))
    with pytest.raises(CorruptChunkError, match="obs: chunk 2") as info:
        arr.take([33])
    assert (info.value.array, info.value.chunk) == ("obs", 2)
    # a valid frame of the wrong size: bounded, never written past the chunk
    big = ChunkedArray(64, (16,), np.uint8, chunk_len=16, codec="zstd1")
    big[:] = 1
    arr.put_chunk_bytes(3, bytes(big.chunk_bytes(0)))
    with pytest.raises(CorruptChunkError, match="chunk 3"):
        arr.take([50])
    raw = ChunkedArray(64, (8,), np.uint8, chunk_len=16, codec="none", name="raw")
    raw[:] = 7
    raw.put_chunk_bytes(1, b"\x07" * 100)  # a raw chunk must hold exactly its items
    with pytest.raises(CorruptChunkError, match="raw: chunk 1") as info:
        raw.take([20])
    assert info.value.chunk == 1


_NO_NUMBA = """
import sys, warnings
sys.modules["numba"] = None  # numba cannot be imported
import numpy as np
from chunkstore import ChunkedArray, native
arr = ChunkedArray(100, (4,), np.uint8, chunk_len=8)
arr[:] = np.arange(100, dtype=np.uint8)[:, None]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    a = arr.take(np.arange(100)[::-1])
    b = arr.take(np.arange(100))
assert np.array_equal(a[::-1], b) and int(b[42, 0]) == 42
assert not native.available()
print(len([w for w in caught if "native read path is unavailable" in str(w.message)]))
"""


def test_missing_native_layer_falls_back_with_one_warning():
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_NO_NUMBA)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONWARNINGS": "default"})
    assert proc.stdout.strip() == "1", proc.stderr


def test_disabled_by_environment_variable():
    code = "from chunkstore import native; print(native.available(), native.unavailable_reason())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "CHUNKSTORE_NATIVE": "0"})
    assert proc.stdout.strip() == "False disabled by CHUNKSTORE_NATIVE=0"
    assert "unavailable" not in proc.stderr  # switched off on purpose: no warning


def test_unwritable_numba_cache_still_works(tmp_path):
    """A read-only install: numba cannot cache, the kernels still compile and run."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    code = ("import numpy as np; from chunkstore import ChunkedArray, native\n"
            "a = ChunkedArray(50, (3,), np.uint8, chunk_len=4); a[:] = 5\n"
            "print(native.available(), int(a.take(np.arange(50)).sum()))")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(ro / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert proc.stdout.split() == ["True", str(50 * 3 * 5)], proc.stderr


@pytest.mark.parametrize("tier", ["disk", "hybrid", "device"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_replay_buffer_on_every_tier_equals_sb3(tier, channels_last, tmp_path):
    """Frame stacks with resets (padding), wrap-around and 2 envs, on each tier, against SB3."""
    from conftest import frame_stack_stream
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    shape = (6, 5, 4) if channels_last else (4, 6, 5)
    space, act = spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(3)
    ref = ReplayBuffer(40, space, act, "cpu", n_envs=2)
    ours = CompressedReplayBuffer(40, space, act, "cpu", n_envs=2, chunk_len=3,
                                  tier=lambda: tier_for(tier, tmp_path))
    rng = np.random.default_rng(0)
    frame = (6, 5, 1) if channels_last else (1, 6, 5)
    for t, (obs, nxt) in enumerate(frame_stack_stream(70, 2, frame=frame, channels_last=channels_last)):
        args = (obs, nxt, rng.integers(0, 3, 2), rng.standard_normal(2).astype(np.float32),
                rng.random(2) < 0.1, [{"TimeLimit.truncated": False}] * 2)
        ref.add(*args)
        ours.add(*args)
        if t % 9 == 8:
            for seed in (t, t + 1):
                np.random.seed(seed)  # noqa: NPY002 - SB3 samples with the global RNG
                a = ref.sample(16)
                np.random.seed(seed)  # noqa: NPY002
                b = ours.sample(16)
                assert all((x is None and y is None) or th.equal(x, y) for x, y in zip(a, b, strict=True)), (t, seed)
    fs = ours.frame_stores[None]
    assert fs.frames.tier.kind == tier
    assert (fs.layout.axis, fs.layout.depth) == ((2 if channels_last else 0), 4)  # strided outputs when last


def test_far_next_stacks_read_back(read_path):
    """A next stack written long after its row's observation: its delta is kept aside (FAR)."""
    from sb3_integration.engine.frames import FAR, NEXT, OBS, FrameStore

    rng = np.random.default_rng(0)
    fs = FrameStore((1, 6, 5), np.uint8, n_rows=400, n_envs=2, chunk_len=4)
    stacks = rng.integers(1, 255, (400, 2, 1, 6, 5), dtype=np.uint8)
    late = rng.integers(1, 255, (2, 1, 6, 5), dtype=np.uint8)
    for row in range(400):
        fs.put(OBS, row, stacks[row])
    fs.put(NEXT, 0, late)  # 400 frames after row 0's observation
    assert fs.deltas[0, 0, 0] == FAR and len(fs.far) == 2
    rows = np.array([0, 0, 5, 399])
    envs = np.array([0, 1, 1, 0])
    obs, nxt = fs.gather([(OBS, rows), (NEXT, rows)], envs)
    assert np.array_equal(obs, stacks[rows, envs])
    assert np.array_equal(nxt[:2], late[[0, 1]]) and not nxt[2:].any()  # unwritten next stacks are zeros


@settings(max_examples=25, deadline=None)
@given(
    chunk_len=st.integers(1, 12),
    n_envs=st.integers(1, 3),
    rows=st.integers(3, 40),
    channels_last=st.booleans(),
    ep_len=st.integers(2, 15),
    steps=st.integers(1, 90),
    python_path=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_replay_sampling_equals_sb3_property(chunk_len, n_envs, rows, channels_last, ep_len, steps, python_path,
                                             seed):
    """Random chunk lengths, envs, capacities (wrap-around), episode lengths (padding), layouts."""
    from conftest import frame_stack_stream
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    shape, frame = ((6, 5, 4), (6, 5, 1)) if channels_last else ((4, 6, 5), (1, 6, 5))
    space, act = spaces.Box(0, 255, shape, np.uint8), spaces.Discrete(3)
    ref = ReplayBuffer(rows * n_envs, space, act, "cpu", n_envs=n_envs)
    ours = CompressedReplayBuffer(rows * n_envs, space, act, "cpu", n_envs=n_envs, chunk_len=chunk_len)
    rng = np.random.default_rng(seed)
    stream = frame_stack_stream(steps, n_envs, frame=frame, channels_last=channels_last, ep_len=ep_len, seed=seed)
    for obs, nxt in stream:
        args = (obs, nxt, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32),
                rng.random(n_envs) < 0.2, [{"TimeLimit.truncated": bool(x)} for x in rng.random(n_envs) < 0.1])
        ref.add(*args)
        ours.add(*args)
    with native.disabled() if python_path else contextlib.nullcontext():
        for s in range(3):
            np.random.seed(seed + s)  # noqa: NPY002 - SB3 samples with the global RNG
            a = ref.sample(24)
            np.random.seed(seed + s)  # noqa: NPY002
            b = ours.sample(24)
            assert all(th.equal(x, y) for x, y in zip(a, b, strict=True) if x is not None)
        assert np.array_equal(np.asarray(ours.next_observations), ref.next_observations)


def test_a_small_read_whose_helper_ran_beside_the_caller_runs_alone_for_a_while(monkeypatch):
    """SOLO_SHARE / SOLO_READS: a helper that did not run in parallel is left out of the next small reads."""
    from chunkstore import _threads

    assert native.available()
    monkeypatch.setattr(_threads, "_pools", {})
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(native, "_solo_left", 0)
    monkeypatch.setattr(native, "SOLO_READS", 3)
    arr = ChunkedArray(2048, (), np.float32, chunk_len=4, codec="zstd1", threads=2)
    arr[:] = np.arange(2048, dtype=np.float32)
    ids = np.random.default_rng(0).permutation(2048)[:200]  # 200 items in ~150 chunks: one helper
    monkeypatch.setattr(native, "SOLO_SHARE", 0.0)  # no caller serves less than nothing: the helper stays
    assert np.array_equal(arr.take(ids), ids.astype(np.float32))
    assert native._solo_left == 0 and "chunkstore-native" in _threads._pools
    monkeypatch.setattr(native, "SOLO_SHARE", 1.01)  # every caller served less: the helper is left out
    assert np.array_equal(arr.take(ids), ids.astype(np.float32))
    assert native._solo_left == 3
    monkeypatch.setattr(_threads, "_pools", {})
    for left in (2, 1, 0):  # the next three small reads run alone (no pool is asked for) ...
        assert np.array_equal(arr.take(ids[::-1]), ids[::-1].astype(np.float32))
        assert native._solo_left == left and "chunkstore-native" not in _threads._pools
    assert np.array_equal(arr.take(ids), ids.astype(np.float32))  # ... then one tries the helper again
    assert "chunkstore-native" in _threads._pools and native._solo_left == 3
    big = np.random.default_rng(1).permutation(2048)[:native.PARALLEL_MIN_ITEMS]  # not small: never alone
    monkeypatch.setattr(_threads, "_pools", {})
    assert np.array_equal(arr.take(big), big.astype(np.float32))
    assert native._solo_left == 3 and "chunkstore-native" in _threads._pools
