"""Saved replay buffers: ``buffer.save(path)`` / ``Cls.load(path, ...)``, bit for bit.

A loaded buffer must be indistinguishable from the one that was saved: the
same ``.observations``, the same samples for the same ``np.random`` seed, and
the same behaviour under further ``add()`` calls; a model resumed from a saved
model and buffer must train to the same parameters as one that never stopped.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
import subprocess
import sys
import textwrap

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch as th
from conftest import (
    assert_samples_equal,
    assert_views_equal,
    collect_atari,
    frame_stack_stream,
    make_pair,
)
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from chunkstore import ChunkedArray, CorruptChunkError, FormatError, get_codec
from chunkstore import hdf5 as fmt
from sb3_integration import (
    DEFAULT_COMPRESSION,
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    FrameStore,
)
from sb3_integration.buffers.columns import SMALL_ARRAYS

IMG = spaces.Box(0, 255, (4, 6, 5), np.uint8)
DICT = spaces.Dict({"img": IMG, "vec": spaces.Box(-1, 1, (3,), np.float32)})
ACT = spaces.Discrete(3)
ROWS = 30  # rows per env
KINDS = {
    "replay": (IMG, {}),
    "replay-opt": (IMG, {"optimize_memory_usage": True, "handle_timeout_termination": False}),
    "dict": (DICT, {}),
    "nstep": (IMG, {"n_steps": 3, "gamma": 0.9}),
}
#: adds before saving: layout still undetected, mid-chunk before the wrap, after the wrap
FILLS = {"pending": 5, "partial": 13, "wrapped": 47}
MORE = 40  # adds after loading


# -- helpers ---------------------------------------------------------------------------------
def transitions(kind, n_envs, T, blank=5, seed=0):
    """Frame stacks with resets, random dones and truncations; the first ``blank`` are all zero.

    All-zero stacks prove nothing about the stacking, so the layout stays
    undetected (the stacks wait as copies) until the stream starts.
    """
    rng = np.random.default_rng(seed + 100)
    stacks = frame_stack_stream(T - blank, n_envs, seed=seed)
    zeros = np.zeros((n_envs, *IMG.shape), np.uint8)
    for t in range(T):
        obs, nxt = (zeros, zeros) if t < blank else next(stacks)
        if kind == "dict":
            vec = np.zeros((2, n_envs, 3), np.float32) if t < blank else rng.standard_normal((2, n_envs, 3))
            obs, nxt = {"img": obs, "vec": vec[0]}, {"img": nxt, "vec": vec[1]}
        yield (obs, nxt, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32),
               rng.random(n_envs) < 0.1, [{"TimeLimit.truncated": bool(x)} for x in rng.random(n_envs) < 0.1])


def filled(kind, n_envs, T, **kw):
    """(SB3's buffer, ours, the transitions not added yet) after ``T`` adds to both."""
    space, extra = KINDS[kind]
    ref, ours = make_pair(kind.split("-")[0], ROWS * n_envs, space, ACT, n_envs=n_envs, **extra, **kw)
    data = list(transitions(kind, n_envs, T + MORE))
    for tr in data[:T]:
        ref.add(*tr)
        ours.add(*tr)
    return ref, ours, data[T:]


def assert_same(buffers, seeds=(0, 1, 2), batch_size=32):
    first, *rest = buffers
    for other in rest:
        assert (other.pos, other.full, other.size()) == (first.pos, first.full, first.size())
        assert_views_equal(first, other)
        for seed in seeds:
            assert_samples_equal(first, other, batch_size, seed)


def frame_stores(buf):
    return list(buf.frame_stores.values())


def chunk_location(path, name, k=0):
    """(chunk index, byte offset, nbytes) of the ``k``-th stored chunk of dataset ``name``."""
    with h5py.File(path, "r") as f:
        c = int(f[f"_chunkstore/arrays/{name}/chunks"][k])
        dset = f[name]
        info = dset.id.get_chunk_info_by_coord((c * dset.chunks[0],) + (0,) * (dset.ndim - 1))
        return c, info.byte_offset, info.size


# -- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("kind", list(KINDS))
def test_round_trip_and_continue(kind, n_envs, fill, lazy, tmp_path):
    ref, ours, more = filled(kind, n_envs, FILLS[fill])
    if fill == "pending":
        assert all(fs.layout is None for fs in frame_stores(ours))
    else:  # each env's partial chunk is open: saving encodes it into the file, the buffer keeps it open
        assert all(fs.frames.info()["nopen"] > 0 for fs in frame_stores(ours) if fs.layout is not None)
    assert ours.full == (fill == "wrapped")
    path = tmp_path / "buffer.h5"
    nopen = [fs.frames.nopen for fs in frame_stores(ours) if fs.layout is not None]
    ours.save(path)
    assert [fs.frames.nopen for fs in frame_stores(ours) if fs.layout is not None] == nopen  # unchanged

    loaded = type(ours).load(path, device="cpu", lazy=lazy)
    assert type(loaded) is type(ours) and loaded.device == th.device("cpu")
    for fs, orig in zip(frame_stores(loaded), frame_stores(ours), strict=True):
        assert (fs.layout, fs.heads.tolist(), fs.released.tolist(), fs.frames_written, fs.ring_frames) == (
            orig.layout, orig.heads.tolist(), orig.released.tolist(), orig.frames_written, orig.ring_frames)
        if fs.layout is not None and fs.frames.nchunks:
            assert fs.frames.tier.info()["kind"] == ("file" if lazy else "memory")
    if kind == "nstep":
        assert (loaded.n_steps, loaded.gamma) == (3, 0.9)
    assert_same([ref, ours, loaded])

    # all three keep going the same way: reopened chunks, detection, wrap-around, releases
    for t, tr in enumerate(more):
        for buf in (ref, ours, loaded):
            buf.add(*tr)
        if t % 10 == 9:
            assert_same([ref, ours, loaded], seeds=(t,))
    assert loaded.full
    assert_same([ref, ours, loaded], seeds=(100, 101))


@pytest.mark.parametrize("tier", ["instance", "factory"])
def test_buffer_built_on_a_tier_pickles_into_ram(tier):
    """SB3's save_replay_buffer pickles the buffer: a tier (locks, files, a lambda) stays out."""
    from chunkstore import MemoryTier

    given = MemoryTier() if tier == "instance" else (lambda: MemoryTier())
    ref, ours, _ = filled("replay", 2, 47, tier=given)
    back = pickle.loads(pickle.dumps(ours))
    assert back.store_options.tier is None
    assert_same([ref, ours, back])


def test_loaded_buffer_pickles_and_resaves_over_its_own_file(tmp_path):
    ref, ours, more = filled("replay", 2, 47)
    path = tmp_path / "buffer.h5"
    ours.save(path)
    loaded = CompressedReplayBuffer.load(path, device="cpu", lazy=True)
    clone = pickle.loads(pickle.dumps(loaded))  # what model.save_replay_buffer writes
    assert_same([ref, clone])
    for tr in more[:20]:
        ref.add(*tr)
        loaded.add(*tr)
    loaded.save(path)  # replaces the file its chunks are mapped from: temp file + rename
    again = CompressedReplayBuffer.load(path, device="cpu", lazy=True)
    assert_same([ref, loaded, again])


def atari_filled(codec, train=False, T=300):
    """Real Breakout stacks: enough frames (> 1 MiB) for zstd to train a dictionary."""
    tr = list(collect_atari("Breakout", 500, max_episode_steps=320).steps())
    space = spaces.Box(0, 255, tr[0][0].shape[1:], np.uint8)
    if train:  # a codec object whose dictionary is trained on these frames (3.5 MB of them)
        codec = get_codec(codec).trained([step[0][0, -1] for step in tr])
        assert codec.dictionary is not None
    ref, ours = make_pair("replay", 400, space, spaces.Discrete(4), chunk_len=16, compression_method=codec)
    for step in tr[:T]:
        ref.add(*step)
        ours.add(*step)
    if train:
        assert ours.frame_stores[None].frames.codec is codec
    return ref, ours, tr[T:]


def test_buffer_built_with_a_codec_object_and_a_trained_dictionary(tmp_path):
    ref, ours, more = atari_filled(get_codec("zstd3+dict"), train=True)
    ours.save(tmp_path / "b.h5")
    loaded = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cpu", lazy=False)
    assert loaded.frame_stores[None].frames.codec == ours.frame_stores[None].frames.codec
    assert isinstance(loaded.frame_stores[None].frames.codec, type(get_codec("zstd3+dict")))
    assert loaded.frame_stores[None].frames.codec.dictionary is not None
    assert_same([ref, ours, loaded])
    for step in more:  # wraps around
        ref.add(*step)
        loaded.add(*step)
    assert_same([ref, loaded])


def test_saved_state_covers_every_attribute():
    """A new attribute on the buffers or FrameStore must be in its state object (or rebuilt)."""
    import dataclasses

    from sb3_integration.engine.frame_ring import RingState
    from sb3_integration.engine.frames import FrameStoreState

    rebuilt = {"options",  # codec, chunk_len, tier, threads, dedup, device, budget_bytes: the constructor's
               "cache", "budget", "axis_order", "name", "_lock", "_closed"}
    derived = {"ring_frames"}  # from the frame array's capacity
    geometry = {"obs_shape", "dtype", "n_rows", "n_envs", "stacks_per_row", "dedup"}
    saved = {f.name for f in dataclasses.fields(FrameStoreState)} - derived
    fs = FrameStore((4, 6, 5), np.uint8, 10, 2)
    fs.ensure_layout()
    assert set(vars(fs)) == rebuilt | geometry | {"_ring"}  # the live state: one RingState
    # every field of it saved but the undo record (where the owner's current try began: nothing to undo
    # in a loaded store)
    assert {f.name for f in dataclasses.fields(RingState)} == (saved - geometry) | {"undo"}
    # the buffer: constructor arguments, position, SB3's arrays, frame stores; the rest is rebuilt
    buffer_attrs = {"buffer_size", "n_envs", "pos", "full", "optimize_memory_usage",
                    "handle_timeout_termination", "observation_space", "action_space", "device",
                    "compression_method", "chunk_len", "_cache_bytes", "frame_dedup", "_stores",
                    "store_options", "small_arrays", "_columns", "obs_shape", "action_dim", "observations",
                    "next_observations", "_plan", "_memo", "_owned", "_lock", "buffer_device",
                    # each key's storage (saved as the stores' kinds), a key awaiting its first add,
                    # and whether a sample is SB3's code alone or the lean frame path (rebuilt with the views)
                    "_storage", "_undecided", "_lean", "_lean_frames",
                    *SMALL_ARRAYS}
    # sb3-extra-buffers' options (sb3_integration.buffers.extra_buffers): saved as constructor arguments, or rebuilt
    compat = {"dtypes", "compression_kwargs", "decompression_kwargs", "normalize_images", "output_dtype",
              "version"}
    for cls, space, kw in [(CompressedReplayBuffer, IMG, {}), (CompressedDictReplayBuffer, DICT, {}),
                           (CompressedNStepReplayBuffer, IMG, {"n_steps": 2})]:
        # every buffer takes sb3-extra-buffers' arguments (n-step too)
        extra = set(compat) | ({"n_steps", "gamma"} if cls is CompressedNStepReplayBuffer else set())
        extra |= {"flatten_configs"} if cls is CompressedDictReplayBuffer else {"flatten_len", "flatten_config"}
        buf = cls(8, space, ACT, "cpu", **kw)
        assert set(vars(buf)) == buffer_attrs | extra
        with buf.state_dict() as state:
            assert set(SMALL_ARRAYS) <= set(state.arrays)
            assert {"n_steps", "gamma"} & extra <= set(state.arguments)


def test_file_holds_only_plain_data(tmp_path):
    _, ours, _ = filled("dict", 2, 13)
    ours.save(tmp_path / "b.h5")
    kinds = set()
    with h5py.File(tmp_path / "b.h5", "r") as f:
        attrs = json.loads(f.attrs["attrs"])
        f.visititems(lambda name, obj: kinds.add(obj.dtype.kind) if isinstance(obj, h5py.Dataset) else None)
        names = set()
        f.visit(names.add)
    assert kinds <= set("biuf")  # no pickles, no opaque blobs
    assert {"observations/img/frames", "observations/vec/pending_obs", "actions", "timeouts"} <= names
    assert attrs["buffer_class"] == "CompressedDictReplayBuffer" and attrs["pos"] == 13
    assert attrs["arguments"]["observation_space"]["type"] == "Dict"


# -- plain HDF5 readers ------------------------------------------------------------------------
_PLAIN_READER = """
import json, sys, h5py, hdf5plugin, numpy as np
out = {}
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        dset = f["observations/frames"]
        try:
            np.save(path + ".npy", dset[:])
            out[path] = "ok"
        except OSError as e:
            out[path] = "OSError: " + str(e)
print(json.dumps(out))
"""


def test_plain_h5py_reads_zstd_and_refuses_private_codecs(tmp_path):
    """zstd chunks read with only h5py + hdf5plugin; other codecs fail loudly, never garbage."""
    cases = {"zstd3": "zstd", "lz4-block": "chunkstore", DEFAULT_COMPRESSION: None, "zstd3+dict": "chunkstore"}
    frames, paths = {}, {}
    for name in cases:
        if name == "zstd3+dict":  # trained
            _, ours, _ = atari_filled(name, train=True)
        else:
            _, ours, _ = filled("replay", 2, 47, compression_method=name)
        array = ours.frame_stores[None].frames
        path = paths[name] = str(tmp_path / f"{len(paths)}.h5")
        ours.save(path)
        frames[name] = np.asarray(array)
        with h5py.File(path, "r") as f:
            label = f["observations/frames"].attrs["hdf5_filter"]
        if cases[name] is not None:
            assert label == cases[name], name
        cases[name] = label  # the default codec: whatever it is, the reader must agree with its label
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_PLAIN_READER), *paths.values()],
                          capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout)
    for name, path in paths.items():
        if cases[name] == "chunkstore":
            assert result[path].startswith("OSError"), (name, result[path])
        else:
            assert result[path] == "ok", (name, result[path])
            assert np.array_equal(np.load(path + ".npy"), frames[name]), name


