"""The compressed rollout buffers against SB3's own, bit for bit.

SB3's ``get()`` permutes with the global ``np.random``, so the tests seed it (NPY002).
``atari`` and ``test_frames`` are imported as top-level modules: pytest puts tests/ on
sys.path, and a ``tests`` package cannot be used (sb3-extra-buffers installs one).
"""
# ruff: noqa: NPY002

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from conftest import collect_atari, frame_stack_stream
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecFrameStack

from chunkstore import get_codec
from sb3_integration import CompressedDictRolloutBuffer, CompressedRolloutBuffer

IMG_CF = spaces.Box(0, 255, (4, 16, 16), np.uint8)
IMG_CL = spaces.Box(0, 255, (16, 16, 4), np.uint8)
SPACES = {
    "img_cf": IMG_CF,
    "img_cl": IMG_CL,
    "img_rgb": spaces.Box(0, 255, (12, 16, 16), np.uint8),  # 4 stacked 3-channel frames
    "float": spaces.Box(-1, 1, (5,), np.float32),
    "int": spaces.Box(-5, 5, (3, 2), np.int32),
    "bool": spaces.Box(0, 1, (6,), bool),
    "multibinary": spaces.MultiBinary(5),
    "discrete": spaces.Discrete(7),
    "multidiscrete": spaces.MultiDiscrete([3, 4]),
}


# -- data ------------------------------------------------------------------------------------
def stacked_obs(space, T, n_envs, seed):
    """VecFrameStack-shaped observations (zero padding after resets) for the image spaces."""
    shape = space.shape
    if shape[0] < shape[-1]:
        c = shape[0] // 4
        stream = frame_stack_stream(T, n_envs, k=4, frame=(c, *shape[1:]), ep_len=7, seed=seed)
    else:
        stream = frame_stack_stream(
            T, n_envs, k=4, frame=(*shape[:-1], 1), channels_last=True, ep_len=7, seed=seed
        )
    return np.stack([obs for obs, _ in stream])


def random_obs(space, T, n_envs, seed):
    if isinstance(space, spaces.Box) and len(space.shape) == 3:
        return stacked_obs(space, T, n_envs, seed)
    space.seed(seed)
    obs = np.stack([np.stack([space.sample() for _ in range(n_envs)]) for _ in range(T)])
    if obs.dtype.kind == "f" and T > 3:  # bit patterns that a careless store would lose
        obs[1, 0] = 0.0
        obs[2, 0] = -0.0
        obs[3, 0, 0] = np.nan
    return obs


def rollout(obs_space, act_space, T, n_envs, seed):
    """The arguments of T ``add()`` calls; obs is a dict for Dict spaces."""
    rng = np.random.default_rng(seed)
    if isinstance(obs_space, spaces.Dict):
        obs = {
            k: random_obs(s, T, n_envs, seed + i)
            for i, (k, s) in enumerate(obs_space.spaces.items())
        }
        obs_t = [{k: v[t] for k, v in obs.items()} for t in range(T)]
    else:
        obs_t = list(random_obs(obs_space, T, n_envs, seed))
    act_space.seed(seed)
    actions = [np.stack([act_space.sample() for _ in range(n_envs)]) for _ in range(T)]
    rewards = rng.standard_normal((T, n_envs)).astype(np.float32)
    starts = rng.random((T, n_envs)) < 0.1
    values = th.as_tensor(rng.standard_normal((T, n_envs)).astype(np.float32))
    log_probs = th.as_tensor(rng.standard_normal((T, n_envs)).astype(np.float32))
    steps = [
        (obs_t[t], actions[t], rewards[t], starts[t], values[t], log_probs[t]) for t in range(T)
    ]
    last_values = th.as_tensor(rng.standard_normal(n_envs).astype(np.float32))
    return steps, last_values, rng.random(n_envs) < 0.2


def fill(bufs, steps, last_values, dones):
    for buf in bufs:
        for step in steps:
            buf.add(*step)
        buf.compute_returns_and_advantage(last_values=last_values, dones=dones)


def assert_same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k}]")
    else:
        assert a.dtype == b.dtype, f"{where}: {a.dtype} != {b.dtype}"
        assert a.shape == b.shape and th.equal(bits(a), bits(b)), where


def bits(t):
    """``t`` viewed so that equality is bit equality (NaN == NaN, -0.0 != 0.0)."""
    return (
        t.view({2: th.int16, 4: th.int32, 8: th.int64}[t.element_size()])
        if t.is_floating_point()
        else t
    )


