"""PrioritizedQRDQN: QR-DQN's training with a uniform buffer, prioritized training otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer

pytest.importorskip("sb3_contrib")
from sb3_contrib import QRDQN
from sb3_contrib.common.utils import quantile_huber_loss

from sb3_integration import CompressedPrioritizedReplayBuffer, PrioritizedDQN, PrioritizedQRDQN
from sb3_integration.algorithms._per_learner import PrioritizedLearnerMixin
from sb3_integration.algorithms.per_qrdqn import quantile_huber_per_sample

KW = dict(learning_starts=100, batch_size=32, train_freq=4, target_update_interval=200,
          policy_kwargs={"net_arch": [32], "n_quantiles": 8}, buffer_size=5000, device="cpu")


def test_uniform_buffer_trains_exactly_as_qrdqn(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    models = []
    for cls in (QRDQN, PrioritizedQRDQN):
        models.append(cls("MlpPolicy", "CartPole-v1", seed=5, replay_buffer_class=ReplayBuffer, **KW))
        models[-1].learn(800)
    a, b = (m.policy.state_dict() for m in models)
    assert a.keys() == b.keys()
    for k in a:
        assert th.equal(a[k], b[k]), k
    assert models[0]._n_updates == models[1]._n_updates > 100


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_sample_loss_averages_to_sb3_contribs_loss(seed: int) -> None:
    g = th.Generator().manual_seed(seed)
    current = (th.randn(64, 12, generator=g) * 3).requires_grad_(True)
    target = th.randn(64, 12, generator=g) * 3
    per_sample, td_abs = quantile_huber_per_sample(current, target)
    assert per_sample.shape == td_abs.shape == (64,)
    ref = quantile_huber_loss(current, target, sum_over_quantiles=True)
    th.testing.assert_close(per_sample.mean(), ref, rtol=1e-6, atol=0)
    (g1,) = th.autograd.grad(per_sample.mean(), current)
    (g2,) = th.autograd.grad(ref, current)
    th.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)
    # the priority: mean absolute pairwise TD error, sample by sample (fp64 reference)
    c, t = current.detach().double().numpy(), target.double().numpy()
    want = np.abs(t[:, None, :] - c[:, :, None]).mean(axis=(1, 2))
    np.testing.assert_allclose(td_abs.double().numpy(), want, rtol=1e-5)
    # one sample's loss depends on that sample only
    other = target.clone()
    other[5] += 1.0
    moved = quantile_huber_per_sample(current, other)[0].detach() != per_sample.detach()
    assert moved.nonzero().reshape(-1).tolist() == [5]


def test_per_sample_loss_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="current and target"):
        quantile_huber_per_sample(th.zeros(4, 3), th.zeros(5, 3))
    with pytest.raises(ValueError, match="current and target"):
        quantile_huber_per_sample(th.zeros(4, 3, 1), th.zeros(4, 3, 1))


class Recording(CompressedPrioritizedReplayBuffer):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.betas: list[float] = []
        self.updates = 0

    def sample(self, batch_size, env=None):  # type: ignore[no-untyped-def]
        self.betas.append(self.beta)
        return super().sample(batch_size, env)

    def update_priorities(self, indices, priorities) -> None:  # type: ignore[no-untyped-def]
        self.updates += 1
        super().update_priorities(indices, priorities)


def test_prioritized_qrdqn_feeds_back_and_anneals(one_torch_thread) -> None:  # type: ignore[no-untyped-def]
    model = PrioritizedQRDQN("MlpPolicy", "CartPole-v1", seed=0, replay_buffer_class=Recording,
                             replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4}, **KW)
    model.learn(1200)
    buf = model.replay_buffer
    assert buf.updates == len(buf.betas) == model._n_updates > 200
    # first train at step ~learning_starts (100 of 1200): beta = 0.4 + 0.6 * 100 / 1200
    assert buf.betas[0] == pytest.approx(0.45, abs=0.01) and buf.betas[-1] == pytest.approx(1.0, abs=0.02)
    assert np.all(np.diff(buf.betas) >= 0)
    p = buf.priorities()[: buf.size()]
    assert len(np.unique(p)) > 100  # per-sample |TD| came back
    assert np.isfinite(model.logger.name_to_value["train/loss"])


def test_default_buffer_and_shared_learner() -> None:
    m = PrioritizedQRDQN("MlpPolicy", "CartPole-v1", **{**KW, "learning_starts": 10})
    assert type(m.replay_buffer) is CompressedPrioritizedReplayBuffer
    assert PrioritizedQRDQN.train is PrioritizedDQN.train is PrioritizedLearnerMixin.train
    with pytest.raises(ValueError, match="beta_final"):
        PrioritizedQRDQN("MlpPolicy", "CartPole-v1", beta_final=-1.0, **KW)
