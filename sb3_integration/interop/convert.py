"""Bring an existing replay buffer over: sb3-extra-buffers pickles, SB3 pickles, HDF5 files.

:func:`from_sb3_extra_buffers` turns a replay buffer of sb3-extra-buffers
(``CompressedReplayBuffer``, ``CompressedDictReplayBuffer``) or of SB3
(``ReplayBuffer``, ``DictReplayBuffer``) -- the object, or the pickle that
``model.save_replay_buffer`` wrote -- into a compressed buffer of this package
holding the same transitions at the same positions, so that it samples the same
transitions for the same seed.

:func:`load_replay_buffer` is ``model.load_replay_buffer`` for a model built
with one of this package's buffers: SB3's own method unpickles whatever the
file holds, so an sb3-extra-buffers pickle would silently stay an
sb3-extra-buffers buffer; this one converts it (and reads HDF5 files too).

Reading an sb3-extra-buffers pickle needs sb3-extra-buffers installed
(``pip install 'chunkstore[sb3eb]'``): the pickle refers to its classes.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.save_util import load_from_pkl

__all__ = ["from_sb3_extra_buffers", "load_replay_buffer"]

_EXTRA = "pip install 'chunkstore[sb3eb]'"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _is_sb3eb(obj: Any) -> bool:
    return type(obj).__module__.startswith("sb3_extra_buffers.")


def _unpickle(path: str | os.PathLike[str]) -> Any:
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
    if not _is_sb3eb(src):
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


def _check_source(src: Any) -> None:
    if _is_sb3eb(src):
        known = ("CompressedReplayBuffer", "CompressedDictReplayBuffer")
        if type(src).__name__ not in known:
            raise TypeError(f"cannot convert sb3-extra-buffers' {type(src).__name__}; supported: {', '.join(known)}")
    elif type(src) not in (ReplayBuffer, DictReplayBuffer):
        raise TypeError(f"expected an sb3-extra-buffers or SB3 ReplayBuffer / DictReplayBuffer, "
                        f"got {type(src).__module__}.{type(src).__name__}")


def _default_class(src: Any) -> type:
    from sb3_integration.replay import CompressedDictReplayBuffer, CompressedReplayBuffer

    return CompressedDictReplayBuffer if isinstance(src.observation_space, spaces.Dict) else CompressedReplayBuffer


def _source_options(src: Any) -> dict[str, Any]:
    """sb3-extra-buffers' sampling options (they change what samples look like)."""
    if not _is_sb3eb(src):
        return {}
    return {"normalize_images": bool(getattr(src, "normalize_images", False)),
            "output_dtype": "raw" if getattr(src, "output_dtype", None) is None else "float"}


