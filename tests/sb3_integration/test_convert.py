"""Converting sb3-extra-buffers (and SB3) replay buffers and pickles into compressed buffers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.envs import IdentityEnv
from stable_baselines3.common.save_util import save_to_pkl

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    from_sb3_extra_buffers,
    load_replay_buffer,
)

sb3eb = pytest.importorskip("sb3_extra_buffers.compressed")

IMAGE = spaces.Box(0, 255, (4, 10, 10), np.uint8)
VECTOR = spaces.Box(-3, 3, (5,), np.float32)
DICT = spaces.Dict({"image": IMAGE, "vector": VECTOR})
ACT = spaces.Discrete(4)


def transitions(space, n, n_envs, seed=0):
    """Frame-stack-like image streams and random vectors; episodes end (some truncated) now and then."""
    rng = np.random.default_rng(seed)

    def draw(s):
        if s.dtype == np.uint8:
            return rng.integers(0, 3, (n_envs, *s.shape)).astype(np.uint8)
        return rng.standard_normal((n_envs, *s.shape)).astype(np.float32)

    def batch():
        return {k: draw(s) for k, s in space.spaces.items()} if isinstance(space, spaces.Dict) else draw(space)

    obs = batch()
    for t in range(n):
        nxt = batch()
        done = rng.random(n_envs) < 0.15
        infos = [{"TimeLimit.truncated": bool(d and t % 2)} for d in done]
        yield obs, nxt, rng.integers(0, 4, n_envs), rng.standard_normal(n_envs).astype(np.float32), done, infos
        obs = nxt


def same_samples(a, b, seed, batch=24):
    np.random.seed(seed)  # noqa: NPY002 - both sample from the global legacy generator
    sa = a.sample(batch)
    np.random.seed(seed)  # noqa: NPY002
    sb = b.sample(batch)
    for x, y in zip(sa, sb, strict=True):
        if isinstance(x, dict):
            assert x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and th.equal(x[k], y[k]) for k in x)
        elif x is not None:
            assert x.dtype == y.dtype and th.equal(x, y)


def sb3eb_buffer(space, size, n_envs, steps, **kw):
    cls = sb3eb.CompressedDictReplayBuffer if isinstance(space, spaces.Dict) else sb3eb.CompressedReplayBuffer
    if space is not IMAGE:  # sb3eb's default elem_type uint8 would clip the float vectors
        kw.setdefault("dtypes", {"elem_type": np.float32, "runs_type": np.uint16})
    buf = cls(size, space, ACT, "cpu", n_envs=n_envs, **kw)
    for tr in transitions(space, steps, n_envs):
        buf.add(*tr)
    return buf


@pytest.mark.parametrize("method", ["rle", "gzip3", "zstd-3", "lz4-frame/1", "none"])
@pytest.mark.parametrize(("n_envs", "steps"), [(1, 17), (2, 45), (2, 40)])  # partial, wrapped, exactly full
def test_sb3eb_buffer_converts_and_samples_the_same(method, n_envs, steps):
    src = sb3eb_buffer(IMAGE, 40, n_envs, steps, compression_method=method)
    dst = from_sb3_extra_buffers(src, compression_method="zstd3", chunk_len=4)
    assert type(dst) is CompressedReplayBuffer
    assert (dst.pos, dst.full, dst.buffer_size, dst.n_envs) == (src.pos, src.full, src.buffer_size, src.n_envs)
    for name in ("actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(getattr(dst, name), getattr(src, name)), name
    for seed in range(4):
        same_samples(src, dst, seed)


def test_optimize_memory_usage_and_float_vectors():
    src = sb3eb_buffer(VECTOR, 30, 1, 47, optimize_memory_usage=True, handle_timeout_termination=False)
    dst = from_sb3_extra_buffers(src)
    assert dst.optimize_memory_usage
    for seed in range(4):
        same_samples(src, dst, seed)


def test_dict_buffer_converts():
    src = sb3eb_buffer(DICT, 30, 2, 37)
    dst = from_sb3_extra_buffers(src, chunk_len=4)
    assert type(dst) is CompressedDictReplayBuffer
    for seed in range(3):
        same_samples(src, dst, seed)


def test_sampling_options_come_along():
    src = sb3eb_buffer(IMAGE, 30, 1, 20, normalize_images=True, output_dtype="float")
    dst = from_sb3_extra_buffers(src)
    assert dst.normalize_images and dst.output_dtype == th.float32
    same_samples(src, dst, 0)


def test_plain_sb3_buffers_convert_too():
    src = ReplayBuffer(30, IMAGE, ACT, "cpu", n_envs=2)
    for tr in transitions(IMAGE, 33, 2):
        src.add(*tr)
    same_samples(src, from_sb3_extra_buffers(src), 1)
    src = DictReplayBuffer(30, DICT, ACT, "cpu")
    for tr in transitions(DICT, 12, 1):
        src.add(*tr)
    same_samples(src, from_sb3_extra_buffers(src), 2)


def test_pickle_path_and_classmethod(tmp_path):
    src = sb3eb_buffer(IMAGE, 40, 1, 25, compression_method="zstd3")
    save_to_pkl(tmp_path / "sb3eb.pkl", src)
    dst = CompressedReplayBuffer.from_sb3_extra_buffers(tmp_path / "sb3eb.pkl", device="cpu")
    same_samples(src, dst, 0)
    assert len(pickle.dumps(dst)) < len(pickle.dumps(src))


def test_refuses_what_it_cannot_convert():
    with pytest.raises(TypeError, match="expected an sb3-extra-buffers or SB3"):
        from_sb3_extra_buffers(CompressedReplayBuffer(10, IMAGE, ACT, "cpu"))
    with pytest.raises(TypeError, match="does not fit"):
        from_sb3_extra_buffers(sb3eb_buffer(IMAGE, 10, 1, 3), buffer_class=CompressedDictReplayBuffer)
    with pytest.raises(TypeError, match="cannot convert sb3-extra-buffers' CompressedRolloutBuffer"):
        from_sb3_extra_buffers(sb3eb.CompressedRolloutBuffer(8, IMAGE, ACT, "cpu"))


def test_missing_sb3eb_is_named(tmp_path):
    # a pickle that refers to an sb3-extra-buffers module this installation lacks
    data = pickle.dumps(sb3eb_buffer(IMAGE, 10, 1, 3)).replace(  # the same length
        b"sb3_extra_buffers.compressed.compressed_replay", b"sb3_extra_buffers.compressed.compressed_gone__")
    (tmp_path / "old.pkl").write_bytes(data)
    with pytest.raises(ImportError, match=r"pip install 'chunkstore-rl\[sb3eb\]'"):
        from_sb3_extra_buffers(tmp_path / "old.pkl")


# -- into a model ------------------------------------------------------------------------------
def dqn(buffer_class, **kw):
    env = IdentityEnv(4)
    return DQN("MlpPolicy", env, buffer_size=200, learning_starts=20, seed=0, device="cpu",
               policy_kwargs={"net_arch": [8]}, replay_buffer_class=buffer_class, **kw)


def test_load_replay_buffer_converts_sb3eb_pickles(tmp_path):
    source = dqn(sb3eb.CompressedReplayBuffer)
    source.learn(60)
    source.save_replay_buffer(tmp_path / "sb3eb.pkl")

    pitfall = dqn(CompressedReplayBuffer)
    pitfall.load_replay_buffer(tmp_path / "sb3eb.pkl")  # SB3's own method: it stays sb3eb's
    assert type(pitfall.replay_buffer).__module__.startswith("sb3_extra_buffers")

    model = dqn(CompressedReplayBuffer, replay_buffer_kwargs={"chunk_len": 4})
    load_replay_buffer(model, tmp_path / "sb3eb.pkl")
    assert type(model.replay_buffer) is CompressedReplayBuffer and model.replay_buffer.chunk_len == 4
    same_samples(source.replay_buffer, model.replay_buffer, 0)
    model.learn(30, reset_num_timesteps=False)  # and trains on

    nstep = dqn(CompressedNStepReplayBuffer, replay_buffer_kwargs={"n_steps": 2})
    load_replay_buffer(nstep, tmp_path / "sb3eb.pkl")  # n-step returns are computed at sampling
    assert type(nstep.replay_buffer) is CompressedNStepReplayBuffer and nstep.replay_buffer.n_steps == 2


def test_load_replay_buffer_reads_hdf5_and_plain_pickles(tmp_path):
    model = dqn(CompressedReplayBuffer)
    model.learn(50)
    model.replay_buffer.save(tmp_path / "buf.h5")
    model.save_replay_buffer(tmp_path / "buf.pkl")
    for path in (tmp_path / "buf.h5", tmp_path / "buf.pkl"):
        other = dqn(CompressedReplayBuffer)
        load_replay_buffer(other, path)
        assert type(other.replay_buffer) is CompressedReplayBuffer
        same_samples(model.replay_buffer, other.replay_buffer, 3)
    with pytest.raises(TypeError, match="HDF5 buffer file"):
        load_replay_buffer(dqn(ReplayBuffer), tmp_path / "buf.h5")
