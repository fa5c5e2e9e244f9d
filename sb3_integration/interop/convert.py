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
(``pip install 'chunkstore-rl[sb3eb]'``): the pickle refers to its classes.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_integration.buffers.her import CompressedHerReplayBuffer
from sb3_integration.buffers.replay import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)
from sb3_integration.buffers.sources import check_source, convert_into, is_sb3eb, unpickle

__all__ = ["from_sb3_extra_buffers", "load_replay_buffer"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


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
    >>> # needs: sb3eb
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from stable_baselines3.common.save_util import save_to_pkl
    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()):  # it lists its codecs on import
    ...     from sb3_extra_buffers.compressed import CompressedReplayBuffer as ExtraReplayBuffer
    >>> frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    >>> old = ExtraReplayBuffer(100, frames, spaces.Discrete(6), "cpu", compression_method="zstd3")
    >>> obs = np.zeros((1, 4, 84, 84), np.uint8)
    >>> for t in range(10):
    ...     old.add(obs, obs + t, np.array([t % 6]), np.array([1.0]), np.array([False]), [{}])
    >>> save_to_pkl("sb3eb_buffer.pkl", old)
    >>> buf = from_sb3_extra_buffers("sb3eb_buffer.pkl", compression_method="zstd3")
    >>> type(buf).__name__, buf.pos, int(buf.next_observations[9].max())  # model.replay_buffer = buf
    ('CompressedReplayBuffer', 10, 9)
    """
    if buffer_class is None:
        src = unpickle(source) if isinstance(source, (str, os.PathLike)) else source
        check_source(src)
        dict_space = isinstance(src.observation_space, spaces.Dict)
        buffer_class, source = (CompressedDictReplayBuffer if dict_space else CompressedReplayBuffer), src
    return convert_into(source, buffer_class, device=device, **kwargs)


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
    >>> # needs: sb3eb
    >>> from stable_baselines3 import DQN
    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()):  # it lists its codecs on import
    ...     from sb3_extra_buffers.compressed import CompressedReplayBuffer as ExtraReplayBuffer
    >>> old = DQN("MlpPolicy", "CartPole-v1", learning_starts=50, replay_buffer_class=ExtraReplayBuffer)
    >>> _ = old.learn(60)
    >>> old.save_replay_buffer("sb3eb_replay_buffer.pkl")
    >>> model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=CompressedReplayBuffer)
    >>> load_replay_buffer(model, "sb3eb_replay_buffer.pkl")
    >>> type(model.replay_buffer).__name__, model.replay_buffer.size()
    ('CompressedReplayBuffer', 60)
    """
    cls = model.replay_buffer_class
    ours = isinstance(cls, type) and issubclass(cls, (CompressedReplayBuffer, CompressedDictReplayBuffer,
                                                       CompressedNStepReplayBuffer, CompressedHerReplayBuffer))
    if _is_hdf5(path):
        if not ours:
            raise TypeError(f"{os.fspath(path)} is an HDF5 buffer file; build the model with one of "
                            f"sb3_integration's replay buffer classes (it has {cls!r})")
        buf = cls.load(path, device=model.device)
    else:
        buf = unpickle(path)
        if is_sb3eb(buf):
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
