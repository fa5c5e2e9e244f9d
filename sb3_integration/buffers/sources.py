"""Replay buffers of sb3-extra-buffers and SB3 (objects or pickles) read into a buffer of this package.

What converting a buffer needs below the buffer classes: unpickling a source (:func:`unpickle`),
checking it (:func:`check_source`), reading its observations row by row, and :func:`convert_into`,
which builds a given buffer class with the source's shape and adds every stored transition at the
same row. :mod:`sb3_integration.interop.convert` chooses the class and loads into a model; the
buffers' ``from_sb3_extra_buffers`` class method calls :func:`convert_into` with their own class.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.save_util import load_from_pkl

__all__ = ["check_source", "convert_into", "is_sb3eb", "unpickle"]

_EXTRA = "pip install 'chunkstore-rl[sb3eb]'"


def is_sb3eb(obj: Any) -> bool:
    return type(obj).__module__.startswith("sb3_extra_buffers.")


def unpickle(path: str | os.PathLike[str]) -> Any:
    try:
        return load_from_pkl(os.fspath(path))
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("sb3_extra_buffers", "zstd", "lz4", "isal", "numba"):
            raise ImportError(f"{os.fspath(path)} holds an sb3-extra-buffers buffer; reading it needs "
                              f"sb3-extra-buffers and its codec backends ({e.name} is missing): {_EXTRA}") from e
        raise


# -- reading observations from the source buffer --------------------------------------
Reader = Callable[[Any, int], Any]  # (the source's observations or next_observations, row) -> (n_envs, ...)


def _reader(src: Any) -> Reader:
    """How to read row ``i`` of ``src.observations`` (or ``next_observations``) for all envs."""
    dict_space = isinstance(src.observation_space, spaces.Dict)
    if not is_sb3eb(src):
        if dict_space:
            return lambda obs, i: {key: arr[i] for key, arr in obs.items()}
        return lambda obs, i: obs[i]

    def blobs(cells: np.ndarray, shape: tuple[int, ...], **kw: Any) -> np.ndarray:
        missing = [e for e, b in enumerate(cells) if b is None]
        if missing:
            raise ValueError(f"the sb3-extra-buffers buffer has no observation stored for env(s) {missing}")
        return np.stack([np.asarray(src._decompress(b, **kw)).reshape(shape) for b in cells])

    if dict_space:
        return lambda obs, i: {key: blobs(arr[i], src.obs_shape[key], arr_configs=src.flatten_configs[key])
                               for key, arr in obs.items()}
    return lambda obs, i: blobs(obs[i], src.obs_shape)


def check_source(src: Any) -> None:
    if is_sb3eb(src):
        known = ("CompressedReplayBuffer", "CompressedDictReplayBuffer")
        if type(src).__name__ not in known:
            raise TypeError(f"cannot convert sb3-extra-buffers' {type(src).__name__}; supported: {', '.join(known)}")
    elif type(src) not in (ReplayBuffer, DictReplayBuffer):
        raise TypeError(f"expected an sb3-extra-buffers or SB3 ReplayBuffer / DictReplayBuffer, "
                        f"got {type(src).__module__}.{type(src).__name__}")


def _source_options(src: Any) -> dict[str, Any]:
    """sb3-extra-buffers' sampling options (they change what samples look like)."""
    if not is_sb3eb(src):
        return {}
    return {"normalize_images": bool(getattr(src, "normalize_images", False)),
            "output_dtype": "raw" if getattr(src, "output_dtype", None) is None else "float"}


def convert_into(source: Any, buffer_class: type, *, device: Any = None, **kwargs: Any) -> Any:
    """A ``buffer_class`` holding the transitions of ``source`` (a buffer, or the path of its pickle).

    See :func:`sb3_integration.interop.convert.from_sb3_extra_buffers`, which documents the arguments.
    """
    src = unpickle(source) if isinstance(source, (str, os.PathLike)) else source
    check_source(src)
    if isinstance(src.observation_space, spaces.Dict) != issubclass(buffer_class, DictReplayBuffer):
        raise TypeError(f"{buffer_class.__name__} does not fit a {type(src).__name__} "
                        f"({'a Dict' if isinstance(src.observation_space, spaces.Dict) else 'a non-Dict'} space)")
    options = {**_source_options(src), **kwargs}
    dst = buffer_class(src.buffer_size * src.n_envs, src.observation_space, src.action_space,
                       device=src.device if device is None else device, n_envs=src.n_envs,
                       optimize_memory_usage=src.optimize_memory_usage,
                       handle_timeout_termination=src.handle_timeout_termination, **options)
    _copy_transitions(src, dst)
    return dst


def _copy_transitions(src: Any, dst: Any) -> None:
    """``add()`` every stored transition of ``src`` to ``dst`` (empty), oldest first, at the same rows."""
    n, read = src.buffer_size, _reader(src)
    rows = [*range(src.pos, n), *range(src.pos)] if src.full else list(range(src.pos))
    dst.pos = rows[0] if rows else 0  # the rows land where they are in src; the ring wraps as src's did
    for i in rows:
        obs = read(src.observations, i)
        # SB3 keeps next_obs[i] in observations[i + 1] when it optimizes memory
        nxt = read(src.observations, (i + 1) % n) if src.optimize_memory_usage else read(src.next_observations, i)
        infos = [{"TimeLimit.truncated": bool(t)} for t in src.timeouts[i]]
        dst.add(obs, nxt, src.actions[i], src.rewards[i], src.dones[i], infos)
    if (dst.pos, dst.full) != (src.pos, src.full):  # pragma: no cover - guards the row arithmetic
        raise AssertionError(f"converted buffer at pos={dst.pos} full={dst.full}, source {src.pos} {src.full}")