def assert_get_equal(ref, ours, batch_size, seed):
    np.random.seed(seed)
    want = list(ref.get(batch_size))
    rng_after = np.random.get_state()[1].copy()
    np.random.seed(seed)
    got = list(ours.get(batch_size))
    assert np.array_equal(np.random.get_state()[1], rng_after)  # the same random-number use
    assert len(want) == len(got)
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert type(a) is type(b)
        for field in a._fields:
            assert_same(getattr(a, field), getattr(b, field), f"batch {i} {field}")


def assert_obs_equal(ref, ours):
    if isinstance(ref.observations, dict):
        for k in ref.observations:
            assert_obs_equal_arrays(ref.observations[k], ours.observations[k])
    else:
        assert_obs_equal_arrays(ref.observations, ours.observations)


def assert_obs_equal_arrays(want, view):
    assert view.shape == want.shape and view.dtype == want.dtype
    got = np.asarray(view)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def make_pair(obs_space, act_space, T, n_envs, gae_lambda=0.95, gamma=0.99, **kw):
    dict_space = isinstance(obs_space, spaces.Dict)
    ref_cls, our_cls = (
        (DictRolloutBuffer, CompressedDictRolloutBuffer)
        if dict_space
        else (RolloutBuffer, CompressedRolloutBuffer)
    )
    args = (T, obs_space, act_space, "cpu", gae_lambda, gamma, n_envs)
    return ref_cls(*args), our_cls(*args, **kw)


def check_equivalence(obs_space, act_space, T, n_envs, batch_size, seed=0, **kw):
    ref, ours = make_pair(obs_space, act_space, T, n_envs, **kw)
    for lap in range(2):  # the second lap runs after reset(), reusing the storage
        if lap:
            ref.reset()
            ours.reset()
            assert (
                ours.pos == 0
                and not ours.full
                and not np.asarray(
                    ours.observations
                    if not isinstance(ours.observations, dict)
                    else ours.observations[next(iter(ours.observations))]
                ).any()
            )
        steps, last_values, dones = rollout(obs_space, act_space, T, n_envs, seed + 10 * lap)
        fill((ref, ours), steps, last_values, dones)
        assert_obs_equal(ref, ours)
        for rep in range(2):  # the first get() flattens, the second reuses
            assert_get_equal(ref, ours, batch_size, seed=100 * lap + rep)
            assert_obs_equal(ref, ours)
    return ref, ours


# -- get() equivalence ---------------------------------------------------------------------------
@pytest.mark.parametrize("space", list(SPACES))
@pytest.mark.parametrize("n_envs", [1, 4])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_get_equivalence(space, n_envs, batch_size, read_path):
    check_equivalence(SPACES[space], spaces.Discrete(3), 32, n_envs, batch_size)


@pytest.mark.parametrize("method", ["lz4-block", "zstd3", "zstd-3"])
@pytest.mark.parametrize("space", ["img_cf", "img_cl", "float"])
def test_get_equivalence_codecs(method, space):
    _, ours = check_equivalence(
        SPACES[space], spaces.Discrete(3), 40, 3, 16, compression_method=method, chunk_len=8
    )
    assert ours.compression_method == get_codec(method).name


