"""The compressed replay buffers against SB3's own, bit for bit."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from conftest import (
    assert_samples_equal,
    assert_views_equal,
    collect_atari,
    drive,
    frame_stack_stream,
    make_pair,
    random_transitions,
)
from gymnasium import spaces
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.callbacks import CheckpointCallback
from stable_baselines3.common.save_util import load_from_pkl
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)

# -- helpers ---------------------------------------------------------------------------------


SPACES = {
    "box_f32": spaces.Box(-1, 1, (5,), np.float32),
    "box_f64": spaces.Box(-1, 1, (2, 3), np.float64),
    "box_i32": spaces.Box(-1000, 1000, (4,), np.int32),
    "box_bool": spaces.Box(0, 1, (6,), bool),
    "box_u8_img": spaces.Box(0, 255, (3, 8, 8), np.uint8),
    "discrete": spaces.Discrete(7),
    "multibinary": spaces.MultiBinary(5),
    "multidiscrete": spaces.MultiDiscrete([3, 4]),
}
ACTIONS = {"discrete": spaces.Discrete(3), "box": spaces.Box(-1, 1, (2,), np.float32)}


# -- equivalence -------------------------------------------------------------------------------
@pytest.mark.parametrize("space_name", list(SPACES))
@pytest.mark.parametrize("n_envs", [1, 4])
@pytest.mark.parametrize("small", ["raw", "compressed"])
def test_synthetic_spaces_equal_sb3(space_name, n_envs, small):
    obs_space, act = SPACES[space_name], ACTIONS["box" if n_envs == 1 else "discrete"]
    ref, ours = make_pair("replay", 24 * n_envs, obs_space, act, n_envs=n_envs, small_arrays=small)
    assert (ours._columns is not None) == (small == "compressed")
    drive(ref, ours, random_transitions(obs_space, act, 60, n_envs))
    assert_views_equal(ref, ours)


@pytest.mark.parametrize("n_envs", [1, 4])
@pytest.mark.parametrize(("opt", "timeouts"), [(False, True), (False, False), (True, False)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_frame_stacks_equal_sb3(n_envs, opt, timeouts, channels_last, read_path):
    frame = (6, 5, 3) if channels_last else (1, 6, 5)
    shape = (6, 5, 12) if channels_last else (4, 6, 5)
    space = spaces.Box(0, 255, shape, np.uint8)
    ref, ours = make_pair("replay", 30 * n_envs, space, ACTIONS["discrete"], n_envs=n_envs,
                          optimize_memory_usage=opt, handle_timeout_termination=timeouts)
    rng = np.random.default_rng(0)
    stream = frame_stack_stream(100, n_envs, frame=frame, channels_last=channels_last)
    transitions = (
        (o, n, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32),
         rng.random(n_envs) < 0.1, [{"TimeLimit.truncated": bool(x)} for x in rng.random(n_envs) < 0.05])
        for o, n in stream
    )
    drive(ref, ours, transitions)
    assert_views_equal(ref, ours)
    assert ours.storage_info()["observations"]["depth"] == 4


@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("timeouts", [True, False])
@pytest.mark.parametrize("small", ["raw", "compressed"])
def test_dict_spaces_equal_sb3(n_envs, timeouts, small, read_path):
    space = spaces.Dict({
        "img": spaces.Box(0, 255, (4, 6, 5), np.uint8),
        "vec": spaces.Box(-1, 1, (3,), np.float32),
        "id": spaces.Discrete(5),
        "bits": spaces.MultiBinary(4),
    })
    act = ACTIONS["box"]
    ref, ours = make_pair("dict", 20 * n_envs, space, act, n_envs=n_envs, handle_timeout_termination=timeouts,
                          small_arrays=small)
    drive(ref, ours, random_transitions(space, act, 50, n_envs))
    assert_views_equal(ref, ours)
    assert set(ours.storage_info()) == {"img", "vec", "id", "bits", "_totals"}


@pytest.mark.parametrize(("n_steps", "gamma"), [(1, 0.99), (3, 0.99), (5, 0.9)])
@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("timeouts", [True, False])
@pytest.mark.parametrize("small", ["raw", "compressed"])
def test_nstep_equal_sb3(n_steps, gamma, n_envs, timeouts, small, read_path):
    space, act = SPACES["box_f32"], ACTIONS["discrete"]
    ref, ours = make_pair("nstep", 20 * n_envs, space, act, n_envs=n_envs, n_steps=n_steps, gamma=gamma,
                          handle_timeout_termination=timeouts, small_arrays=small)
    drive(ref, ours, random_transitions(space, act, 60, n_envs, ep_len=6))


def test_real_atari_short_equal_sb3(read_path):
    tr = collect_atari("Breakout", 500, max_episode_steps=320)
    assert tr.dones.any() and tr.truncations > 0
    space = spaces.Box(0, 255, tr.obs.shape[2:], np.uint8)
    ref, ours = make_pair("replay", 200, space, spaces.Discrete(4), chunk_len=16)
    drive(ref, ours, tr.steps(), every=50, batch_size=64)
    assert_views_equal(ref, ours)
    info = ours.storage_info()["observations"]
    assert (info["stack_axis"], info["depth"]) == (0, 4)
    assert info["frames_written"] < 1.1 * len(tr)


@pytest.mark.slow
@pytest.mark.parametrize(("game", "n_envs", "channels_last"),
                         [("Pong", 1, False), ("Breakout", 4, False), ("Pong", 4, True), ("Breakout", 1, True)])
def test_real_atari_equal_sb3(game, n_envs, channels_last):
    tr = collect_atari(game, 3000 // n_envs, n_envs=n_envs, channels_last=channels_last, max_episode_steps=800)
    assert tr.dones.any() and tr.truncations > 0
    space = spaces.Box(0, 255, tr.obs.shape[2:], np.uint8)
    for opt, timeouts in ((False, True), (True, False)):
        ref, ours = make_pair("replay", 1000, space, spaces.Discrete(6), n_envs=n_envs, chunk_len=32,
                              optimize_memory_usage=opt, handle_timeout_termination=timeouts)
        drive(ref, ours, tr.steps(), every=97, batch_size=128)
        assert_views_equal(ref, ours)
    ref, ours = make_pair("nstep", 1000, space, spaces.Discrete(6), n_envs=n_envs, n_steps=3)
    drive(ref, ours, tr.steps(), every=131, batch_size=128)
    assert ours.nbytes_stored < ours.nbytes_raw / 10


# -- ndarray behaviour, edge cases -------------------------------------------------------------
def test_observations_behave_like_ndarrays():
    space = SPACES["box_u8_img"]
    ref, ours = make_pair("replay", 10, space, ACTIONS["discrete"], n_envs=2)
    for tr in random_transitions(space, ACTIONS["discrete"], 3, 2):
        ref.add(*tr)
        ours.add(*tr)
    obs = ours.observations
    assert obs.shape == ref.observations.shape == (5, 2, 3, 8, 8)
    assert obs.dtype == np.uint8 and len(obs) == 5
    assert not np.asarray(obs)[3:].any()  # unwritten slots read as zeros
    for key in (0, -1, slice(1, 4), np.array([2, 0]), (np.array([0, 1]), np.array([1, 0]), slice(None)),
                (Ellipsis, 0), (0, 1, 2, 3)):
        assert np.array_equal(obs[key], ref.observations[key])
        assert np.array_equal(ours.next_observations[key], ref.next_observations[key])
    assert np.allclose(obs, ref.observations)
    assert all(np.array_equal(a, b) for a, b in zip(obs, ref.observations, strict=True))


def test_buffer_size_one_full_sample():
    space = SPACES["box_f32"]
    ref, ours = make_pair("replay", 1, space, ACTIONS["discrete"])
    drive(ref, ours, random_transitions(space, ACTIONS["discrete"], 5, 1), every=1, batch_size=4)
    assert ours.full and ours.size() == 1
    # SB3 cannot sample a full buffer of one with optimize_memory_usage (randint(1, 1)): neither can we
    ref, ours = make_pair("replay", 1, space, ACTIONS["discrete"], optimize_memory_usage=True,
                          handle_timeout_termination=False)
    for tr in random_transitions(space, ACTIONS["discrete"], 2, 1):
        ref.add(*tr)
        ours.add(*tr)
    for b in (ref, ours):
        with pytest.raises(ValueError):
            b.sample(4)
    assert np.array_equal(np.asarray(ours.observations), ref.observations)


def test_reset_extend_and_dones_written_after_add():
    space, act = SPACES["box_f32"], ACTIONS["discrete"]
    ref, ours = make_pair("replay", 16, space, act)
    drive(ref, ours, random_transitions(space, act, 20, 1))
    ref.reset()
    ours.reset()
    assert ours.size() == 0 and not np.asarray(ours.observations).any()
    trs = list(random_transitions(space, act, 6, 1, seed=3))
    batch = [np.stack([tr[i] for tr in trs]) for i in range(5)] + [[tr[5] for tr in trs]]
    ref.extend(*batch)
    ours.extend(*batch)
    for b in (ref, ours):  # what OffPolicyAlgorithm._setup_learn does to truncate the last trajectory
        b.dones[(b.pos - 1) % b.buffer_size] = True
    assert ours.size() == ref.size() == 6
    for seed in range(3):
        assert_samples_equal(ref, ours, 8, seed)


def test_vecnormalize_sampling_equal_sb3():
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), norm_obs=True, norm_reward=True)
    venv.reset()
    for _ in range(30):
        venv.step(np.array([venv.action_space.sample()]))
    space, act = venv.observation_space, venv.action_space
    ref, ours = make_pair("replay", 40, space, act)
    drive(ref, ours, random_transitions(space, act, 50, 1), env=venv)


def test_bad_input_raises_and_leaves_buffer_unchanged():
    space, act = spaces.Box(0, 255, (4, 6, 5), np.uint8), ACTIONS["discrete"]
    _, ours = make_pair("replay", 10, space, act)
    good = next(random_transitions(space, act, 1, 1))
    ours.add(*good)
    before = (ours.pos, ours.full, np.asarray(ours.observations).copy(), ours.actions.copy(), ours.nbytes_stored)
    obs, nxt, a, r, d, infos = good
    bad_inputs = [
        ((obs[:, :3], nxt, a, r, d, infos), r"expected shape \(1, 4, 6, 5\).*got shape \(1, 3, 6, 5\)"),
        ((obs, nxt.astype(np.float32) + 0.5, a, r, d, infos), "expected dtype uint8, got dtype float32"),
        ((obs.astype(np.int64) + 256, nxt, a, r, d, infos), "expected dtype uint8, got dtype int64"),
        ((obs, nxt, a, np.zeros(3, np.float32), d, infos), r"reward: expected shape \(1,\)"),
        ((obs, nxt, np.zeros(5), r, d, infos), "action"),
        ((obs, nxt, a, "abc", d, infos), "reward: cannot store 'abc'"),
        ((obs, nxt, a, r, d, []), "infos: expected 1 dicts"),
    ]
    for args, match in bad_inputs:
        with pytest.raises(ValueError, match=match):
            ours.add(*args)
        assert (ours.pos, ours.full) == before[:2]
        assert np.array_equal(np.asarray(ours.observations), before[2])
        assert np.array_equal(ours.actions, before[3]) and ours.nbytes_stored == before[4]
    ours.add(obs.astype(np.int64), nxt.astype(np.float64), a, r, d, infos)  # exact casts are accepted
    assert np.array_equal(ours.observations[1], obs) and np.array_equal(ours.next_observations[1], nxt)


def test_sb3_constructor_checks_mirrored():
    space, act = SPACES["box_f32"], ACTIONS["discrete"]
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        CompressedReplayBuffer(10, space, act, optimize_memory_usage=True)
    with pytest.raises(AssertionError):
        CompressedDictReplayBuffer(10, spaces.Dict({"a": space}), act, optimize_memory_usage=True,
                                   handle_timeout_termination=False)
    with pytest.raises(NotImplementedError):
        CompressedNStepReplayBuffer(10, space, act, optimize_memory_usage=True, handle_timeout_termination=False)
    with pytest.warns(UserWarning, match="stored losslessly"):  # sb3-extra-buffers' dtypes: informational
        buf = CompressedReplayBuffer(10, space, act, dtypes={"elem_type": np.uint8}, compression_method="lz4-block")
    assert buf.compression_method.startswith("lz4")


# -- pickling and SB3's save/load ------------------------------------------------------------
def test_pickle_stores_compressed_bytes():
    tr = collect_atari("Breakout", 500, max_episode_steps=320)
    space = spaces.Box(0, 255, tr.obs.shape[2:], np.uint8)
    ref, ours = make_pair("replay", 400, space, spaces.Discrete(4), chunk_len=32)
    for step in tr.steps():
        ref.add(*step)
        ours.add(*step)
    blob = pickle.dumps(ours, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) < ours.nbytes_raw / 20
    assert len(blob) < 1.5 * ours.nbytes_stored + 200_000
    clone = pickle.loads(blob)
    assert_views_equal(ref, clone)
    for seed in range(3):
        assert_samples_equal(ref, clone, 64, seed)
    for step in list(tr.steps())[:150]:  # keeps working, wraps around after load
        ref.add(*step)
        clone.add(*step)
    assert_samples_equal(ref, clone, 64, 7)


def test_model_save_and_load_replay_buffer(tmp_path, one_torch_thread):
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=500, learning_starts=50, seed=0, device="cpu",
                replay_buffer_class=CompressedReplayBuffer, replay_buffer_kwargs={"chunk_len": 16})
    checkpoint = CheckpointCallback(save_freq=150, save_path=str(tmp_path / "ckpt"), save_replay_buffer=True)
    model.learn(150, callback=checkpoint)
    saved = list((tmp_path / "ckpt").glob("*replay_buffer*.pkl"))
    assert len(saved) == 1 and isinstance(load_from_pkl(saved[0]), CompressedReplayBuffer)
    path = tmp_path / "buffer.pkl"
    model.save_replay_buffer(path)
    other = DQN("MlpPolicy", "CartPole-v1", buffer_size=500, seed=1, device="cpu",
                replay_buffer_class=CompressedReplayBuffer)
    other.load_replay_buffer(path)
    loaded = other.replay_buffer
    assert isinstance(loaded, CompressedReplayBuffer) and loaded.device == other.device
    assert path.stat().st_size < loaded.nbytes_raw
    for seed in range(3):
        assert_samples_equal(model.replay_buffer, loaded, 32, seed)
    loaded.device = th.device("cpu")  # what load_replay_buffer does; a new device is accepted
    other.learn(20, reset_num_timesteps=False)


# -- training with the same seed gives the same parameters ---------------------------------------
def _train(algo, env_id, buffer_class, steps, **kw):
    model = algo("MlpPolicy", env_id, seed=0, device="cpu", replay_buffer_class=buffer_class, **kw)
    model.learn(steps)
    return model


TRAINING = [
    (DQN, "CartPole-v1", ReplayBuffer, CompressedReplayBuffer,
     {"learning_starts": 100, "buffer_size": 150, "train_freq": 1, "batch_size": 32}),
    (DQN, "CartPole-v1", NStepReplayBuffer, CompressedNStepReplayBuffer,
     {"learning_starts": 100, "buffer_size": 150, "batch_size": 32,
      "replay_buffer_kwargs": {"n_steps": 3, "gamma": 0.99}}),
    (SAC, "Pendulum-v1", ReplayBuffer, CompressedReplayBuffer,
     {"learning_starts": 100, "buffer_size": 150, "batch_size": 32, "policy_kwargs": {"net_arch": [32, 32]}}),
]


@pytest.mark.parametrize(("algo", "env_id", "ref_cls", "our_cls", "kw"), TRAINING, ids=["dqn", "dqn-nstep", "sac"])
def test_training_bit_identical(algo, env_id, ref_cls, our_cls, kw, one_torch_thread):
    steps = 250 if algo is DQN else 180  # past the buffer size: sampling across the wrap-around
    a = _train(algo, env_id, ref_cls, steps, **kw)
    b = _train(algo, env_id, our_cls, steps, **kw)
    assert b.replay_buffer.full
    pa, pb = a.policy.state_dict(), b.policy.state_dict()
    assert pa.keys() == pb.keys()
    for name in pa:
        assert th.equal(pa[name], pb[name]), name


@pytest.mark.slow
def test_training_atari_cnn_bit_identical(one_torch_thread):
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)  # the ALE ids, whatever other tests ran before

    def run(cls):
        env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=2, seed=0), 4)
        model = DQN("CnnPolicy", env, buffer_size=1000, learning_starts=200, train_freq=4, batch_size=32,
                    seed=0, device="cpu", replay_buffer_class=cls)
        model.learn(1200)
        return model

    a, b = run(ReplayBuffer), run(CompressedReplayBuffer)
    for (n, x), (_, y) in zip(a.policy.state_dict().items(), b.policy.state_dict().items(), strict=True):
        assert th.equal(x, y), n
    assert b.replay_buffer.full
    assert b.replay_buffer.nbytes_stored < b.replay_buffer.nbytes_raw / 10


def test_default_dictionary_codec_trains_mid_fill_and_stays_equal(monkeypatch):
    """The default codec (zstd+dict) trains once enough frames are in; samples stay SB3's."""
    from chunkstore.array import _training
    from chunkstore.codecs import ZstdDictCodec

    frame = (1, 40, 40)
    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", 600 * 40 * 40)
    monkeypatch.setattr(ZstdDictCodec, "MIN_SAMPLE_BYTES", 64 << 10)  # the even chunks' ~300 frames train
    space = spaces.Box(0, 255, (4, 40, 40), np.uint8)
    ref, ours = make_pair("replay", 600, space, ACTIONS["discrete"], n_envs=2, chunk_len=8)
    rng = np.random.default_rng(0)
    stream = frame_stack_stream(900, 2, frame=frame)
    transitions = (  # four grey levels: compressible, so zstd can train a dictionary
        (o // 64 * 64, n // 64 * 64, rng.integers(0, 3, 2), rng.standard_normal(2).astype(np.float32),
         rng.random(2) < 0.02, [{}, {}])
        for o, n in stream
    )
    drive(ref, ours, transitions, every=50)
    codec = ours.storage_info()["observations"]["codec"]
    assert codec.endswith("+dict"), codec  # a plain zstd name would mean it fell back
    assert ours.frame_stores[None].frames.codec.dictionary is not None  # trained (untrained has the name too)
    assert_views_equal(ref, ours)


def test_unpickled_buffer_without_cache_stays_without_cache():
    """cache_bytes=0 survives pickling, also for a key whose layout is still undetected."""
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    _, ours = make_pair("replay", 50, space, ACTIONS["discrete"], cache_bytes=0)
    stream = frame_stack_stream(3, 1)  # too few stacks to detect the layout yet
    for o, n in stream:
        ours.add(o, n, np.zeros(1), np.zeros(1, np.float32), np.zeros(1, bool), [{}])
    clone = pickle.loads(pickle.dumps(ours))
    for o, n in frame_stack_stream(40, 1, seed=1):
        clone.add(o, n, np.zeros(1), np.zeros(1, np.float32), np.zeros(1, bool), [{}])
    store = clone.frame_stores[None]
    assert store.layout is not None and store.frames.cache is None
