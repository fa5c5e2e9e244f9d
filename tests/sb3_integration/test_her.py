"""CompressedHerReplayBuffer against SB3's HerReplayBuffer, bit for bit."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from conftest import assert_samples_equal
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st
from stable_baselines3 import DQN, SAC, HerReplayBuffer
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv

from chunkstore import FormatError
from sb3_integration import CompressedHerReplayBuffer, CompressedReplayBuffer
from sb3_integration.buffers.her import decode_infos, encode_infos


# -- helpers -----------------------------------------------------------------------------------
def make_venv(n_envs, image, continuous=False, n_bits=5, seed=0):
    venv = DummyVecEnv([lambda: BitFlippingEnv(n_bits=n_bits, continuous=continuous, image_obs_space=image)
                        for _ in range(n_envs)])
    venv.seed(seed)
    venv.action_space.seed(seed)
    return venv


def transitions(venv, steps, seed=0):
    """What SB3's ``_store_transition`` adds: next_obs holds the terminal observation at an episode end."""
    rng = np.random.default_rng(seed)
    obs = venv.reset()
    for _ in range(steps):
        if isinstance(venv.action_space, spaces.Discrete):
            actions = rng.integers(0, int(venv.action_space.n), venv.num_envs)
        else:
            actions = rng.uniform(-1, 1, (venv.num_envs, *venv.action_space.shape)).astype(np.float32)
        new_obs, rewards, dones, infos = venv.step(actions)
        next_obs = {k: v.copy() for k, v in new_obs.items()}
        for e in np.flatnonzero(dones):
            for k in next_obs:
                next_obs[k][e] = infos[e]["terminal_observation"][k]
        infos = [{**info, "step": np.int64(len(info)), "flag": np.float32(rng.random())} for info in infos]
        yield obs, next_obs, actions, rewards, dones, infos
        obs = new_obs


def pair(venv, buffer_size, **kw):
    space, act = venv.observation_space, venv.action_space
    ref = HerReplayBuffer(buffer_size, space, act, venv, "cpu", n_envs=venv.num_envs, **kw)
    ours = CompressedHerReplayBuffer(buffer_size, space, act, venv, "cpu", n_envs=venv.num_envs, chunk_len=4, **kw)
    return ref, ours


