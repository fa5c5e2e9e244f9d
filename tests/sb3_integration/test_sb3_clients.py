"""The buffers as SB3's algorithms, callbacks and client code use them (what other test files do not cover)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th
from conftest import assert_samples_equal, make_pair, random_transitions
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import BaseBuffer, RolloutBuffer
from stable_baselines3.common.callbacks import CheckpointCallback

from chunkstore import HybridTier
from sb3_integration import CompressedReplayBuffer, CompressedRolloutBuffer
from sb3_integration.buffers.views import ObservationView


def test_a_model_whose_buffer_is_on_a_tier_instance_checkpoints_and_loads(tmp_path, one_torch_thread):
    """model.save() pickles replay_buffer_kwargs: a tier instance there used to fail it (a lock)."""
    tier = HybridTier(1 << 14, tmp_path / "spill", segment_bytes=1 << 12)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=300, learning_starts=50, batch_size=16, seed=0,
                device="cpu", policy_kwargs={"net_arch": [16]}, replay_buffer_class=CompressedReplayBuffer,
                replay_buffer_kwargs={"tier": tier, "chunk_len": 4, "compression_method": "zstd1"})
    model.learn(120, callback=CheckpointCallback(60, str(tmp_path / "ckpt"), save_replay_buffer=True))
    assert tier.nbytes > 0
    loaded = DQN.load(tmp_path / "ckpt" / "rl_model_120_steps.zip", env=model.get_env(), device="cpu")
    new_tier = loaded.replay_buffer.store_options.tier
    assert isinstance(new_tier, HybridTier) and new_tier is not tier  # a new, empty tier of the same settings
    assert (new_tier.ram_budget_bytes, new_tier.segment_bytes) == (1 << 14, 1 << 12)
    assert new_tier.path.parent == tier.path.parent and new_tier.nbytes == 0
    loaded.load_replay_buffer(tmp_path / "ckpt" / "rl_model_replay_buffer_120_steps.pkl")
    buffer = loaded.replay_buffer
    # SB3 calls the callback after env.step, before it stores that step's transition
    assert isinstance(buffer, CompressedReplayBuffer) and buffer.size() == 119
    assert np.array_equal(buffer.observations[:119], model.replay_buffer.observations[:119])
    loaded.learn(40, reset_num_timesteps=False)
    assert loaded.num_timesteps == 160 and buffer.size() == 159
    assert all(th.isfinite(p).all() for p in loaded.policy.parameters())



def test_a_model_whose_spill_directory_cannot_be_made_loads_with_sb3s_warning(tmp_path, one_torch_thread):
    """Loading elsewhere (no such directory can be made): SB3 warns and goes on, as for any kwargs."""
    import shutil

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=100, learning_starts=30, device="cpu", seed=0,
                replay_buffer_class=CompressedReplayBuffer,
                replay_buffer_kwargs={"tier": HybridTier(1 << 14, tmp_path / "spill", segment_bytes=1 << 12)})
    model.learn(40)
    model.save(tmp_path / "model.zip")
    model.replay_buffer.close()
    shutil.rmtree(tmp_path / "spill")
    (tmp_path / "spill").write_text("a file where the directory was")
    with pytest.warns(UserWarning, match="Could not deserialize object replay_buffer_kwargs"):
        loaded = DQN.load(tmp_path / "model.zip", env=model.get_env(), device="cpu")
    assert isinstance(loaded.replay_buffer, CompressedReplayBuffer) and loaded.replay_buffer.store_options.tier is None
    loaded.learn(40, reset_num_timesteps=False)
    assert loaded.num_timesteps == 80

# -- buffer.observations as client code reads it ------------------------------------------------
def _filled_buffers():
    """SB3's and our replay buffers, and SB3's and our rollout buffers, holding the same observations."""
    space = spaces.Box(0, 255, (2, 5, 4), np.uint8)
    ref, ours = make_pair("replay", 12, space, spaces.Discrete(3), n_envs=2)
    for tr in random_transitions(space, spaces.Discrete(3), 9, 2):
        ref.add(*tr)
        ours.add(*tr)
    rollouts = (RolloutBuffer(6, space, spaces.Discrete(3), "cpu", n_envs=2),
                CompressedRolloutBuffer(6, space, spaces.Discrete(3), "cpu", n_envs=2, chunk_len=4))
    for t, (obs, *_) in enumerate(random_transitions(space, spaces.Discrete(3), 6, 2, seed=1)):
        for buf in rollouts:
            buf.add(obs, np.zeros((2, 1)), np.zeros(2, np.float32), np.full(2, t == 0), th.zeros(2), th.zeros(2))
    return ref, ours, rollouts


def _filled_pairs():
    """(SB3's, ours) observation arrays of replay and rollout buffers holding the same observations."""
    ref, ours, rollouts = _filled_buffers()
    return [(ref.observations, ours.observations), (ref.next_observations, ours.next_observations),
            (rollouts[0].observations, rollouts[1].observations)]


CALLS = {
    "mean": lambda a: a.mean(), "mean(axis)": lambda a: a.mean(axis=(0, 1)), "max": lambda a: a.max(),
    "min(axis=0)": lambda a: a.min(axis=0), "sum": lambda a: a.sum(dtype=np.int64), "std": lambda a: a.std(),
    "argmax": lambda a: a.argmax(), "any": lambda a: a.any(), "all": lambda a: a.all(),
    "tolist": lambda a: np.array(a.tolist()), "T": lambda a: a.T, "flatten": lambda a: a.flatten(),
    "ravel": lambda a: a.ravel(), "transpose": lambda a: a.transpose(1, 0, 2, 3, 4),
    "clip": lambda a: a.clip(10, 200), "tobytes": lambda a: np.frombuffer(a.tobytes(), np.uint8),
    "squeeze": lambda a: a[:, :1].squeeze(1), "strides": lambda a: np.array(a.strides),
    # reshapes and swaps past the leading (row, env) axes: a copy (they raised ValueError)
    "reshape(-1)": lambda a: a.reshape(-1), "reshape(rows, -1)": lambda a: a.reshape(a.shape[0], -1),
    "swapaxes(-1, -2)": lambda a: a.swapaxes(-1, -2), "swapaxes(0, 2)": lambda a: a.swapaxes(0, 2),
    "reshape leading": lambda a: np.asarray(a.reshape(-1, *a.shape[2:])),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_observation_views_take_numpys_array_methods(call):
    """buffer.observations.mean() and the like, as on SB3's ndarray (AttributeError before)."""
    for ref, view in _filled_pairs():
        got, want = CALLS[call](view), CALLS[call](ref)
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert np.array_equal(got, want), call


def test_observation_views_refuse_in_place_methods_and_unknown_names():
    for _, view in _filled_pairs():
        for call in (lambda v: v.fill(0), lambda v: v.sort(axis=0), lambda v: v.put([0], [1])):
            with pytest.raises(TypeError, match="in place"):
                call(view)
        for name in ("no_such_name", "__cuda_array_interface__", "device", "flags", "base"):
            assert not hasattr(view, name), name  # a probe for a tensor or for memory reads nothing
        with pytest.raises(AttributeError, match="no_such_name"):
            view.no_such_name  # noqa: B018


def test_shape_probes_of_a_view_read_nothing():
    """``strides`` (like ``shape``, ``nbytes``) is computed: a probe does not decode the buffer."""
    for ref, view in _filled_pairs():
        reads: list = []
        view._reader = lambda *a, reads=reads, reader=view._reader: reads.append(a) or reader(*a)
        assert view.strides == np.asarray(ref).strides and view.nbytes == ref.nbytes
        assert reads == []


def test_to_torch_of_a_whole_view_equals_sb3s_without_the_row_by_row_path():
    """buffer.to_torch(buffer.observations): torch would read the view row by row, and warn."""
    ref, ours, (_, rollout) = _filled_buffers()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("observations", "next_observations"):
            got = ours.to_torch(getattr(ours, name))
            assert got.dtype == th.uint8 and th.equal(got, ref.to_torch(getattr(ref, name)))
        got = rollout.to_torch(rollout.observations)
        assert th.equal(got, th.as_tensor(np.asarray(rollout.observations)))
        flat = rollout.to_torch(rollout.swap_and_flatten(rollout.observations))
        assert flat.shape == (12, 2, 5, 4) and th.equal(flat[:6], got[:, 0])


# -- the views as arrays: operators, writes through a writer, boolean masks ------------------------
def _writable_view(shape):
    data = np.random.default_rng(0).integers(0, 50, shape).astype(np.float32)

    def write(rows, envs, values):
        data[rows, envs] = values

    return ObservationView(lambda rows, envs: data[rows, envs].copy(), shape, data.dtype, writer=write), data


MASK = np.random.default_rng(1).random((6, 3)) < 0.5
KEYS = [(MASK,), (MASK, Ellipsis), (MASK, 1), (MASK, Ellipsis, 0), (MASK, slice(None), 1), (Ellipsis, 1),
        (th.as_tensor(MASK), Ellipsis, 1), (MASK.tolist(), Ellipsis),
        (slice(None), MASK[0]), (np.array([-1, 0]), np.array([2, -3])), (slice(None, None, -2), 0)]


def _axes(key):
    return sum(np.ndim(k) if np.asarray(k).dtype == bool else 1 for k in key if k is not Ellipsis)


CASES = [(item, key) for item in [(), (2, 3)] for key in KEYS if _axes(key) <= 2 + len(item)]


@pytest.mark.parametrize(("item_shape", "key"), CASES, ids=range(len(CASES)))
def test_view_reads_and_writes_index_as_numpy(item_shape, key):
    """A 2-D boolean mask indexes both leading axes, also with ``...`` or an item index after it
    (``rewards[dones == 1] = x`` on compressed small arrays raised IndexError)."""
    view, data = _writable_view((6, 3, *item_shape))
    want = data.copy()
    assert np.array_equal(view[key], want[key]) and view[key].shape == want[key].shape
    value = np.arange(want[key].size, dtype=np.float32).reshape(want[key].shape) + 100
    view[key] = value
    want[key] = value
    assert np.array_equal(data, want)
    view[key] = -1.0  # broadcast
    want[key] = -1.0
    assert np.array_equal(data, want)


OPERATORS = {  # "<=" with the view on the right: Python asks the view for the reflected comparison
    "==": lambda a: a == 0, "!=": lambda a: a != 3, ">": lambda a: a > 20, "<=": lambda a: 20 <= a,  # noqa: SIM300
    "+": lambda a: a + 1, "radd": lambda a: 1 + a, "*": lambda a: a * 2.5, "-": lambda a: -a, "abs": abs,
    "//": lambda a: a // 3, "**": lambda a: a**2, "where": lambda a: np.stack(np.where(a == 4)),
}


@pytest.mark.parametrize("op", list(OPERATORS))
def test_view_operators_act_on_the_values(op):
    """``buffer.dones == 1``, ``rewards + 1``, ...: Python fell back to identity (False) or TypeError."""
    view, data = _writable_view((6, 3))
    got, want = OPERATORS[op](view), OPERATORS[op](data)
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)


def test_in_place_operators_write_through_a_writable_view_and_a_read_only_one_refuses():
    view, data = _writable_view((6, 3))
    before = data.copy()
    alias = view
    view += 2
    view *= 3
    assert view is alias and np.array_equal(data, (before + 2) * 3)
    _, ours = _filled_pairs()[0]
    with pytest.raises(TypeError, match="read-only"):
        ours += 1
    assert hash(ours) == hash(ours)  # hashed by identity, as before the operators


def test_compressed_small_arrays_as_client_code_uses_them():
    """Large buffers keep actions/rewards/dones/timeouts in compressed chunks (small_arrays)."""
    space = spaces.Box(0, 255, (2, 5, 4), np.uint8)
    ref, ours = make_pair("replay", 12, space, spaces.Discrete(3), n_envs=2, small_arrays="compressed")
    for tr in random_transitions(space, spaces.Discrete(3), 15, 2):
        ref.add(*tr)
        ours.add(*tr)
    assert isinstance(ours.rewards, ObservationView)
    for buf in (ref, ours):  # what a reward-shaping callback writes
        buf.rewards[buf.dones == 1] -= 1.0
        buf.rewards += 0.5
    assert np.array_equal(np.asarray(ours.rewards), ref.rewards)
    for name in ("actions", "rewards", "dones", "timeouts"):
        want, got = getattr(ref, name), getattr(ours, name)
        assert np.array_equal(BaseBuffer.swap_and_flatten(got), BaseBuffer.swap_and_flatten(want)), name
        assert np.array_equal(got == 1, want == 1) and got.sum() == want.sum(), name
    for seed in range(3):
        assert_samples_equal(ref, ours, 8, seed)


# -- SB3's and sb3-contrib's off-policy algorithms, several envs, resumed from SB3's pickles --------
def _params_equal(a, b):
    pa, pb = a.policy.state_dict(), b.policy.state_dict()
    assert pa.keys() == pb.keys()
    for name in pa:
        assert th.equal(pa[name], pb[name]), name


def _algorithms():
    from sb3_contrib import QRDQN, TQC, CrossQ
    from stable_baselines3 import DDPG, TD3

    box = {"buffer_size": 90, "learning_starts": 40, "batch_size": 16}
    return {
        "td3": (TD3, "Pendulum-v1", {"policy_kwargs": {"net_arch": [16]}}),
        "ddpg": (DDPG, "Pendulum-v1", {"policy_kwargs": {"net_arch": [16]}}),
        "tqc": (TQC, "Pendulum-v1", {"policy_kwargs": {"net_arch": [16], "n_quantiles": 5, "n_critics": 2}}),
        "crossq": (CrossQ, "Pendulum-v1", {"policy_kwargs": {"net_arch": [16]}}),
        "qrdqn": (QRDQN, "CartPole-v1", {"policy_kwargs": {"net_arch": [16], "n_quantiles": 5},
                                          "optimize_memory_usage": True,
                                          "replay_buffer_kwargs": {"handle_timeout_termination": False}}),
    }, box


@pytest.mark.parametrize("name", ["td3", "ddpg", "tqc", "crossq", "qrdqn"])
def test_off_policy_algorithms_with_two_envs_train_as_with_sb3s_buffer(name, one_torch_thread):
    """Past the wrap-around of a 2-env buffer (45 rows): the same parameters as with SB3's ReplayBuffer."""
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env

    algorithms, common = _algorithms()
    algo, env_id, kw = algorithms[name]
    models = []
    for cls in (ReplayBuffer, CompressedReplayBuffer):
        model = algo("MlpPolicy", make_vec_env(env_id, n_envs=2, seed=0), seed=0, device="cpu",
                     replay_buffer_class=cls, **common, **kw)
        model.learn(140)
        models.append(model)
    assert models[1].replay_buffer.full and type(models[1].replay_buffer) is CompressedReplayBuffer
    assert models[0]._n_updates == models[1]._n_updates > 0
    _params_equal(*models)


def _train_pickle_resume(algo, policy, env, buffer_class, kw, path):
    """learn, model.save + save_replay_buffer, Algo.load + load_replay_buffer, learn on: what SB3's docs show."""
    import random

    model = algo(policy, env, seed=0, device="cpu", replay_buffer_class=buffer_class, **kw)
    model.learn(100)
    model.save(path / "model.zip")
    model.save_replay_buffer(path / "buffer.pkl")
    rng = (np.random.get_state(), th.get_rng_state(), random.getstate())  # noqa: NPY002 - SB3 samples with it
    resumed = algo.load(path / "model.zip", env=env, device="cpu", force_reset=False)
    np.random.set_state(rng[0])  # noqa: NPY002
    th.set_rng_state(rng[1])
    random.setstate(rng[2])
    resumed.load_replay_buffer(path / "buffer.pkl")
    assert type(resumed.replay_buffer) is buffer_class
    resumed.learn(60, reset_num_timesteps=False)
    assert resumed.num_timesteps == 160
    return resumed


@pytest.mark.parametrize("kind", ["sac", "her"])
def test_resumed_from_sb3s_pickles_with_two_envs_as_with_sb3s_buffer(kind, tmp_path, one_torch_thread):
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    from sb3_integration import CompressedHerReplayBuffer

    kw = {"buffer_size": 90, "learning_starts": 40, "batch_size": 16, "policy_kwargs": {"net_arch": [16]}}
    if kind == "her":
        classes, policy = (HerReplayBuffer, CompressedHerReplayBuffer), "MultiInputPolicy"
        kw["replay_buffer_kwargs"] = {"n_sampled_goal": 2}

        def make_env():
            return DummyVecEnv([lambda: BitFlippingEnv(n_bits=5, continuous=True, max_steps=5)] * 2)
    else:
        classes, policy = (ReplayBuffer, CompressedReplayBuffer), "MlpPolicy"

        def make_env():
            return make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    models = []
    for i, cls in enumerate(classes):
        (tmp_path / str(i)).mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # HER: "the last trajectory ... will be truncated"
            models.append(_train_pickle_resume(SAC, policy, make_env(), cls, kw, tmp_path / str(i)))
    assert models[0]._n_updates == models[1]._n_updates > 0
    _params_equal(*models)
    assert th.equal(models[0].log_ent_coef, models[1].log_ent_coef)


# -- on-policy algorithms and VecNormalize ----------------------------------------------------------
@pytest.mark.parametrize("algo_name", ["a2c", "trpo", "ppo"])
def test_on_policy_algorithms_on_three_normalized_envs_train_as_with_sb3s_buffer(algo_name, one_torch_thread):
    """A2C, sb3-contrib's TRPO and PPO with rollout_buffer_class= on VecNormalize(3 envs)."""
    from sb3_contrib import TRPO
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    algo, kw = {"a2c": (A2C, {"n_steps": 8}), "trpo": (TRPO, {"n_steps": 32, "batch_size": 16}),
                "ppo": (PPO, {"n_steps": 32, "batch_size": 16, "n_epochs": 2})}[algo_name]
    models = []
    for cls in (RolloutBuffer, CompressedRolloutBuffer):
        env = VecNormalize(make_vec_env("CartPole-v1", n_envs=3, seed=0))
        model = algo("MlpPolicy", env, seed=0, device="cpu", rollout_buffer_class=cls,
                     policy_kwargs={"net_arch": [16]}, **kw)
        model.learn(200)
        models.append(model)
    assert type(models[1].rollout_buffer) is CompressedRolloutBuffer
    assert models[0]._n_updates == models[1]._n_updates > 0
    _params_equal(*models)


def test_her_on_normalized_goal_envs_trains_as_with_sb3s_buffer(one_torch_thread):
    """HER samples normalise observations and relabelled goals with the VecNormalize env."""
    import gymnasium as gym
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from sb3_integration import CompressedHerReplayBuffer

    class Reach(gym.Env):
        """A point moving to a goal in the plane; reward -1 until within 0.1, then the episode ends."""

        goal = spaces.Box(-1, 1, (2,), np.float32)
        observation_space = spaces.Dict({"observation": spaces.Box(-5, 5, (4,), np.float32),
                                         "achieved_goal": goal, "desired_goal": goal})
        action_space = spaces.Box(-1, 1, (2,), np.float32)

        def _obs(self):
            return {"observation": np.concatenate([self.p, self.g]).astype(np.float32),
                    "achieved_goal": self.p.astype(np.float32), "desired_goal": self.g.astype(np.float32)}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.p, self.g, self.t = self.np_random.uniform(-1, 1, 2), self.np_random.uniform(-1, 1, 2), 0
            return self._obs(), {}

        def step(self, action):
            self.p, self.t = np.clip(self.p + 0.1 * action, -1, 1), self.t + 1
            reward = float(self.compute_reward(self.p, self.g, {}))
            return self._obs(), reward, reward == 0, self.t >= 10, {}

        def compute_reward(self, achieved, desired, info):
            return -(np.linalg.norm(np.asarray(achieved) - np.asarray(desired), axis=-1) > 0.1).astype(np.float32)

    models = []
    for cls in (HerReplayBuffer, CompressedHerReplayBuffer):
        env = VecNormalize(DummyVecEnv([Reach] * 2), norm_obs_keys=["observation", "achieved_goal", "desired_goal"])
        env.seed(0)
        model = SAC("MultiInputPolicy", env, buffer_size=200, learning_starts=40, batch_size=16, seed=0,
                    device="cpu", replay_buffer_class=cls, policy_kwargs={"net_arch": [16]},
                    replay_buffer_kwargs={"n_sampled_goal": 2})
        model.learn(260)
        models.append(model)
    assert models[1].replay_buffer.full and models[1]._n_updates > 0
    _params_equal(*models)
