"""``PrioritizedQRDQN``: sb3-contrib's QR-DQN learning from a prioritized replay buffer.

The learner side is :class:`~sb3_integration.algorithms._per_learner.PrioritizedLearnerMixin`, the one
``PrioritizedDQN`` uses; this module gives it QR-DQN's quantile Huber loss per sample (summed
over the current quantiles and averaged over the target ones, as sb3-contrib's
``quantile_huber_loss(..., sum_over_quantiles=True)`` does before its batch mean) and, as the
priority, the mean absolute pairwise quantile TD error of each sample. Needs sb3-contrib
(``pip install sb3-contrib``; rl-zoo3 installs it).
"""

from __future__ import annotations

from typing import Any

import torch as th
from sb3_contrib import QRDQN

from sb3_integration.algorithms._per_learner import PrioritizedLearnerMixin

__all__ = ["PrioritizedQRDQN", "quantile_huber_per_sample"]


def quantile_huber_per_sample(current: th.Tensor, target: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """Per-sample quantile Huber loss and mean ``|pairwise TD|`` of (batch, n) quantiles.

    ``current[b, i]`` is quantile ``tau_i = (i + 0.5) / n`` of sample ``b``; ``target[b, j]`` the
    target quantiles. The loss of sample ``b`` is ``mean_j sum_i |tau_i - [u_bij < 0]| H(u_bij)``
    with ``u_bij = target[b, j] - current[b, i]`` and ``H`` the Huber function (kappa 1).
    """
    if current.ndim != 2 or target.ndim != 2 or current.shape[0] != target.shape[0]:
        raise ValueError(f"current and target must be (batch, n) of one batch, got {tuple(current.shape)} "
                         f"and {tuple(target.shape)}")
    u = target[:, None, :] - current[:, :, None]  # (batch, n current, n target)
    abs_u = u.abs()
    huber = th.where(abs_u > 1.0, abs_u - 0.5, 0.5 * u**2)
    n = current.shape[1]
    tau = (th.arange(n, device=current.device, dtype=th.float) + 0.5).div(n).view(1, -1, 1)
    loss = ((tau - (u.detach() < 0).float()).abs() * huber).sum(dim=1).mean(dim=1)
    return loss, abs_u.detach().mean(dim=(1, 2))


class PrioritizedQRDQN(PrioritizedLearnerMixin, QRDQN):
    """sb3-contrib's ``QRDQN`` with prioritized replay (default buffer: the compressed prioritized ones).

    Arguments as ``QRDQN``'s, plus keyword-only ``beta_final`` (1.0), as :class:`PrioritizedDQN`.
    With a buffer that is not prioritized it runs ``QRDQN.train`` itself.
    """

    def _per_sample_loss(self, replay_data: Any) -> tuple[th.Tensor, th.Tensor]:
        batch_size = replay_data.rewards.shape[0]
        discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
        with th.no_grad():
            next_quantiles = self.quantile_net_target(replay_data.next_observations)
            greedy = next_quantiles.mean(dim=1, keepdim=True).argmax(dim=2, keepdim=True)
            next_quantiles = next_quantiles.gather(dim=2, index=greedy.expand(batch_size, self.n_quantiles, 1))
            target = replay_data.rewards + (1 - replay_data.dones) * discounts * next_quantiles.squeeze(dim=2)
        actions = replay_data.actions[..., None].long().expand(batch_size, self.n_quantiles, 1)
        current = th.gather(self.quantile_net(replay_data.observations), dim=2, index=actions).squeeze(dim=2)
        return quantile_huber_per_sample(current, target)