def _rebuild_from_note(f, prefix, n_rows, n_envs):
    """Every stored (observation, next observation), rebuilt by following the file's reader_note."""
    import re

    note = f.attrs["reader_note"]
    part = note[note.index(f"Observations '{prefix}'"):]
    F = int(re.search(r"F = (\d+) items", part).group(1))
    k = int(re.search(r"(\d+) frames per stack", part).group(1))
    axis = int(re.search(r"along axis (\d+)", part).group(1))
    frames, heads, slots = (f[f"{prefix}/{n}"][...] for n in ("frames", "heads", "slots"))
    deltas, pads, far = (f[f"{prefix}/{n}"][...] for n in ("deltas", "pads", "far"))
    out = np.zeros((2, n_rows, n_envs, *IMG.shape), np.uint8)
    for kind, r, e in np.ndindex(2, n_rows, n_envs):
        if pads[kind, r, e] == 255:  # never written
            continue
        h = int(heads[e])
        g = h - ((h - int(slots[r, e])) % 2**32)
        if kind == 1:
            d = int(deltas[0, r, e])
            if d == 255:
                (s,) = [row[3] for row in far if tuple(row[:3]) == (1, r, e)]
                g = h - ((h - int(s)) % 2**32)
            else:
                g += d
        parts = [np.zeros_like(frames[0]) if j < pads[kind, r, e] else frames[e * F + (g - (k - 1) + j) % F]
                 for j in range(k)]
        out[kind, r, e] = np.concatenate(parts, axis=axis)
    return out


