"""The learner side of prioritized replay, shared by ``PrioritizedDQN`` and ``PrioritizedQRDQN``.

:class:`PrioritizedLearnerMixin` goes before an SB3 off-policy algorithm whose ``train`` samples
the replay buffer, computes one loss and takes one optimizer step per gradient step (DQN,
QR-DQN). When the buffer is prioritized (it has ``update_priorities``) the mixin's ``train``
runs that loop with the algorithm's *per-sample* loss (``_per_sample_loss``) weighted by the
sample's importance weights before the mean, feeds the per-sample ``|TD error|`` back through
``update_priorities``, and anneals the buffer's ``beta`` linearly to ``beta_final`` over
training (SB3's progress, as its schedules use). With any other buffer it calls the
algorithm's own ``train``, so it trains exactly as the algorithm does for the same seed.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces

__all__ = ["PrioritizedLearnerMixin"]


class PrioritizedLearnerMixin:
    """Prioritized ``train`` for an SB3 value-based algorithm; see the module docstring.

    A subclass defines ``_per_sample_loss(replay_data) -> (loss, td_abs)``: both 1-D tensors of
    the batch's length, ``loss`` differentiable (its mean is the algorithm's own loss),
    ``td_abs`` the non-negative priority signal (detached).
    """

    # set by the algorithm class the mixin is combined with
    replay_buffer: Any
    replay_buffer_class: Any
    replay_buffer_kwargs: dict[str, Any]
    observation_space: spaces.Space
    policy: Any
    logger: Any
    max_grad_norm: Any
    gamma: float
    _n_updates: int
    _current_progress_remaining: float
    _vec_normalize_env: Any

    def __init__(self, *args: Any, beta_final: float = 1.0, **kwargs: Any) -> None:
        beta_final = float(beta_final)
        if not np.isfinite(beta_final) or beta_final < 0:
            raise ValueError(f"beta_final must be a finite number >= 0, got {beta_final!r}")
        self.beta_final = beta_final
        self._beta_start: float | None = None
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        chosen = self.replay_buffer_class is None
        if chosen:
            from sb3_integration.buffers.prioritized import (
                CompressedPrioritizedDictReplayBuffer,
                CompressedPrioritizedNStepReplayBuffer,
                CompressedPrioritizedReplayBuffer,
            )

            n_steps = int(getattr(self, "n_steps", 1))
            if isinstance(self.observation_space, spaces.Dict):
                self.replay_buffer_class = CompressedPrioritizedDictReplayBuffer
            elif n_steps > 1:
                self.replay_buffer_class = CompressedPrioritizedNStepReplayBuffer
                self.replay_buffer_kwargs.update({"n_steps": n_steps, "gamma": self.gamma})
            else:
                self.replay_buffer_class = CompressedPrioritizedReplayBuffer
        with warnings.catch_warnings():
            if chosen:  # SB3 warns that a given class ignores n_steps: this one was set up for them
                warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored", category=UserWarning)
            super()._setup_model()  # type: ignore[misc]

    def _anneal_beta(self) -> float | None:
        buf: Any = self.replay_buffer
        if not hasattr(buf, "update_priorities"):
            return None
        if self._beta_start is None:
            self._beta_start = float(buf.beta)
        done = 1.0 - float(self._current_progress_remaining)
        buf.beta = self._beta_start + (self.beta_final - self._beta_start) * min(max(done, 0.0), 1.0)
        return float(buf.beta)

    def _per_sample_loss(self, replay_data: Any) -> tuple[th.Tensor, th.Tensor]:
        raise NotImplementedError

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        beta = self._anneal_beta()
        if beta is None:  # not prioritized: the algorithm's own, exactly
            return super().train(gradient_steps, batch_size)  # type: ignore[misc]
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)  # type: ignore[attr-defined]
        losses = []
        for _ in range(gradient_steps):
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            per_sample, td_abs = self._per_sample_loss(replay_data)
            loss = (replay_data.weights.to(per_sample.device) * per_sample).mean()
            losses.append(loss.item())
            self.policy.optimizer.zero_grad()
            loss.backward()
            if self.max_grad_norm is not None:
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            self.replay_buffer.update_priorities(replay_data.indices, td_abs.detach().reshape(-1))
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("train/beta", beta)
        return None