@pytest.mark.parametrize("chunk_len", [1, 3, 64])
def test_get_equivalence_chunk_lengths(chunk_len):
    """Chunks shorter than a stack, not dividing the rollout, and longer than the rollout."""
    _, ours = check_equivalence(
        IMG_CF, spaces.Discrete(3), 40, 3, 16, compression_method="lz4-block", chunk_len=chunk_len
    )
    store = ours.frame_stores[None]
    assert store.frames.chunk_len == chunk_len and store.layout.depth == 4
    # every env's stream is in whole chunks except its open tail
    assert store.frames.nchunks == sum(int(h) // chunk_len for h in store.heads)


@pytest.mark.parametrize("gae_lambda,gamma", [(1.0, 0.9), (0.0, 0.99), (0.8, 1.0)])
def test_get_equivalence_gae_and_box_actions(gae_lambda, gamma):
    act = spaces.Box(-2, 2, (2,), np.float32)
    check_equivalence(IMG_CF, act, 24, 2, 10, gae_lambda=gae_lambda, gamma=gamma)


def test_get_equivalence_multibinary_actions_and_whole_observations():
    check_equivalence(IMG_CF, spaces.MultiBinary(3), 24, 2, 16, frame_dedup=False)


@pytest.mark.parametrize("n_envs", [1, 4])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_dict_get_equivalence(n_envs, batch_size, read_path):
    space = spaces.Dict(
        {"img": IMG_CF, "vec": SPACES["float"], "d": spaces.Discrete(4), "flag": SPACES["bool"]}
    )
    _, ours = check_equivalence(space, spaces.Discrete(3), 32, n_envs, batch_size)
    assert {k: v.dtype for k, v in ours.observations.items()} == {
        "img": np.uint8,
        "vec": np.float32,
        "d": np.int64,
        "flag": np.bool_,
    }


def test_stacked_frames_are_stored_once():
    ref, ours = check_equivalence(IMG_CF, spaces.Discrete(3), 64, 4, 64)
    store = ours.frame_stores[None]
    assert (store.layout.axis, store.layout.width, store.layout.depth) == (0, 1, 4)
    # one new 16x16 frame per step, none for the zero padding after resets
    assert store.frames_written == 64 * 4
    assert ours.nbytes_stored < ref.observations.nbytes / 3
    info = ours.storage_info()["observations"]
    assert info["layout"] == "4 frames of (1, 16, 16) stacked on axis 0" and info["frames_written"] == 256
    assert ours.nbytes_raw == ref.observations.nbytes and info["nbytes_stored"] == ours.nbytes_stored
    _, ours = check_equivalence(SPACES["img_rgb"], spaces.Discrete(3), 64, 2, 64)
    store = ours.frame_stores[None]
    assert (store.layout.width, store.layout.depth) == (3, 4) and store.frames_written == 64 * 2


@pytest.mark.parametrize("kind", ["random", "blank"])
def test_images_that_do_not_stack(kind):
    space = spaces.Box(0, 255, (4, 16, 16), np.uint8)
    rng = np.random.default_rng(0)
    T, n_envs = 40, 2
    ref, ours = make_pair(space, spaces.Discrete(3), T, n_envs)
    steps, last_values, dones = rollout(space, spaces.Discrete(3), T, n_envs, seed=5)
    for t, step in enumerate(steps):
        obs = (
            rng.integers(0, 255, (n_envs, *space.shape), dtype=np.uint8)
            if kind == "random"
            else np.zeros_like(step[0])
        )
        if kind == "blank" and t % 3 == 0:
            obs[:, 2:] = 7  # constant frames: equal to each other, so they prove no shift
        steps[t] = (obs, *step[1:])
    fill((ref, ours), steps, last_values, dones)
    assert_obs_equal(ref, ours)
    assert_get_equal(ref, ours, 16, seed=0)
    store = ours.frame_stores[None]
    if kind == "random":
        assert store.layout.axis is None  # detection gave up: each observation is one frame
        assert store.frames_written == T * n_envs
    else:  # leading zero frames are not stored
        frame_size = int(np.prod(store.layout.frame_shape))
        assert store.frames_written * frame_size < T * n_envs * int(np.prod(space.shape)) / 3


def test_views_behave_like_arrays():
    ref, ours = make_pair(IMG_CL, spaces.Discrete(3), 8, 2)
    steps, last_values, dones = rollout(IMG_CL, spaces.Discrete(3), 8, 2, seed=1)
    fill((ref, ours), steps[:5], last_values, dones)  # a partial rollout: unwritten slots are zeros
    want, view = ref.observations, ours.observations
    assert len(view) == 8 and view.ndim == 5 and view.nbytes == want.nbytes
    for key in (
        3,
        -1,
        slice(1, 6, 2),
        np.array([4, 0]),
        (2, 1),
        (slice(None), 0, 3),
        (..., 2),
        (np.array([1, 2]), np.array([0, 1])),
        np.arange(8) % 2 == 0,
    ):
        got = view[key]
        assert got.dtype == want.dtype and np.array_equal(got, want[key]), key
    assert np.array_equal(np.stack(list(view)), want)
    assert np.allclose(view, want) and (view == want).all()
    assert np.array_equal(view.astype(np.float32), want.astype(np.float32))
    with pytest.raises(TypeError, match="read-only"):
        view[0] = 0
    flat = view.swapaxes(0, 1).reshape(16, *IMG_CL.shape)
    assert np.array_equal(flat, RolloutBuffer.swap_and_flatten(want))


# -- bad input ---------------------------------------------------------------------------------
def snapshot(buf):
    obs = buf.observations
    obs = {k: np.asarray(v) for k, v in obs.items()} if isinstance(obs, dict) else np.asarray(obs)
    return buf.pos, pickle.dumps((obs, buf.actions, buf.rewards, buf.values))


@pytest.mark.parametrize("bad", ["shape", "dtype", "values", "n_envs"])
def test_bad_obs_is_refused_and_leaves_buffer_unchanged(bad):
    _, ours = make_pair(IMG_CF, spaces.Discrete(3), 8, 2)
    steps, _, _ = rollout(IMG_CF, spaces.Discrete(3), 8, 2, seed=2)
    for step in steps[:3]:
        ours.add(*step)
    before = snapshot(ours)
    frames_before = ours.frame_stores[None].frames_written
    obs = steps[3][0]
    wrong = {
        "shape": obs[:, :3],
        "dtype": obs.astype(np.float32) + 0.5,
        "values": obs.astype(np.int64) + 300,
        "n_envs": obs[:1],
    }[bad]
    with pytest.raises(ValueError, match="observations"):
        ours.add(wrong, *steps[3][1:])
    assert snapshot(ours) == before
    with pytest.raises(ValueError):  # a malformed action fails before the observations change
        ours.add(obs, np.zeros(5), *steps[3][2:])
    assert snapshot(ours) == before and ours.frame_stores[None].frames_written == frames_before
    ours.add(obs.astype(np.int64), *steps[3][1:])  # values that fit are accepted
    assert np.array_equal(ours.observations[3], obs)


def test_bad_dict_obs_leaves_buffer_unchanged():
    space = spaces.Dict({"img": IMG_CF, "vec": SPACES["float"]})
    _, ours = make_pair(space, spaces.Discrete(3), 8, 2)
    steps, _, _ = rollout(space, spaces.Discrete(3), 8, 2, seed=3)
    ours.add(*steps[0])
    before = snapshot(ours)
    obs = dict(steps[1][0])
    with pytest.raises(ValueError, match="vec"):
        ours.add({**obs, "vec": obs["vec"][:, :2]}, *steps[1][1:])
    with pytest.raises(ValueError, match="lacks"):
        ours.add({"img": obs["img"]}, *steps[1][1:])
    assert snapshot(ours) == before


def test_add_past_the_end_and_bad_options():
    _, ours = make_pair(SPACES["float"], spaces.Discrete(3), 2, 1)
    steps, _, _ = rollout(SPACES["float"], spaces.Discrete(3), 3, 1, seed=0)
    ours.add(*steps[0])
    ours.add(*steps[1])
    with pytest.raises(IndexError, match="reset"):
        ours.add(*steps[2])
    with pytest.raises((ValueError, KeyError)):
        CompressedRolloutBuffer(4, IMG_CF, spaces.Discrete(2), compression_method="no-such-codec")
    with pytest.raises(TypeError, match="Dict"):
        CompressedRolloutBuffer(4, spaces.Dict({"a": IMG_CF}), spaces.Discrete(2))
    buf = CompressedRolloutBuffer(4, IMG_CF, spaces.Discrete(2), dtypes={"elem_type": np.uint8})
    assert buf.observations.dtype == np.uint8  # sb3-extra-buffers' dtypes= is accepted and ignored


# -- pickling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["none", "zstd3"])
@pytest.mark.parametrize("when", ["partial", "full", "after_get"])
def test_pickle_round_trip(method, when):
    space = spaces.Dict({"img": IMG_CF, "vec": SPACES["float"]})
    for obs_space in (IMG_CL, space):
        ref, ours = make_pair(obs_space, spaces.Discrete(3), 16, 2, compression_method=method)
        steps, last_values, dones = rollout(obs_space, spaces.Discrete(3), 16, 2, seed=4)
        cut = 9 if when == "partial" else 16
        for buf in (ref, ours):
            for step in steps[:cut]:
                buf.add(*step)
        if when == "after_get":
            for buf in (ref, ours):
                buf.compute_returns_and_advantage(last_values, dones)
                np.random.seed(0)
                list(buf.get(8))
        for loaded in (pickle.loads(pickle.dumps(ours)), copy.deepcopy(ours)):
            want = copy.deepcopy(ref)
            assert_obs_equal(want, loaded)
            if when == "partial":  # a loaded buffer goes on adding
                fill((want, loaded), steps[cut:], last_values, dones)
            assert_get_equal(want, loaded, 8, seed=1)


def test_pickle_is_about_the_stored_size():
    ref, ours = check_equivalence(IMG_CF, spaces.Discrete(3), 64, 4, None)
    assert len(pickle.dumps(ours)) < len(pickle.dumps(ref)) / 2  # random frames: dedup only


# -- training ------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny networks train ~30x faster on one thread on a busy 2-core machine."""
    n = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n)


