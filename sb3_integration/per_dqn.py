"""``PrioritizedDQN``: SB3's DQN learning from a prioritized replay buffer, without editing SB3.

Its ``train`` is SB3's ``DQN.train`` with three changes when the buffer is prioritized
(its samples carry ``weights`` and ``indices``): the per-sample Huber loss is weighted by
``weights`` before the mean, ``|TD error|`` goes back through ``update_priorities``, and the
buffer's ``beta`` is annealed linearly from its initial value to ``beta_final`` (1.0) over the
training (SB3's progress, as its schedules use). With any other buffer ``train`` does exactly
what ``DQN.train`` does, so the two train identically for the same seed.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN
from torch.nn import functional as F

__all__ = ["PrioritizedDQN"]


class PrioritizedDQN(DQN):
    """SB3's ``DQN`` with prioritized replay (default buffer: the compressed prioritized ones).

    Arguments as ``DQN``'s, plus keyword-only ``beta_final`` (1.0): where ``beta`` ends at the
    end of training. With ``replay_buffer_class`` left None the buffer is
    :class:`~sb3_integration.CompressedPrioritizedReplayBuffer` (the Dict one for a Dict
    space, the n-step one with ``n_steps > 1``); ``replay_buffer_kwargs`` set ``alpha``, ``beta``,
    ``epsilon`` and the store options.
    """

    def __init__(self, *args: Any, beta_final: float = 1.0, **kwargs: Any) -> None:
        self.beta_final = float(beta_final)
        self._beta_start: float | None = None
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        chosen = self.replay_buffer_class is None
        if chosen:
            from sb3_integration.prioritized import (
                CompressedPrioritizedDictReplayBuffer,
                CompressedPrioritizedNStepReplayBuffer,
                CompressedPrioritizedReplayBuffer,
            )

            if isinstance(self.observation_space, spaces.Dict):
                self.replay_buffer_class = CompressedPrioritizedDictReplayBuffer
            elif self.n_steps > 1:
                self.replay_buffer_class = CompressedPrioritizedNStepReplayBuffer
                self.replay_buffer_kwargs.update({"n_steps": self.n_steps, "gamma": self.gamma})
            else:
                self.replay_buffer_class = CompressedPrioritizedReplayBuffer
        with warnings.catch_warnings():
            if chosen:  # SB3 warns that a given class ignores n_steps: this one was set up for them
                warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored", category=UserWarning)
            super()._setup_model()

    def _anneal_beta(self) -> float | None:
        buf: Any = self.replay_buffer
        if not hasattr(buf, "update_priorities"):
            return None
        if self._beta_start is None:
            self._beta_start = float(buf.beta)
        done = 1.0 - float(self._current_progress_remaining)
        buf.beta = self._beta_start + (self.beta_final - self._beta_start) * min(max(done, 0.0), 1.0)
        return float(buf.beta)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        beta = self._anneal_beta()
        if beta is None:  # not prioritized: SB3's own, exactly
            return super().train(gradient_steps, batch_size)
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses = []
        for _ in range(gradient_steps):
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)  # type: ignore[union-attr]
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
            with th.no_grad():
                next_q_values = self.q_net_target(replay_data.next_observations)
                next_q_values, _ = next_q_values.max(dim=1)
                next_q_values = next_q_values.reshape(-1, 1)
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * discounts * next_q_values
            current_q_values = self.q_net(replay_data.observations)
            current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())
            per_sample = F.smooth_l1_loss(current_q_values, target_q_values, reduction="none").reshape(-1)
            loss = (replay_data.weights.to(per_sample.device) * per_sample).mean()  # type: ignore[union-attr]
            losses.append(loss.item())
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            td_abs = (target_q_values - current_q_values).detach().abs().reshape(-1)
            self.replay_buffer.update_priorities(replay_data.indices, td_abs)  # type: ignore[union-attr]
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("train/beta", beta)
        return None
