"""sb3-extra-buffers compatibility: names, arguments, codec names, attributes, GPU names."""

from __future__ import annotations

import inspect
import sys
import warnings

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer, RolloutBuffer

import sb3_integration
from chunkstore import CodecConfigError, MemoryTier
from chunkstore.device import DeviceArray
from sb3_integration import (
    CodecFallbackWarning,
    CompressedArray,
    CompressedDictReplayBuffer,
    CompressedDictRolloutBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
    DummyCls,
    GpuReplayBuffer,
    GpuRolloutBuffer,
    find_buffer_dtypes,
    find_gpu_buffer_dtypes,
    find_smallest_dtype,
    has_igzip,
    has_numba,
    init_jit,
)

IMAGE = spaces.Box(0, 255, (4, 12, 12), np.uint8)
VECTOR = spaces.Box(-5, 5, (3,), np.float32)
DICT = spaces.Dict({"image": IMAGE, "vector": VECTOR})
ACT = spaces.Discrete(3)
# every name in sb3-extra-buffers 0.5's example and benchmark lists
SB3EB_NAMES = ["none", "rle", "rle-old", "rle-jit", "igzip0", "igzip1", "igzip3", "gzip1", "gzip3", "zstd1",
               "zstd3", "zstd5", "zstd-1", "zstd-3", "zstd-5", "zstd10", "zstd15", "zstd22", "zstd-20", "zstd-50",
               "zstd-100", "lz4-frame/1", "lz4-frame/5", "lz4-frame/9", "lz4-frame/12", "lz4-block/1",
               "lz4-block/5", "lz4-block/9", "lz4-block/16", "igzip", "gzip", "zstd", "lz4-frame", "lz4-block"]


def stream(space, n, n_envs=1, seed=0):
    rng = np.random.default_rng(seed)

    def one():
        if isinstance(space, spaces.Dict):
            return {k: one_of(s) for k, s in space.spaces.items()}
        return one_of(space)

    def one_of(s):
        if s.dtype == np.uint8:
            return rng.integers(0, 4, (n_envs, *s.shape)).astype(np.uint8)
        return rng.standard_normal((n_envs, *s.shape)).astype(s.dtype)

    obs = one()
    for t in range(n):
        nxt = one()
        done = np.array([(t + e) % 7 == 6 for e in range(n_envs)])
        infos = [{"TimeLimit.truncated": bool(d and t % 2)} for d in done]
        yield obs, nxt, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32), done, infos
        obs = nxt


def fill(*buffers, space=IMAGE, n=30, n_envs=1):
    for tr in stream(space, n, n_envs):
        for b in buffers:
            b.add(*tr)


def same(a, b):
    """Two sample tuples are equal field by field (dtype, shape, values; None fields both None)."""
    return all((x is None and y is None) or (x.dtype == y.dtype and th.equal(x, y))
               for x, y in zip(a, b, strict=True))


def sample(buf, seed, batch=16):
    np.random.seed(seed)  # noqa: NPY002 - SB3 samples from the global legacy generator
    return buf.sample(batch)


# -- names and signatures ----------------------------------------------------------------------
def test_every_public_name_of_sb3eb_compressed_is_exported():
    compressed = pytest.importorskip("sb3_extra_buffers.compressed")
    missing = [name for name in compressed.__all__ if not hasattr(sb3_integration, name)]
    assert not missing


@pytest.mark.parametrize("name", ["CompressedReplayBuffer", "CompressedDictReplayBuffer",
                                  "CompressedRolloutBuffer", "CompressedDictRolloutBuffer"])
def test_constructor_takes_sb3ebs_arguments_in_its_order(name):
    compressed = pytest.importorskip("sb3_extra_buffers.compressed")
    theirs = list(inspect.signature(getattr(compressed, name).__init__).parameters)
    ours = list(inspect.signature(getattr(sb3_integration, name).__init__).parameters)
    assert ours[: len(theirs)] == theirs


