"""``PrioritizedDQN``: SB3's DQN learning from a prioritized replay buffer, without editing SB3.

The learner side (weighted loss, ``|TD error|`` fed back, ``beta`` annealed, SB3's own ``train``
for a buffer that is not prioritized) is :class:`~sb3_integration.algorithms._per_learner.PrioritizedLearnerMixin`,
shared with ``PrioritizedQRDQN``; this module gives it DQN's per-sample Huber loss.
"""

from __future__ import annotations

from typing import Any

import torch as th
from stable_baselines3 import DQN
from torch.nn import functional as F

from sb3_integration.algorithms._per_learner import PrioritizedLearnerMixin

__all__ = ["PrioritizedDQN"]


class PrioritizedDQN(PrioritizedLearnerMixin, DQN):
    """SB3's ``DQN`` with prioritized replay (default buffer: the compressed prioritized ones).

    Arguments as ``DQN``'s, plus keyword-only ``beta_final`` (1.0): where ``beta`` ends at the
    end of training. With ``replay_buffer_class`` left None the buffer is
    :class:`~sb3_integration.CompressedPrioritizedReplayBuffer` (the Dict one for a Dict
    space, the n-step one with ``n_steps > 1``); ``replay_buffer_kwargs`` set ``alpha``, ``beta``,
    ``epsilon`` and the store options.
    """

    def _per_sample_loss(self, replay_data: Any) -> tuple[th.Tensor, th.Tensor]:
        """DQN's Huber loss per sample (its mean is ``DQN.train``'s loss) and ``|TD error|``."""
        discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
        with th.no_grad():
            next_q_values, _ = self.q_net_target(replay_data.next_observations).max(dim=1)
            target_q_values = replay_data.rewards + (1 - replay_data.dones) * discounts * next_q_values.reshape(-1, 1)
        current_q_values = th.gather(self.q_net(replay_data.observations), dim=1, index=replay_data.actions.long())
        per_sample = F.smooth_l1_loss(current_q_values, target_q_values, reduction="none").reshape(-1)
        return per_sample, (target_q_values - current_q_values).detach().abs().reshape(-1)
