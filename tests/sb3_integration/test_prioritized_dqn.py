"""PrioritizedDQN: DQN's training with a uniform buffer, prioritized training otherwise."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_integration import (
    CompressedPrioritizedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
    PrioritizedDQN,
)

KW = dict(learning_starts=100, batch_size=32, train_freq=4, target_update_interval=200,
          policy_kwargs={"net_arch": [32]}, buffer_size=5000, device="cpu")


def test_uniform_buffer_trains_exactly_as_dqn(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    models = []
    for cls in (DQN, PrioritizedDQN):  # each built then trained: both seed the global RNGs at construction
        models.append(cls("MlpPolicy", "CartPole-v1", seed=3, replay_buffer_class=ReplayBuffer, **KW))
        models[-1].learn(800)
    a, b = (m.policy.state_dict() for m in models)
    assert a.keys() == b.keys()
    for k in a:
        assert th.equal(a[k], b[k]), k
    assert models[0]._n_updates == models[1]._n_updates > 100


class Recording(CompressedPrioritizedReplayBuffer):
    """Keeps what each sample drew and the priorities given back."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.log: list[tuple[np.ndarray, float, np.ndarray]] = []

    def sample(self, batch_size, env=None):  # type: ignore[no-untyped-def]
        s = super().sample(batch_size, env)
        self.log.append((np.array(s.indices), self.beta, s.weights.numpy().copy()))
        return s


def test_prioritized_training_feeds_back_and_anneals(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    model = PrioritizedDQN("MlpPolicy", "CartPole-v1", seed=0, replay_buffer_class=Recording,
                           replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4}, **KW)
    model.learn(1500)
    buf = model.replay_buffer
    betas = [beta for _, beta, _ in buf.log]
    assert betas[0] == pytest.approx(0.4, abs=0.05) and betas[-1] == pytest.approx(1.0, abs=0.02)
    assert np.all(np.diff(betas) >= 0)
    p = buf.priorities()[: buf.size()]
    assert len(np.unique(p)) > 100  # |TD error| came back for the sampled transitions
    assert any((w < 1).any() for _, _, w in buf.log[-50:])  # importance weights in use
    assert np.isfinite(model.logger.name_to_value.get("train/loss", 0.0))


def test_default_buffers(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    m = PrioritizedDQN("MlpPolicy", "CartPole-v1", **{**KW, "learning_starts": 10})
    assert type(m.replay_buffer) is CompressedPrioritizedReplayBuffer
    m = PrioritizedDQN("MlpPolicy", "CartPole-v1", n_steps=3, **{**KW, "learning_starts": 10})
    assert type(m.replay_buffer) is CompressedPrioritizedNStepReplayBuffer
    assert m.replay_buffer.n_steps == 3
    m.learn(100)


def test_alpha_zero_samples_uniformly(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    model = PrioritizedDQN("MlpPolicy", "CartPole-v1", seed=1, replay_buffer_class=Recording,
                           replay_buffer_kwargs={"alpha": 0.0}, **{**KW, "buffer_size": 400})
    model.learn(1200)  # the buffer is full from step 400: every draw after is over 400 slots
    buf = model.replay_buffer
    assert all((w == 1.0).all() for _, _, w in buf.log)
    late = np.concatenate([i for i, _, _ in buf.log[100:]])
    counts = np.bincount(late, minlength=400)
    assert len(counts) == 400  # no draw beyond the stored slots
    # every slot holds the same mass, whatever the TD errors fed back were
    np.testing.assert_array_equal(buf.priority_index.get(np.arange(400)), 1.0)
    # and the draws are uniform: chi-square with 399 degrees of freedom against its 0.999
    # quantile (~488; stratified draws vary less than independent ones, so this is conservative)
    expected = len(late) / 400
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 488, chi2


def test_uniform_dqn_gets_no_weights() -> None:
    env = gym.make("CartPole-v1")
    m = PrioritizedDQN("MlpPolicy", env, replay_buffer_class=ReplayBuffer, **{**KW, "learning_starts": 10})
    assert m._anneal_beta() is None