@pytest.mark.parametrize("kind", ["replay", "dict"])
def test_reader_note_rebuilds_every_observation_with_plain_h5py(kind, tmp_path):
    """The root reader_note says how to rebuild stacks from frames and index, padding included."""
    import hdf5plugin  # noqa: F401 - zstd chunks for plain h5py

    ref, ours, _ = filled(kind, 2, 47, compression_method="zstd3")
    path = tmp_path / "b.h5"
    ours.save(path)
    prefix = "observations/img" if kind == "dict" else "observations"
    with h5py.File(path, "r") as f:
        rebuilt = _rebuild_from_note(f, prefix, ROWS, 2)
    obs, nxt = ref.observations, ref.next_observations
    if kind == "dict":
        obs, nxt = obs["img"], nxt["img"]
    assert np.array_equal(rebuilt[0], obs) and np.array_equal(rebuilt[1], nxt)
    assert rebuilt.any()


# -- wrong files, corruption -------------------------------------------------------------------
def _rewrite_attrs(path, **changes):
    with h5py.File(path, "r+") as f:
        attrs = json.loads(f.attrs["attrs"])
        attrs.update(changes)
        f.attrs["attrs"] = json.dumps(attrs)


def test_wrong_files_raise_format_error(tmp_path):
    _, ours, _ = filled("replay", 1, 13)
    good = tmp_path / "buffer.h5"
    ours.save(good)
    for cls in (CompressedDictReplayBuffer, CompressedNStepReplayBuffer):
        with pytest.raises(FormatError, match="holds a CompressedReplayBuffer"):
            cls.load(good)

    other = tmp_path / "store.h5"
    arr = ChunkedArray(32, (2,), np.uint8, chunk_len=8)
    arr[:4] = 1
    fmt.save(other, {"observations": arr}, {"pos": np.array(4)}, {"note": "not a buffer"}, progress=False)
    with pytest.raises(FormatError, match="not a saved replay buffer"):
        CompressedReplayBuffer.load(other)

    for i, changes in enumerate([{"buffer_format_version": 99}, {"buffer_format": "something else"}]):
        bad = tmp_path / f"v{i}.h5"
        bad.write_bytes(good.read_bytes())
        _rewrite_attrs(bad, **changes)
        with pytest.raises(FormatError):
            CompressedReplayBuffer.load(bad)

    newer = tmp_path / "newer.h5"
    newer.write_bytes(good.read_bytes())
    with h5py.File(newer, "r+") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(FormatError, match="version 99"):
        CompressedReplayBuffer.load(newer)

    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(good.read_bytes())
    _rewrite_attrs(damaged, pos=None)
    with pytest.raises(FormatError, match="damaged"):
        CompressedReplayBuffer.load(damaged)

    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not hdf5" * 100)
    with pytest.raises(FormatError):
        CompressedReplayBuffer.load(garbage)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_flipped_byte_names_array_and_chunk(lazy, tmp_path):
    _, ours, _ = filled("replay", 2, 13)
    path = tmp_path / "buffer.h5"
    ours.save(path)
    chunk, offset, size = chunk_location(path, "observations/frames")
    with open(path, "r+b") as f:
        f.seek(offset + size // 2)
        byte = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([byte[0] ^ 0x5A]))
    if lazy:
        loaded = CompressedReplayBuffer.load(path, device="cpu", lazy=True)
        with pytest.raises(CorruptChunkError) as err:
            np.asarray(loaded.observations)  # the first read of that chunk
    else:
        with pytest.raises(CorruptChunkError) as err:
            CompressedReplayBuffer.load(path, device="cpu", lazy=False)
    assert (err.value.array, err.value.chunk) == ("observations/frames", chunk)
    assert "observations/frames" in str(err.value) and f"chunk {chunk}" in str(err.value)