def test_helpers_match_sb3eb():
    compressed = pytest.importorskip("sb3_extra_buffers.compressed")
    for shape in [(4, 84, 84), (3,), 100, (210, 160, 3)]:
        assert find_buffer_dtypes(shape, np.uint8) == compressed.find_buffer_dtypes(shape, np.uint8)
    assert has_numba() is True and init_jit(elem_type=np.uint8) is None
    DummyCls(1, 2, x=3)
    with pytest.raises(TypeError, match=r"chunkstore\.ChunkedArray"):
        CompressedArray((10,), np.uint8, (4, 84, 84))
    assert find_gpu_buffer_dtypes((4, 84, 84)) == {"elem_type": th.uint8, "runs_type": th.uint16}


@given(st.integers(0, 2**70), st.booleans())
def test_find_smallest_dtype_matches_sb3eb(value, signed):
    from sb3_extra_buffers.compressed import find_smallest_dtype as theirs

    assert find_smallest_dtype(value, signed) is theirs(value, signed)


# -- codec names ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SB3EB_NAMES)
def test_every_sb3eb_codec_name_builds_a_buffer_that_samples_like_sb3(name):
    ref = ReplayBuffer(30, IMAGE, ACT, "cpu")
    ours = CompressedReplayBuffer(30, IMAGE, ACT, "cpu", compression_method=name, chunk_len=4)
    fill(ref, ours, n=40)
    for seed in range(3):
        a, b = sample(ref, seed), sample(ours, seed)
        assert same(a, b)


