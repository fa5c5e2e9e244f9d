"""Uniform draws, as SB3's ``ReplayBuffer.sample`` and ``_get_samples`` make them.

SB3 draws the rows in ``sample()`` (``randint(0, upper)``; with
``optimize_memory_usage`` and a full buffer ``(randint(1, buffer_size) + pos) %
buffer_size``, so the row being overwritten is never drawn) and then, in
``_get_samples``, the envs (``randint(0, n_envs, size=len(rows))``). This sampler
makes the rows' call. With numpy's global generator (``rng=None``) it leaves the
envs to the read, SB3's own ``_get_samples``, which draws them right after as SB3
does: a buffer samples exactly SB3's batches, through SB3's code, and leaves the
generator where SB3 leaves it. With a ``Generator`` (``prefetch``) it draws the envs
too, from that generator. Dict and n-step buffers draw as the plain one (SB3's
``DictReplayBuffer`` does not take ``optimize_memory_usage``, and its n-step buffer
refuses it).
"""

from __future__ import annotations

from typing import Any

from sb3_integration.samplers.base import Draw, Sampler, randint

__all__ = ["UniformSampler"]


class UniformSampler(Sampler):
    """SB3's uniform draw over the stored rows and envs (see the module docstring)."""

    name = "uniform"

    def sample(self, buffer: Any, batch_size: int, rng: Any = None) -> Draw:
        size, pos = buffer.buffer_size, buffer.pos
        if buffer.optimize_memory_usage:
            rows = (randint(rng, 1, size, batch_size) + pos) % size if buffer.full \
                else randint(rng, 0, pos, batch_size)
        else:
            rows = randint(rng, 0, size if buffer.full else pos, batch_size)
        return Draw(rows, None if rng is None else randint(rng, 0, buffer.n_envs, (len(rows),)))