# -- train, save, load, continue == train straight through ---------------------------------------
class Blink(gym.Env):
    """8x8 frames of a dot on a random walk; random ends, truncated by a TimeLimit."""

    observation_space = spaces.Box(0, 255, (1, 8, 8), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.xy = self.np_random.integers(0, 8, 2)
        return self._obs(), {}

    def step(self, action):
        self.xy = (self.xy + self.np_random.integers(-1, 2, 2) + (int(action) - 1)) % 8
        return self._obs(), float(self.xy[0] == 0), bool(self.np_random.random() < 0.03), False, {}

    def _obs(self):
        img = np.zeros((1, 8, 8), np.uint8)
        img[0, self.xy[0], self.xy[1]] = 255
        return img


def blink_env():
    env = DummyVecEnv([lambda: Monitor(gym.wrappers.TimeLimit(Blink(), 25))] * 2)
    return VecFrameStack(env, 4, channels_order="first")


RESUME = {
    "cartpole": ("CartPole-v1", CompressedReplayBuffer, {}),
    "blink-nstep-2envs": (blink_env, CompressedNStepReplayBuffer, {"n_steps": 3, "gamma": 0.95}),
}


def _dqn(env, buffer_class, buffer_kwargs):
    # constant exploration and learning rate: learn(N) + learn(M) == learn(N + M) (see persistence.py)
    return DQN("MlpPolicy", env, buffer_size=120, learning_starts=48, train_freq=4, batch_size=32,
               target_update_interval=40, exploration_initial_eps=0.3, exploration_final_eps=0.3,
               policy_kwargs={"net_arch": [32]}, seed=0, device="cpu", replay_buffer_class=buffer_class,
               replay_buffer_kwargs={"chunk_len": 8, **buffer_kwargs})


def env_state(env):
    """The env's whole state (episodes in progress, their RNGs, the frame stacks), as bytes.

    VecEnvWrappers keep a mappingproxy and do not pickle: the frame stack is saved
    as the wrapped env plus its ``stacked_obs``.
    """
    if isinstance(env, VecFrameStack):
        return pickle.dumps(("frame_stack", env.venv, env.stacked_obs))
    return pickle.dumps(("plain", env, None))


def restored_env(blob):
    kind, venv, stacked = pickle.loads(blob)
    if kind == "plain":
        return venv
    env = VecFrameStack(venv, stacked.n_stack, "first" if stacked.channels_first else "last")
    env.stacked_obs = stacked
    return env


@pytest.mark.parametrize("case", list(RESUME))
def test_train_save_load_continue_equals_straight_through(case, tmp_path, one_torch_thread):
    env_maker, buffer_class, buffer_kwargs = RESUME[case]
    make_env = env_maker if callable(env_maker) else (lambda: env_maker)
    N, M = 200, 160

    straight = _dqn(make_env(), buffer_class, buffer_kwargs)
    straight.learn(N + M)

    first = _dqn(make_env(), buffer_class, buffer_kwargs)
    first.learn(N)
    assert first.replay_buffer.full  # the saved buffer has wrapped around
    # what SB3's model.save does not keep: the generators and the env (see persistence.py)
    rng = {"numpy": np.random.get_state(),  # noqa: NPY002 - SB3 samples with the global RNG
           "torch": th.get_rng_state(), "random": random.getstate(),
           "action_space": copy.deepcopy(first.action_space.np_random.bit_generator.state)}
    saved_env = env_state(first.get_env())
    first.save(tmp_path / "model.zip")
    first.replay_buffer.save(tmp_path / "buffer.h5")
    del first

    resumed = DQN.load(tmp_path / "model.zip", env=restored_env(saved_env), device="cpu", force_reset=False)
    np.random.set_state(rng["numpy"])  # noqa: NPY002
    th.set_rng_state(rng["torch"])
    random.setstate(rng["random"])
    resumed.action_space.np_random.bit_generator.state = rng["action_space"]
    resumed.replay_buffer = buffer_class.load(tmp_path / "buffer.h5", device=resumed.device)
    resumed.learn(M, reset_num_timesteps=False)

    assert resumed.num_timesteps == straight.num_timesteps == N + M
    assert resumed._n_updates == straight._n_updates > 0
    pa, pb = straight.policy.state_dict(), resumed.policy.state_dict()
    assert pa.keys() == pb.keys()
    for name in pa:
        assert th.equal(pa[name], pb[name]), name
    assert_same([straight.replay_buffer, resumed.replay_buffer])


@pytest.mark.parametrize("kind", ["replay", "nstep"])
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_round_trip_with_compressed_small_arrays(kind, lazy, tmp_path):
    """SB3's small arrays in compressed chunks: saved as a chunked array, loaded, continued."""
    ref, ours, more = filled(kind, 2, FILLS["wrapped"], small_arrays="compressed")
    assert ours._columns is not None
    ours.save(tmp_path / "b.h5")
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert "transitions" in f and "rewards" not in f
    loaded = type(ours).load(tmp_path / "b.h5", device="cpu", lazy=lazy)
    assert loaded.small_arrays == "compressed"
    assert_same([ref, ours, loaded])
    for name in ("actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(np.asarray(getattr(loaded, name)), getattr(ref, name))
    for t, tr in enumerate(more):
        for buf in (ref, loaded):
            buf.add(*tr)
        if t % 10 == 9:
            assert_same([ref, loaded], seeds=(t,))
    reloaded = pickle.loads(pickle.dumps(loaded))
    assert_same([ref, loaded, reloaded])


@pytest.mark.parametrize("kind", ["disk", "hybrid"])
def test_save_into_the_buffers_own_spill_directory_refused(tmp_path, kind):
    """The spill directory of a DiskTier / HybridTier is removed with its files when the tier
    closes: a buffer saved there used to vanish with it. Refused before anything is written;
    saving beside it still works."""
    import os

    from chunkstore.tiers import DiskTier, HybridTier

    tier = DiskTier(tmp_path) if kind == "disk" else HybridTier(0, tmp_path)
    _, ours, _ = filled("replay", 2, 47, tier=tier)
    inside = os.path.join(tier.path, "buffer.h5")
    before = sorted(os.listdir(tier.path))
    with pytest.raises(ValueError, match="spill directory"):
        ours.save(inside)
    assert sorted(os.listdir(tier.path)) == before  # no file, no temporary
    ours.save(tmp_path / "beside.h5")
    assert (tmp_path / "beside.h5").exists()