@pytest.mark.parametrize("name", ["igzip0", "igzip1", "igzip3", "igzip/2", "xor+igzip3"])
def test_igzip_without_isal_falls_back_to_gzip_with_one_warning(monkeypatch, name):
    monkeypatch.setitem(sys.modules, "isal", None)  # import isal -> ImportError
    assert not has_igzip()
    with pytest.warns(CodecFallbackWarning, match="python-isal is not installed") as record:
        buf = CompressedReplayBuffer(20, IMAGE, ACT, "cpu", compression_method=name, chunk_len=4)
    assert len(record) == 1
    assert buf.compression_method == name.replace("igzip", "gzip").replace("gzip3", "gzip/3").replace(
        "gzip1", "gzip/1").replace("gzip0", "gzip/0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fill(buf, n=25)
        sample(buf, 0)


def test_compression_kwargs():
    buf = CompressedReplayBuffer(10, IMAGE, ACT, "cpu", compression_method="zstd",
                                 compression_kwargs={"compresslevel": 7, "threads": 2, "elem_type": np.uint8})
    assert buf.compression_method == "zstd/7"
    buf = CompressedReplayBuffer(10, IMAGE, ACT, "cpu", compression_method="zstd-2",
                                 compression_kwargs={"compresslevel": 7})
    assert buf.compression_method == "zstd/-2"  # a level in the name wins, as in sb3-extra-buffers
    with pytest.raises(TypeError, match=r"unknown key\(s\) \['level'\]"):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", compression_kwargs={"level": 7})
    with pytest.raises(TypeError, match="decompression_kwargs"):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", decompression_kwargs={"arr_configs": {}})
    with pytest.raises(CodecConfigError):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", compression_method="lz4-block/17")


# -- attributes and options ----------------------------------------------------------------------
def test_attributes_users_print():
    dtypes = find_buffer_dtypes(IMAGE.shape, IMAGE.dtype)
    buf = CompressedReplayBuffer(10, IMAGE, ACT, "cpu", dtypes=dtypes, compression_method="rle")
    assert buf.dtypes == dtypes and buf.compression_kwargs == dtypes and buf.decompression_kwargs == dtypes
    assert (buf.flatten_len, buf.flatten_config) == (4 * 12 * 12, {"shape": 576, "dtype": np.dtype(np.uint8)})
    assert buf.normalize_images is False and buf.output_dtype is None and buf.version
    with pytest.warns(UserWarning, match=r"elem_type uint8 is not the observation dtype \(float32\)"):
        buf = CompressedDictRolloutBuffer(4, DICT, ACT, "cpu", dtypes=np.uint8)
    assert buf.dtypes == {"elem_type": np.uint8, "runs_type": np.uint8}
    assert buf.flatten_configs["vector"] == {"shape": 3, "dtype": np.dtype(np.float32)}


def test_elem_type_other_than_the_space_warns_and_stores_losslessly():
    ref = ReplayBuffer(20, VECTOR, ACT, "cpu")
    with pytest.warns(UserWarning, match="stored losslessly"):
        ours = CompressedReplayBuffer(20, VECTOR, ACT, "cpu", dtypes={"elem_type": np.uint8, "runs_type": np.uint8})
    fill(ref, ours, space=VECTOR)
    assert np.array_equal(np.asarray(ours.observations), ref.observations)
    assert sample(ours, 1).observations.dtype == th.float32


@pytest.mark.parametrize("output_dtype", ["raw", "float"])
@pytest.mark.parametrize("normalize_images", [False, True])
@pytest.mark.parametrize("space", [IMAGE, DICT])
def test_normalize_images_and_output_dtype_are_honoured(space, normalize_images, output_dtype):
    dict_space = isinstance(space, spaces.Dict)
    ref = (DictReplayBuffer if dict_space else ReplayBuffer)(30, space, ACT, "cpu", n_envs=2)
    ours = (CompressedDictReplayBuffer if dict_space else CompressedReplayBuffer)(
        30, space, ACT, "cpu", n_envs=2, normalize_images=normalize_images, output_dtype=output_dtype)
    fill(ref, ours, space=space, n_envs=2)

    def expected(x):
        x = x.float() if output_dtype == "float" else x
        return (x if x.is_floating_point() else x.float()) / 255.0 if normalize_images else x

    a, b = sample(ref, 3), sample(ours, 3)
    for field in ("observations", "next_observations"):
        xa, xb = getattr(a, field), getattr(b, field)
        pairs = [(xa[k], xb[k]) for k in xa] if dict_space else [(xa, xb)]
        for x, y in pairs:
            assert y.dtype == expected(x).dtype and th.equal(expected(x), y)
    assert th.equal(a.rewards, b.rewards) and th.equal(a.actions, b.actions)


def test_rollout_normalize_images():
    ref = RolloutBuffer(8, IMAGE, ACT, "cpu", n_envs=2)
    ours = CompressedRolloutBuffer(8, IMAGE, ACT, "cpu", n_envs=2, normalize_images=True, compression_method="rle")
    rng = np.random.default_rng(0)
    for _ in range(8):
        obs = rng.integers(0, 255, (2, *IMAGE.shape)).astype(np.uint8)
        args = (obs, np.array([1, 2]), np.ones(2, np.float32), np.zeros(2), th.zeros(2), th.zeros(2))
        ref.add(*args)
        ours.add(*args)
    np.random.seed(0)  # noqa: NPY002
    a = next(ref.get(16))
    np.random.seed(0)  # noqa: NPY002
    b = next(ours.get(16))
    assert th.equal(a.observations.float() / 255.0, b.observations)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="output_dtype"):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", output_dtype="half")
    with pytest.raises(TypeError, match="normalize_images"):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", normalize_images="yes")
    with pytest.raises(TypeError):
        CompressedRolloutBuffer(8, IMAGE, ACT, "cpu", output_dtype="float")  # sb3eb's rollout has none either


def test_a_codec_name_given_where_dtypes_go_is_a_typeerror_as_in_sb3eb():
    """``compression_method`` one place early (8th, where ``dtypes`` goes) was stored as dtypes and
    ignored: the buffer used the default codec. sb3-extra-buffers raises TypeError (np.dtype of it)."""
    with pytest.raises(TypeError, match=r"dtypes must be a dtype.*compression_method comes after"):
        CompressedReplayBuffer(10, IMAGE, ACT, "cpu", 1, False, True, "zstd3")
    with pytest.raises(TypeError, match="dtypes must be a dtype"):
        CompressedRolloutBuffer(8, IMAGE, ACT, "cpu", 0.9, 0.98, 2, object())
    assert CompressedReplayBuffer(10, IMAGE, ACT, "cpu", dtypes="uint8").dtypes["elem_type"] == "uint8"
    assert CompressedReplayBuffer(10, IMAGE, ACT, "cpu", dtypes=th.uint8).dtypes["elem_type"] == th.uint8


