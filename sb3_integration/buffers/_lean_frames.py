"""The lean read of a sample whose observations are one host frame store (issue 38, item 2).

A :class:`~sb3_integration.buffers.replay.CompressedReplayBuffer` whose one observation key is
compressed (a :class:`~sb3_integration.engine.frames.FrameStore` in host memory) and whose small
arrays are SB3's (raw) reads a drawn sample here instead of through SB3's ``_get_samples`` and the
observation views: the same computation, without the views' per-call index checks (the sampler
drew the rows and envs in range), the per-key memo of a batch plan and the conversion through
``to_torch``'s dispatch:

* the envs, when the draw left them to the read, with SB3's own call (``np.random.randint(0,
  n_envs, size=(len(rows),))``, right after the rows, as SB3's ``_get_samples`` draws them);
* the observations and next observations (or, with ``optimize_memory_usage``, the next rows of
  ``observations``) in one :meth:`FrameStore.gather` call: one native call for both;
* actions, dones (masked by timeouts) and rewards as SB3 computes them. Every array is made for
  this call (numpy's fancy indexing copies; the observation block is one nothing else holds), so
  each is handed to torch without the second copy SB3's ``to_torch`` (``th.tensor``) makes:
  ``th.from_numpy`` on the CPU, ``th.as_tensor(..., device=device)`` elsewhere (one copy there).

The samples are SB3's bit for bit (the tests compare them with SB3's buffer fed the same
transitions under the same seed). A read with ``VecNormalize`` (``env``), a Dict or n-step
buffer, frames on a device or compressed small arrays takes the general path.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_integration.engine.frames import FrameStore

__all__ = ["frame_samples", "lean_frames"]


def lean_frames(buf: Any, mixin_get_samples: Any) -> bool:
    """Whether ``buf`` (its storage decided) reads its samples with :func:`frame_samples`."""
    store = buf._stores.get(None)
    return (type(store) is FrameStore and buf._columns is None and len(buf._stores) == 1
            and not isinstance(buf, (DictReplayBuffer, NStepReplayBuffer))
            and type(buf)._get_samples is mixin_get_samples)


def frame_samples(buf: Any, rows: np.ndarray, envs: np.ndarray | None) -> Any:
    """SB3's ``ReplayBuffer._get_samples(rows)`` (it draws ``envs`` when None), read in one gather.

    None when the frames are on a device (or not laid out yet): the caller reads the general way.
    """
    store = buf._stores[None]
    frames = store.frames
    if frames is None or frames.device is not None:
        return None
    if envs is None:  # SB3's draw, where SB3 makes it
        envs = np.random.randint(0, high=buf.n_envs, size=(len(rows),))  # noqa: NPY002
    obs, next_obs = store.gather([buf._remap(w, r) for w, r in buf._sample_plan(rows)], envs)
    device = buf.device  # arrays made for this call: handed over, as SB3's ``th.tensor`` copies would be
    tensor = th.from_numpy if device.type == "cpu" else partial(th.as_tensor, device=device)
    return ReplayBufferSamples(
        tensor(obs), tensor(buf.actions[rows, envs, :]), tensor(next_obs),
        tensor((buf.dones[rows, envs] * (1 - buf.timeouts[rows, envs])).reshape(-1, 1)),
        tensor(buf.rewards[rows, envs].reshape(-1, 1)),
    )