def same_parameters(a, b):
    pa, pb = list(a.policy.parameters()), list(b.policy.parameters())
    return len(pa) == len(pb) and all(th.equal(x, y) for x, y in zip(pa, pb, strict=True))


def train_ppo(env, buffer_class, steps, policy="MlpPolicy", **kw):
    model = PPO(
        policy,
        env,
        n_steps=32,
        batch_size=16,
        n_epochs=2,
        seed=7,
        device="cpu",
        rollout_buffer_class=buffer_class,
        rollout_buffer_kwargs=kw or None,
    )
    model.learn(steps)
    return model


def test_ppo_cartpole_parameters_identical():
    ref = train_ppo("CartPole-v1", None, 128)
    for kw in ({}, {"compression_method": "zstd3"}):
        ours = train_ppo("CartPole-v1", CompressedRolloutBuffer, 128, **kw)
        assert isinstance(ours.rollout_buffer, CompressedRolloutBuffer)
        assert same_parameters(ref, ours)


class TinyImageEnv(gym.Env):
    """Cheap, deterministic 16x16 grayscale frames that change a little each step."""

    observation_space = spaces.Box(0, 255, (16, 16, 1), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.frame = 0, self.np_random.integers(0, 255, (16, 16, 1), dtype=np.uint8)
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.frame = np.roll(self.frame, int(action) - 1, axis=1)
        self.frame[self.t % 16, :, 0] = self.t
        return self._obs(), float(action == 1), self.t >= 20, False, {}

    def _obs(self):
        return self.frame.copy()


class TinyDictEnv(TinyImageEnv):
    """The same frames as a 2-D (non-image) key, with a float vector and a Discrete key."""

    observation_space = spaces.Dict(
        {
            "grid": spaces.Box(0, 255, (16, 16), np.uint8),
            "vec": spaces.Box(-1, 1, (3,), np.float32),
            "phase": spaces.Discrete(4),
        }
    )

    def _obs(self):
        vec = np.array([self.t / 20, self.frame.mean() / 255, -1.0], np.float32)
        return {"grid": self.frame[..., 0].copy(), "vec": vec, "phase": self.t % 4}


def test_ppo_stacked_images_parameters_identical():
    def env():
        return VecFrameStack(make_vec_env(TinyImageEnv, n_envs=2, seed=5), n_stack=4)

    ref = train_ppo(env(), None, 128)
    ours = train_ppo(env(), CompressedRolloutBuffer, 128)
    assert ours.rollout_buffer.observations.dtype == np.uint8
    store = ours.rollout_buffer.frame_stores[None]
    assert store.layout.axis == 0 and store.layout.depth == 4  # PPO transposed the stack to channel-first
    assert same_parameters(ref, ours)


def test_ppo_dict_parameters_identical():
    def env():
        return make_vec_env(TinyDictEnv, n_envs=2, seed=5)

    ref = train_ppo(env(), None, 128, policy="MultiInputPolicy")
    ours = train_ppo(env(), CompressedDictRolloutBuffer, 128, policy="MultiInputPolicy")
    assert same_parameters(ref, ours)


# -- real Atari --------------------------------------------------------------------------------
@pytest.mark.parametrize("channels_last", [False, True])
def test_atari_get_equivalence(channels_last, read_path):
    tr = collect_atari("Pong", 96, n_envs=4, seed=1, channels_last=channels_last)
    space = spaces.Box(0, 255, tr.obs.shape[2:], np.uint8)
    T, n_envs = 64, 4
    for method in ("none", "zstd3"):
        ref, ours = make_pair(space, spaces.Discrete(6), T, n_envs, compression_method=method)
        rng = np.random.default_rng(0)
        for lap in range(2):  # the second rollout continues the episode after reset()
            ref.reset()
            ours.reset()
            values = th.as_tensor(rng.standard_normal((T, n_envs)).astype(np.float32))
            for t in range(T):
                s = lap * (96 - T) + t
                starts = tr.dones[s - 1] if s else np.ones(n_envs, bool)
                for buf in (ref, ours):
                    buf.add(
                        tr.obs[s], tr.actions[s], tr.rewards[s], starts, values[t], values[t] / 2
                    )
            for buf in (ref, ours):
                buf.compute_returns_and_advantage(values[-1], tr.dones[s])
            assert_obs_equal(ref, ours)
            assert_get_equal(ref, ours, 64, seed=lap)
            assert ours.nbytes_stored < ref.observations.nbytes / 3