def assert_state_equal(ref, ours):
    for name in ("ep_start", "ep_length", "_current_ep_start", "actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(getattr(ref, name), getattr(ours, name)), name
    assert (ref.pos, ref.full) == (ours.pos, ours.full)
    for k in ref.observations:
        assert np.array_equal(np.asarray(ours.observations[k]), ref.observations[k]), k
        assert np.array_equal(np.asarray(ours.next_observations[k]), ref.next_observations[k]), k


# -- side by side ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
@pytest.mark.parametrize(("n_envs", "image"), [(1, True), (2, False), (2, True)])
def test_samples_bit_identical_to_sb3(strategy, n_envs, image):
    venv = make_venv(n_envs, image)
    ref, ours = pair(venv, 40, goal_selection_strategy=strategy, n_sampled_goal=3)
    for t, tr in enumerate(transitions(venv, 70)):  # 40 rows: wraps and overwrites episodes
        ref.add(*tr)
        ours.add(*tr)
        if t >= 6 and t % 5 == 0:
            assert_samples_equal(ref, ours, 24, seed=t, where=f"t={t}")
    assert_state_equal(ref, ours)


def test_copy_info_dict_and_truncation_match_sb3():
    venv = make_venv(2, False)
    ref, ours = pair(venv, 30, copy_info_dict=True)
    for tr in transitions(venv, 23):
        ref.add(*tr)
        ours.add(*tr)
    with pytest.warns(UserWarning, match="truncated"):
        ref.truncate_last_trajectory()
    with pytest.warns(UserWarning, match="truncated"):
        ours.truncate_last_trajectory()
    assert_state_equal(ref, ours)
    assert ref.infos.tolist() == ours.infos.tolist()
    assert_samples_equal(ref, ours, 16, seed=1)


def test_image_keys_are_compressed():
    venv = make_venv(1, True, n_bits=8)
    _, ours = pair(venv, 400)
    for tr in transitions(venv, 400):
        ours.add(*tr)
    assert ours.nbytes_stored * 10 < ours.nbytes_raw


def test_needs_a_dict_space():
    with pytest.raises(TypeError, match="goal-conditioned Dict"):
        CompressedHerReplayBuffer(10, BitFlippingEnv().observation_space["observation"],
                                  BitFlippingEnv().action_space)


def test_replay_buffer_points_dict_spaces_elsewhere():
    space = BitFlippingEnv().observation_space
    with pytest.raises(TypeError, match="use CompressedDictReplayBuffer"):
        CompressedReplayBuffer(10, space, BitFlippingEnv().action_space, "cpu")


# -- training ----------------------------------------------------------------------------------
def train(buffer_class, algo, image, steps=250):
    env = BitFlippingEnv(n_bits=5, continuous=algo is SAC, image_obs_space=image)
    model = algo("MultiInputPolicy", env, buffer_size=1000, learning_starts=40, batch_size=32, seed=3,
                 device="cpu", policy_kwargs={"net_arch": [16, 16]}, replay_buffer_class=buffer_class,
                 replay_buffer_kwargs={"n_sampled_goal": 2, "goal_selection_strategy": "future"})
    model.learn(steps)
    return model


@pytest.mark.parametrize(("algo", "image"), [
    (DQN, False),
    pytest.param(SAC, False, marks=pytest.mark.slow),
    pytest.param(DQN, True, marks=pytest.mark.slow),  # CNN on (1, 36, 36) image keys
    pytest.param(SAC, True, marks=pytest.mark.slow),
])
def test_training_ends_with_sb3s_parameters(one_torch_thread, algo, image):
    steps = 150 if image and algo is SAC else 250  # SAC's two CNNs are the slowest
    ref, ours = train(HerReplayBuffer, algo, image, steps), train(CompressedHerReplayBuffer, algo, image, steps)
    assert type(ours.replay_buffer) is CompressedHerReplayBuffer
    for (name, a), b in zip(ref.policy.state_dict().items(), ours.policy.state_dict().values(), strict=True):
        assert th.equal(a, b), name
    if algo is SAC:
        assert th.equal(ref.log_ent_coef, ours.log_ent_coef)


# -- saving ------------------------------------------------------------------------------------
@pytest.mark.parametrize("copy_info_dict", [False, True])
def test_hdf5_round_trip_then_continue(tmp_path, copy_info_dict):
    venv = make_venv(2, True)
    ref, ours = pair(venv, 30, copy_info_dict=copy_info_dict, goal_selection_strategy="episode",
                     n_sampled_goal=2)
    steps = transitions(venv, 60)
    for _, tr in zip(range(37), steps, strict=False):
        ref.add(*tr)
        ours.add(*tr)
    ours.save(tmp_path / "her.h5")
    loaded = CompressedHerReplayBuffer.load(tmp_path / "her.h5", device="cpu", env=venv)
    assert (loaded.n_sampled_goal, loaded.goal_selection_strategy, loaded.copy_info_dict) == (
        2, ours.goal_selection_strategy, copy_info_dict)
    assert_state_equal(ref, loaded)
    if copy_info_dict:
        assert repr(loaded.infos.tolist()) == repr(ref.infos.tolist())  # numpy scalar types kept
    assert_samples_equal(ref, loaded, 20, seed=5)
    for tr in steps:
        ref.add(*tr)
        loaded.add(*tr)
    assert_state_equal(ref, loaded)
    assert_samples_equal(ref, loaded, 20, seed=6)


def test_load_without_env_then_set_env(tmp_path):
    venv = make_venv(1, False)
    _, ours = pair(venv, 20)
    for tr in transitions(venv, 12):
        ours.add(*tr)
    ours.save(tmp_path / "her.h5")
    loaded = CompressedHerReplayBuffer.load(tmp_path / "her.h5", device="cpu")
    assert loaded.env is None
    loaded.set_env(venv)
    assert_samples_equal(ours, loaded, 8, seed=0)


def test_damaged_her_arrays_are_reported(tmp_path):
    import h5py

    venv = make_venv(1, False)
    _, ours = pair(venv, 20)
    for tr in transitions(venv, 12):
        ours.add(*tr)
    ours.save(tmp_path / "her.h5")
    with h5py.File(tmp_path / "her.h5", "a") as f:
        name = next(n for n in _walk(f) if n.endswith("ep_length"))
        del f[name]
    with pytest.raises(FormatError):
        CompressedHerReplayBuffer.load(tmp_path / "her.h5", device="cpu")


def _walk(group, prefix=""):
    for key, item in group.items():
        path = f"{prefix}/{key}"
        yield path
        if hasattr(item, "items"):
            yield from _walk(item, path)


def test_pickle_via_model_round_trip(tmp_path):
    env = BitFlippingEnv(n_bits=5)
    kw = {"buffer_size": 500, "learning_starts": 30, "seed": 0, "device": "cpu",
          "policy_kwargs": {"net_arch": [8]}}
    model = DQN("MultiInputPolicy", env, replay_buffer_class=CompressedHerReplayBuffer, **kw)
    model.learn(60)
    model.save_replay_buffer(tmp_path / "her.pkl")
    fresh = DQN("MultiInputPolicy", env, replay_buffer_class=CompressedHerReplayBuffer, **kw)
    fresh.load_replay_buffer(tmp_path / "her.pkl", truncate_last_traj=False)
    buf = fresh.replay_buffer
    assert type(buf) is CompressedHerReplayBuffer and buf.env is fresh.env
    assert_samples_equal(model.replay_buffer, buf, 16, seed=2)
    assert "env" not in pickle.loads(pickle.dumps(buf)).__dict__ or pickle.loads(pickle.dumps(buf)).env is None


# -- infos as JSON -----------------------------------------------------------------------------
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**62), 2**62), st.floats(allow_nan=False), st.text(max_size=5),
    st.integers(-100, 100).map(np.int16), st.floats(width=32, allow_nan=False).map(np.float32),
    st.booleans().map(np.bool_),
    st.lists(st.floats(allow_nan=False), max_size=4).map(lambda v: np.array(v, np.float64)),
)
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=10)


@given(st.lists(st.dictionaries(st.text(max_size=6), _values, max_size=4), min_size=1, max_size=6))
def test_infos_json_round_trip_keeps_types(cells):
    infos = np.empty(len(cells), object)
    for i, c in enumerate(cells):
        infos[i] = c
    back = decode_infos(encode_infos(infos), infos.shape)
    assert repr(back.tolist()) == repr(infos.tolist())


def test_infos_json_refuses_what_it_cannot_keep():
    infos = np.empty((1, 1), object)
    infos[0, 0] = {"obj": object()}
    with pytest.raises(TypeError, match=r"infos\[0\]\['obj'\]: cannot save a object"):
        encode_infos(infos)
