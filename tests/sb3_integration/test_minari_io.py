"""Minari datasets made by Minari's own DataCollector (CartPole, Pendulum, a Dict-observation env,
a short real ALE run) into compressed chunks, to a file, back out to Minari: every field of every
episode identical; into a replay buffer with image observations stacked."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

minari = pytest.importorskip("minari")
from minari import DataCollector  # noqa: E402

from sb3_integration.offline.minari_io import MinariStore, import_minari  # noqa: E402

# Minari warns about metadata a test dataset leaves out (author, code_permalink, ...)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def minari_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))


class DictEnv(gym.Env):
    """Dict observations (a float vector, a small uint8 image, a Discrete flag), MultiDiscrete
    actions, nested numeric infos."""

    observation_space = spaces.Dict({
        "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
        "img": spaces.Box(0, 255, (8, 8), np.uint8),
        "flag": spaces.Discrete(3),
    })
    action_space = spaces.MultiDiscrete([3, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"step": np.int64(0), "inner": {"x": np.float32(0.5)}}

    def _obs(self):
        r = self.np_random
        return {"pos": r.uniform(-1, 1, 3).astype(np.float32),
                "img": r.integers(0, 256, (8, 8), dtype=np.uint8), "flag": int(r.integers(3))}

    def step(self, action):
        self.t += 1
        return (self._obs(), float(self.np_random.normal()), self.t >= 9 and action[1] == 1,
                self.t >= 12, {"step": np.int64(self.t), "inner": {"x": np.float32(self.t / 3)}})


def _collect(env, episodes, seed=0, max_steps=None, record_infos=True):
    env = DataCollector(env, record_infos=record_infos, jpeg_encoding=False)  # (84, 84, 1): PIL has no JPEG for it
    env.action_space.seed(seed)
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        steps = 0
        while True:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            steps += 1
            if term or trunc or (max_steps is not None and steps >= max_steps):
                break
    return env


def _dataset(name, env, episodes, **kw):
    return _collect(env, episodes, **kw).create_dataset(f"test/{name}-v0", algorithm_name="random")


def _atari_env():
    import ale_py
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    gym.register_envs(ale_py)
    return AtariWrapper(gym.make("PongNoFrameskip-v4"), terminal_on_life_loss=False)


def assert_same_value(a, b, where):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_same_value(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_value(x, y, f"{where}[{i}]")
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), where


def assert_same_episodes(expected, got):
    exp, out = list(expected), list(got)
    assert len(exp) == len(out) > 0
    for a, b in zip(exp, out, strict=True):
        assert a.id == b.id
        for field in ("observations", "actions", "rewards", "terminations", "truncations", "infos"):
            assert_same_value(getattr(a, field), getattr(b, field), f"episode {a.id}.{field}")


CASES = {
    "cartpole": (lambda: gym.make("CartPole-v1"), 6, {}),
    "pendulum": (lambda: gym.make("Pendulum-v1", max_episode_steps=40), 3, {}),
    "dict": (DictEnv, 5, {}),
    # AtariWrapper's reset info lacks the step info's keys, which the DataCollector refuses
    "pong": (_atari_env, 2, {"max_steps": 40, "record_infos": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_identical(tmp_path, case):
    make, episodes, kw = CASES[case]
    ds = _dataset(case, make(), episodes, **kw)
    store = import_minari(ds, tmp_path / "eps.h5")
    assert_same_episodes(ds.iterate_episodes(), store.iterate_episodes())
    with MinariStore.load(tmp_path / "eps.h5", lazy=True) as loaded:
        assert loaded.observation_space == ds.observation_space
        assert loaded.action_space == ds.action_space
        back = loaded.to_minari(f"test/{case}-back-v0")
    assert_same_episodes(ds.iterate_episodes(), minari.load_dataset(f"test/{case}-back-v0").iterate_episodes())
    assert back.total_steps == ds.total_steps and back.total_episodes == ds.total_episodes
    store.close()


def test_import_by_id_and_lengths(tmp_path):
    ds = _dataset("cp2", gym.make("CartPole-v1"), 3)
    store = import_minari("test/cp2-v0")
    assert store.total_episodes == 3 and store.total_steps == ds.total_steps
    with pytest.raises(IndexError):
        store.episode(3)


def test_replay_buffer_stacked_images(tmp_path):
    ds = _dataset("pong-rb", _atari_env(), 2, max_steps=30, record_infos=False)
    store = import_minari(ds)
    buf = store.to_replay_buffer(n_stack=4, device="cpu")
    assert buf.observation_space.shape == (84, 84, 4)
    assert buf.size() == ds.total_steps
    row = 0
    for ep in ds.iterate_episodes():
        frames = ep.observations[..., 0]
        padded = np.concatenate([np.zeros((3, 84, 84), np.uint8), frames])
        for t in range(len(ep.rewards)):
            want = np.moveaxis(padded[t:t + 4], 0, -1)
            want_next = np.moveaxis(padded[t + 1:t + 5], 0, -1)
            assert np.array_equal(buf.observations[row, 0], want), (ep.id, t)
            assert np.array_equal(buf.next_observations[row, 0], want_next), (ep.id, t)
            assert buf.actions[row, 0, 0] == ep.actions[t]
            assert buf.rewards[row, 0] == np.float32(ep.rewards[t])
            assert bool(buf.dones[row, 0]) == bool(ep.terminations[t] or ep.truncations[t])
            row += 1


def test_replay_buffer_dict(tmp_path):
    ds = _dataset("dict-rb", DictEnv(), 3)
    buf = import_minari(ds).to_replay_buffer(device="cpu")
    assert buf.size() == ds.total_steps
    first = next(ds.iterate_episodes())
    assert np.array_equal(buf.observations["img"][0, 0], first.observations["img"][0])
    assert np.array_equal(buf.next_observations["pos"][0, 0], first.observations["pos"][1])
    with pytest.raises(ValueError, match="n_stack"):
        import_minari(ds).to_replay_buffer(n_stack=0)


# -- a replay buffer out to Minari ----------------------------------------------------------------
def _fill_sb3(ds, buffer_size):
    from stable_baselines3.common.buffers import ReplayBuffer

    buf = ReplayBuffer(buffer_size, ds.observation_space, ds.action_space, device="cpu")
    for ep in ds.iterate_episodes():
        for t in range(len(ep.rewards)):
            term, trunc = bool(ep.terminations[t]), bool(ep.truncations[t])
            buf.add(ep.observations[t:t + 1], ep.observations[t + 1:t + 2], ep.actions[t:t + 1],
                    ep.rewards[t:t + 1], np.array([term or trunc]), [{"TimeLimit.truncated": trunc and not term}])
    return buf


def _assert_episodes_equal_values(expected, got):
    exp, out = list(expected), list(got)
    assert len(exp) == len(out) > 0
    for a, b in zip(exp, out, strict=True):
        assert_same_value(a.observations, b.observations, "observations")
        assert_same_value(a.actions, b.actions, "actions")
        assert np.array_equal(a.rewards.astype(np.float32), b.rewards)
        assert_same_value(a.terminations, b.terminations, "terminations")
        assert_same_value(a.truncations, b.truncations, "truncations")


@pytest.mark.parametrize("kind", ["ours", "sb3", "dict"])
def test_replay_buffer_to_minari(kind):
    from sb3_integration.offline.minari_io import replay_buffer_to_minari

    env = DictEnv() if kind == "dict" else gym.make("CartPole-v1", max_episode_steps=30)
    ds = _dataset(f"rb-{kind}", env, 6)
    store = import_minari(ds)
    buf = _fill_sb3(ds, ds.total_steps + 1) if kind == "sb3" else store.to_replay_buffer(device="cpu")
    replay_buffer_to_minari(buf, f"test/rb-{kind}-out-v0")
    back = minari.load_dataset(f"test/rb-{kind}-out-v0")
    _assert_episodes_equal_values(ds.iterate_episodes(), back.iterate_episodes())


def test_wrapped_buffer_exports_whole_episodes_only():
    from sb3_integration.offline.minari_io import replay_buffer_episodes

    ds = _dataset("rb-wrap", gym.make("CartPole-v1", max_episode_steps=30), 8)
    lengths = [len(ep.rewards) for ep in ds.iterate_episodes()]
    size = sum(lengths[-3:]) + lengths[-4] // 2  # the oldest kept episode is cut
    buf = import_minari(ds).to_replay_buffer(buffer_size=size, device="cpu")
    got = list(replay_buffer_episodes(buf))
    want = list(ds.iterate_episodes())[-3:]
    assert len(got) == 3
    for a, b in zip(want, got, strict=True):
        assert np.array_equal(a.observations, b["observations"])
        assert np.array_equal(a.actions, b["actions"])
    with pytest.raises(ValueError, match="env_index"):
        next(replay_buffer_episodes(buf, env_index=1))


def test_import_refuses_to_write_over_the_dataset(tmp_path):
    """``out`` that is (or links to) the dataset's own data file, or lies in its data directory,
    is refused before anything is written; the dataset still loads, unchanged."""
    import hashlib
    import os
    from pathlib import Path

    ds = _dataset("self", gym.make("CartPole-v1"), 2)
    data = ds._data.data_path
    main = os.path.join(data, "main_data.hdf5")
    before = hashlib.sha256(Path(main).read_bytes()).hexdigest()
    link = tmp_path / "link.h5"
    link.symlink_to(main)
    hard = tmp_path / "hard.h5"
    os.link(main, hard)
    for out, match in ((main, "which is read from"), (link, "resolves to"), (hard, "resolves to"),
                       (os.path.join(data, "new.h5"), "lies inside")):
        with pytest.raises(ValueError, match=match):
            import_minari(ds, out)
    assert hashlib.sha256(Path(main).read_bytes()).hexdigest() == before
    assert not os.path.exists(os.path.join(data, "new.h5"))
    store = import_minari(ds)
    with pytest.raises(ValueError, match="which is read from"):  # nor a save of the imported store
        store.save(main)
    assert hashlib.sha256(Path(main).read_bytes()).hexdigest() == before
    assert minari.load_dataset("test/self-v0").total_episodes == 2
    import_minari(ds, tmp_path / "fine.h5")  # any other path is written
    with MinariStore.load(tmp_path / "fine.h5") as loaded:  # and a loaded store saves over its own file
        loaded.save(tmp_path / "fine.h5")
    with MinariStore.load(tmp_path / "fine.h5") as again:
        assert again.total_episodes == 2
