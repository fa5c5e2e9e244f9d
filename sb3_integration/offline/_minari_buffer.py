"""A :class:`~sb3_integration.offline.minari_io.MinariStore`'s transitions in a replay buffer."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from chunkstore.validate import is_int

__all__ = ["fill_replay_buffer", "stack_frames"]


def _channels_last(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 and shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4)


def stack_frames(frames: np.ndarray, n_stack: int) -> np.ndarray:
    """``(T, *shape)`` frames of one episode -> ``(T, *stacked)``: each row the last ``n_stack``
    frames up to it, zeros before the first (``VecFrameStack``): on the last axis for
    channel-last images, else the first (a new one for 2-D frames)."""
    shape = frames.shape[1:]
    last = _channels_last(shape)
    t = len(frames)
    padded = np.concatenate([np.zeros((n_stack - 1, *shape), frames.dtype), frames])
    views = [padded[k:k + t] for k in range(n_stack)]  # oldest first, as VecFrameStack
    if last:
        return np.concatenate(views, axis=-1)
    if len(shape) == 2:
        return np.stack(views, axis=1)
    return np.concatenate(views, axis=1)


def _stacked_space(space: spaces.Box, n_stack: int) -> spaces.Box:
    shape = space.shape
    if _channels_last(shape):
        new = (*shape[:-1], shape[-1] * n_stack)
        axis = -1
    elif len(shape) == 2:
        new, axis = (n_stack, *shape), 0
    else:
        new, axis = (shape[0] * n_stack, *shape[1:]), 0
    low = np.broadcast_to(np.expand_dims(space.low, axis) if len(shape) == 2 else space.low, shape)
    return spaces.Box(low=np.min(low), high=np.max(space.high), shape=new, dtype=space.dtype)


def _is_image(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def fill_replay_buffer(store: Any, buffer_size: int | None, n_stack: int, device: Any,
                       kwargs: dict[str, Any]) -> Any:
    from sb3_integration.buffers.replay import CompressedDictReplayBuffer, CompressedReplayBuffer

    if not is_int(n_stack, minimum=1):
        raise ValueError(f"n_stack must be an int >= 1, got {n_stack!r}")
    obs_space = store.observation_space
    is_dict = isinstance(obs_space, spaces.Dict)
    if not is_dict and not isinstance(obs_space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete,
                                                   spaces.MultiBinary)):
        raise TypeError(f"observation space {type(obs_space).__name__}: replay buffers take Box, "
                        "Discrete, MultiDiscrete, MultiBinary or a Dict of them")
    keys = list(obs_space.spaces) if is_dict else [None]
    subspaces = {k: obs_space.spaces[k] if is_dict else obs_space for k in keys}
    stacked = {k: n_stack > 1 and _is_image(s) for k, s in subspaces.items()}
    new_spaces = {k: _stacked_space(s, n_stack) if stacked[k] else s for k, s in subspaces.items()}
    space = spaces.Dict(new_spaces) if is_dict else new_spaces[None]  # type: ignore[arg-type]
    # one more than the steps: a full buffer cannot tell whether its oldest episode was cut
    size = store.total_steps + 1 if buffer_size is None else int(buffer_size)
    cls = CompressedDictReplayBuffer if is_dict else CompressedReplayBuffer
    buf = cls(max(1, size), space, store.action_space, device=device, **kwargs)
    for ep in store.iterate_episodes():
        obs = ep.observations if is_dict else {None: ep.observations}
        obs = {k: stack_frames(np.asarray(v), n_stack) if stacked[k] else np.asarray(v) for k, v in obs.items()}
        actions = np.asarray(ep.actions)
        for t in range(len(ep.rewards)):
            o = {k: v[t:t + 1] for k, v in obs.items()}
            o2 = {k: v[t + 1:t + 2] for k, v in obs.items()}
            term, trunc = bool(ep.terminations[t]), bool(ep.truncations[t])
            buf.add(o if is_dict else o[None], o2 if is_dict else o2[None], actions[t:t + 1],
                    np.array([ep.rewards[t]], np.float32), np.array([term or trunc]),
                    [{"TimeLimit.truncated": trunc and not term}])
    return buf