def test_positional_arguments_in_sb3ebs_order():
    buf = CompressedReplayBuffer(10, IMAGE, ACT, "cpu", 1, False, True, None, True, "lz4-frame/5")
    assert buf.normalize_images and buf.compression_method == "lz4-frame/5"
    buf = CompressedRolloutBuffer(8, IMAGE, ACT, "cpu", 0.9, 0.98, 2, None, False, "zstd1")
    assert (buf.gae_lambda, buf.gamma, buf.n_envs, buf.compression_method) == (0.9, 0.98, 2, "zstd/1")


def test_options_survive_save_and_load(tmp_path):
    dtypes = {"elem_type": IMAGE.dtype, "runs_type": np.uint32}
    buf = CompressedReplayBuffer(20, IMAGE, ACT, "cpu", dtypes=dtypes, normalize_images=True, output_dtype="float",
                                 compression_method="zstd", compression_kwargs={"compresslevel": np.int64(5)})
    fill(buf, n=12)
    buf.save(tmp_path / "b.h5")
    loaded = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cpu")
    assert loaded.normalize_images and loaded.output_dtype == th.float32
    assert loaded.dtypes == {"elem_type": "uint8", "runs_type": "uint32"}  # dtypes by name
    assert loaded.compression_kwargs == {"compresslevel": 5} and loaded.compression_method == "zstd/5"
    assert same(sample(buf, 4), sample(loaded, 4))
    gpu = GpuReplayBuffer(20, IMAGE, ACT, "cpu", heap_bytes=123)
    fill(gpu, n=5)
    gpu.save(tmp_path / "g.h5")
    assert GpuReplayBuffer.load(tmp_path / "g.h5", device="cpu").heap_bytes == 123


# -- GPU names -----------------------------------------------------------------------------------
def test_gpu_replay_buffer_keeps_frames_on_its_device_and_never_fills_up():
    ref = ReplayBuffer(200, IMAGE, ACT, "cpu")
    ours = GpuReplayBuffer(200, IMAGE, ACT, "cpu", buffer_device="cpu", heap_bytes=1, chunk_len=4)
    fill(ref, ours, n=500)  # far more than 1 byte of heap, wrapping twice: every segment in host RAM
    frames = [fs.frames for fs in ours.frame_stores.values()]
    assert {type(f) for f in frames} == {DeviceArray} and {str(f.device) for f in frames} == {"cpu"}
    assert all(f.info()["heap"]["segments_on_device"] == 0 for f in frames)
    for seed in range(3):
        assert same(sample(ref, seed), sample(ours, seed))
    assert ours.buffer_device == th.device("cpu") and ours.heap_bytes == 1


def test_gpu_buffers_accept_their_arguments():
    buf = GpuReplayBuffer(10, IMAGE, ACT, "cpu")
    assert buf.buffer_device == th.device("cpu") and buf.max_slot_bytes is None
    with pytest.raises(ValueError, match="tier"):  # a tier places host chunks: the frames are on the device
        GpuReplayBuffer(10, IMAGE, ACT, "cpu", tier=MemoryTier())
    with pytest.raises(ValueError, match="heap_bytes"):
        GpuReplayBuffer(10, IMAGE, ACT, "cpu", heap_bytes=0)
    roll = GpuRolloutBuffer(8, IMAGE, ACT, "cpu", buffer_device="cpu", max_slot_bytes=100)
    assert roll.max_slot_bytes == 100 and isinstance(roll, CompressedRolloutBuffer)


@pytest.mark.skipif(th.cuda.is_available(), reason="checks the error without CUDA")
def test_gpu_replay_buffer_on_a_missing_device_fails_at_construction():
    with pytest.raises(ValueError, match="CUDA is not available"):
        GpuReplayBuffer(10, IMAGE, ACT, "cpu", buffer_device="cuda")