# -- the conversion -------------------------------------------------------------------
def from_sb3_extra_buffers(source: Any, *, buffer_class: type | None = None, device: Any = None,
                           **kwargs: Any) -> Any:
    """A compressed replay buffer holding ``source``'s transitions at the same positions.

    Parameters
    ----------
    source
        An sb3-extra-buffers ``CompressedReplayBuffer`` / ``CompressedDictReplayBuffer``
        or SB3 ``ReplayBuffer`` / ``DictReplayBuffer``, or the path of its pickle
        (``model.save_replay_buffer``).
    buffer_class
        The class to build (default: this package's ``CompressedReplayBuffer`` or
        ``CompressedDictReplayBuffer``, matching the observation space).
    device
        Where sampled tensors go (default: the source's device).
    **kwargs
        Store options for the new buffer (``compression_method``, ``chunk_len``,
        ``tier``, ...). sb3-extra-buffers' ``normalize_images`` and ``output_dtype``
        default to the source's, so samples look the same.

    Returns
    -------
    The new buffer: same ``buffer_size``, ``n_envs``, spaces, ``pos`` and ``full``;
    observations, actions, rewards, dones and timeouts equal to the source's
    (observations in the space's dtype, losslessly cast from sb3-extra-buffers'
    ``elem_type``).

    Raises
    ------
    ImportError
        The pickle needs sb3-extra-buffers (or one of its codec backends) and it
        is not installed.
    TypeError
        ``source`` is not a supported buffer, or ``buffer_class`` does not fit its space.

    Examples
    --------
    >>> buf = from_sb3_extra_buffers("sb3eb_buffer.pkl", compression_method="zstd3")  # doctest: +SKIP
    >>> model.replay_buffer = buf                                                      # doctest: +SKIP
    """
    src = _unpickle(source) if isinstance(source, (str, os.PathLike)) else source
    _check_source(src)
    cls = buffer_class or _default_class(src)
    if isinstance(src.observation_space, spaces.Dict) != issubclass(cls, DictReplayBuffer):
        raise TypeError(f"{cls.__name__} does not fit a {type(src).__name__} "
                        f"({'a Dict' if isinstance(src.observation_space, spaces.Dict) else 'a non-Dict'} space)")
    options = {**_source_options(src), **kwargs}
    dst = cls(src.buffer_size * src.n_envs, src.observation_space, src.action_space,
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
        if src.optimize_memory_usage:  # SB3 keeps next_obs[i] in observations[i + 1]
            nxt = read(src.observations, (i + 1) % n)
        else:
            nxt = read(src.next_observations, i)
        infos = [{"TimeLimit.truncated": bool(t)} for t in src.timeouts[i]]
        dst.add(obs, nxt, src.actions[i], src.rewards[i], src.dones[i], infos)
    if (dst.pos, dst.full) != (src.pos, src.full):  # pragma: no cover - guards the row arithmetic
        raise AssertionError(f"converted buffer at pos={dst.pos} full={dst.full}, source {src.pos} {src.full}")


# -- loading into a model -------------------------------------------------------------
def _is_hdf5(path: str | os.PathLike[str]) -> bool:
    p = pathlib.Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(8) == _HDF5_MAGIC


def load_replay_buffer(model: Any, path: str | os.PathLike[str], truncate_last_traj: bool = True,
                       **kwargs: Any) -> None:
    """``model.load_replay_buffer(path)`` that converts into the model's compressed buffer class.

    * An HDF5 file written by ``buffer.save`` is loaded with
      ``model.replay_buffer_class.load(path, device=model.device)``.
    * An sb3-extra-buffers pickle is converted (:func:`from_sb3_extra_buffers`)
      into ``model.replay_buffer_class`` when it is one of this package's replay
      buffers (else into the matching ``Compressed*ReplayBuffer``), built with
      ``model.replay_buffer_kwargs`` updated by ``kwargs``.
    * Any other pickle is loaded as SB3 loads it.

    Then, as SB3 does: a HER buffer gets the model's env (and its last
    trajectory truncated if ``truncate_last_traj``), and the buffer's device
    becomes the model's.

    Examples
    --------
    >>> model = DQN("CnnPolicy", env, replay_buffer_class=CompressedReplayBuffer)  # doctest: +SKIP
    >>> load_replay_buffer(model, "sb3eb_replay_buffer.pkl")                         # doctest: +SKIP
    >>> type(model.replay_buffer).__name__                                           # doctest: +SKIP
    'CompressedReplayBuffer'
    """
    from sb3_integration.her import CompressedHerReplayBuffer
    from sb3_integration.replay import (
        CompressedDictReplayBuffer,
        CompressedNStepReplayBuffer,
        CompressedReplayBuffer,
    )

    cls = model.replay_buffer_class
    ours = isinstance(cls, type) and issubclass(cls, (CompressedReplayBuffer, CompressedDictReplayBuffer,
                                                       CompressedNStepReplayBuffer, CompressedHerReplayBuffer))
    if _is_hdf5(path):
        if not ours:
            raise TypeError(f"{os.fspath(path)} is an HDF5 buffer file; build the model with one of "
                            f"sb3_integration's replay buffer classes (it has {cls!r})")
        buf = cls.load(path, device=model.device)
    else:
        buf = _unpickle(path)
        if _is_sb3eb(buf):
            options = {**(model.replay_buffer_kwargs or {}), **kwargs}
            options.pop("env", None)
            buf = from_sb3_extra_buffers(buf, buffer_class=cls if ours else None, device=model.device,
                                         **options)
    _install(model, buf, truncate_last_traj)


def _install(model: Any, buf: Any, truncate_last_traj: bool) -> None:
    """What SB3's ``load_replay_buffer`` does after unpickling."""
    from stable_baselines3 import HerReplayBuffer

    if not isinstance(buf, ReplayBuffer):
        raise TypeError(f"the replay buffer must inherit from SB3's ReplayBuffer, got {type(buf).__name__}")
    model.replay_buffer = buf
    if isinstance(buf, HerReplayBuffer):
        if model.env is None:
            raise ValueError("pass an environment to the model before loading a HER replay buffer")
        if buf.env is None:
            buf.set_env(model.env)
        if truncate_last_traj:
            buf.truncate_last_trajectory()
    buf.device = model.device
