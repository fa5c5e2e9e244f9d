"""``CompressedHerReplayBuffer``: SB3's ``HerReplayBuffer`` with compressed observations.

SB3's HER code runs unchanged -- ``add`` (episode bookkeeping), ``sample``
(valid-transition choice, goal relabelling, ``compute_reward``),
``truncate_last_trajectory`` -- on top of :class:`~sb3_integration.buffers.replay.CompressedDictReplayBuffer`
storage: every key of the goal-conditioned Dict space (``observation``,
``achieved_goal``, ``desired_goal``; images or vectors) lives in its own frame
store, each distinct frame once, in compressed chunks. For the same seed it
samples bit-identically to SB3's ``HerReplayBuffer``, and training with it ends
with the same parameters.

The method resolution order puts SB3's ``HerReplayBuffer`` first and the
compressed Dict storage below it, so HER's ``super().add()`` stores compressed;
a small intermediate class forwards the store options, which HER's constructor
does not pass on.

With ``buffer_device``, the ``observation`` key (and any other key but the goals) lives
and is decoded on that device; ``achieved_goal`` and ``desired_goal`` stay in host
memory, because SB3's HER code computes with them on the host (it samples new goals
from stored achieved goals and passes them to the env's ``compute_reward``).

``save(path)`` / ``load(path, device=..., env=...)`` write and read one HDF5
file (:mod:`sb3_integration.persistence.files`): besides the replay buffer, HER's
``ep_start``, ``ep_length``, ``_current_ep_start`` and, with
``copy_info_dict=True``, its ``infos`` (as JSON that keeps numpy scalars and
arrays exact; other value types are refused at save).
"""

from __future__ import annotations

import base64
import json
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import HerReplayBuffer
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from stable_baselines3.her.goal_selection_strategy import GoalSelectionStrategy

from chunkstore import FormatError, Tier
from sb3_integration.buffers.extra_buffers import convert_samples
from sb3_integration.buffers.replay import CompressedDictReplayBuffer, _CompressedReplayMixin
from sb3_integration.buffers.sb3_checks import check_her_add

__all__ = ["CompressedHerReplayBuffer", "decode_infos", "encode_infos"]


class _HerStorage(CompressedDictReplayBuffer):
    """The compressed Dict storage under HER: takes HER's ``super().__init__`` call, adds the options."""

    _store_options: dict[str, Any]
    _prefetch_supported = False  # HER's sample() is SB3's (goals relabelled with numpy's global generator)

    def __init__(self, buffer_size: int, observation_space: spaces.Dict, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True) -> None:
        options = self.__dict__.pop("_store_options")
        super().__init__(buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
                         handle_timeout_termination, **options)


class CompressedHerReplayBuffer(HerReplayBuffer, _HerStorage):
    """SB3's ``HerReplayBuffer`` (Hindsight Experience Replay) with compressed observations.

    Parameters
    ----------
    buffer_size, observation_space, action_space, env, device, n_envs
        As in SB3's ``HerReplayBuffer``. ``env`` may be None here (set it later
        with ``set_env``, as after unpickling); SB3's off-policy algorithms pass it.
    optimize_memory_usage, handle_timeout_termination, n_sampled_goal, goal_selection_strategy, copy_info_dict
        As in SB3's ``HerReplayBuffer``.
    **options
        Keywords: sb3-extra-buffers' arguments (``dtypes``, ``normalize_images``,
        ``compression_method``, ``compression_kwargs``, ``decompression_kwargs``,
        ``output_dtype``) and the store options, as in
        :class:`~sb3_integration.CompressedReplayBuffer` (``chunk_len``, ``preset``,
        ``cache_bytes``, ``tier``, ``frame_dedup``, ``threads``, ``small_arrays``).

    Examples
    --------
    >>> from stable_baselines3 import SAC
    >>> from stable_baselines3.common.envs import BitFlippingEnv
    >>> env = BitFlippingEnv(n_bits=8, continuous=True, image_obs_space=True)
    >>> model = SAC("MultiInputPolicy", env, buffer_size=10_000, learning_starts=64,
    ...             replay_buffer_class=CompressedHerReplayBuffer,
    ...             replay_buffer_kwargs={"n_sampled_goal": 4, "goal_selection_strategy": "future"})
    >>> type(model.replay_buffer).__name__
    'CompressedHerReplayBuffer'
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Dict, action_space: spaces.Space,
                 env: VecEnv | None = None, device: th.device | str = "auto", n_envs: int = 1,
                 optimize_memory_usage: bool = False, handle_timeout_termination: bool = True,
                 n_sampled_goal: int = 4, goal_selection_strategy: GoalSelectionStrategy | str = "future",
                 copy_info_dict: bool = False, **options: Any) -> None:
        self._store_options = options  # sb3-extra-buffers' arguments and store options, for _HerStorage
        super().__init__(buffer_size, observation_space, action_space, env, device, n_envs,  # type: ignore[arg-type]
                         optimize_memory_usage, handle_timeout_termination, n_sampled_goal,
                         goal_selection_strategy, copy_info_dict)

    def add(self, obs: dict[str, np.ndarray], next_obs: dict[str, np.ndarray], action: np.ndarray,  # type: ignore[override]
            reward: np.ndarray, done: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """SB3's HER ``add``, all or nothing.

        Every argument is checked first, SB3's errors first (a failed add changes
        nothing). SB3's bookkeeping runs before and after the transition is stored;
        if an exception (Ctrl-C) interrupts it, what ran before is undone when the
        transition was not stored, and what comes after is completed when it was.
        """
        check_her_add(self, obs, next_obs, action, reward, done, infos)
        with self._lock:
            pos, full = self.pos, self.full
            saved = self._bookkeeping(pos)
            try:
                super().add(obs, next_obs, action, reward, done, infos)
            except BaseException:
                if (self.pos, self.full) == (pos, full):
                    self._restore_bookkeeping(pos, saved)
                else:  # stored: finish the episode lengths (repeating one is harmless)
                    for env_idx in range(self.n_envs):
                        if done[env_idx]:
                            self._compute_episode_length(env_idx)
                raise

    def _bookkeeping(self, pos: int) -> dict[str, Any]:
        """What SB3's ``add`` changes before it stores row ``pos``, copied."""
        old_episodes = []
        for env_idx in range(self.n_envs):
            length = int(self.ep_length[pos, env_idx])
            if length > 0:
                rows = np.arange(pos, int(self.ep_start[pos, env_idx]) + length) % self.buffer_size
                old_episodes.append((env_idx, rows, self.ep_length[rows, env_idx].copy()))
        return {"episodes": old_episodes, "ep_start": self.ep_start[pos].copy(),
                "current": self._current_ep_start.copy(),
                "infos": self.infos[pos].copy() if self.copy_info_dict else None}

    def _restore_bookkeeping(self, pos: int, saved: dict[str, Any]) -> None:
        for env_idx, rows, lengths in saved["episodes"]:
            self.ep_length[rows, env_idx] = lengths
        self.ep_start[pos] = saved["ep_start"]
        self._current_ep_start[:] = saved["current"]
        if saved["infos"] is not None:
            self.infos[pos] = saved["infos"]

    def _device_keys(self) -> set[Any]:
        # SB3's HER relabels goals and computes rewards with them on the host: they stay there
        return set(self.observation_space.spaces) - {"achieved_goal", "desired_goal"}

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> Any:
        """SB3's HER sample (real and relabelled halves), observations converted as sb3-extra-buffers'
        (under the writer's lock: a concurrent ``add()`` cannot tear it)."""
        with self._lock:
            samples = super().sample(batch_size, env)
        return convert_samples(samples, output_dtype=self.output_dtype, normalize_images=self.normalize_images)

    # -- sampling: SB3's code; each half of the batch reads its obs and next obs in one pass --
    @contextmanager
    def _planned(self, batch_indices: np.ndarray) -> Iterator[None]:
        self._plan = self._sample_plan(np.asarray(batch_indices))
        self._memo, self._owned = {}, {}
        try:
            yield
        finally:
            self._plan, self._memo, self._owned = None, {}, {}

    def _get_real_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                          env: VecNormalize | None = None) -> Any:
        with self._planned(batch_indices):
            return super()._get_real_samples(batch_indices, env_indices, env)

    def _get_virtual_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                             env: VecNormalize | None = None) -> Any:
        with self._planned(batch_indices):
            return super()._get_virtual_samples(batch_indices, env_indices, env)

    # -- pickling: the compressed buffer's, without the env (as SB3's HER) --------------------
    def __getstate__(self) -> dict[str, Any]:
        state = _CompressedReplayMixin.__getstate__(self)
        state.pop("env", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        _CompressedReplayMixin.__setstate__(self, state)
        self.env = None

    # -- HDF5 files ---------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], device: Any = "auto", *, env: VecEnv | None = None,
             lazy: bool = True, tier: Tier | None = None, verify: bool | str | None = None,
             buffer_device: Any = None, heap_bytes: int | None = None) -> CompressedHerReplayBuffer:
        """The buffer saved in ``path`` (see :meth:`sb3_integration.persistence.files.ReplayFiles.load`),
        with ``env`` set if given."""
        buf = super().load(path, device, lazy=lazy, tier=tier, verify=verify, buffer_device=buffer_device,
                           heap_bytes=heap_bytes)
        if env is not None:
            buf.set_env(env)
        return buf

    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        kwargs, arrays = super()._extra_file_state()
        kwargs.update(n_sampled_goal=self.n_sampled_goal, copy_info_dict=self.copy_info_dict,
                      goal_selection_strategy=self.goal_selection_strategy.name.lower())
        arrays.update(ep_start=self.ep_start, ep_length=self.ep_length, current_ep_start=self._current_ep_start)
        if self.copy_info_dict:
            arrays["infos_json"] = np.frombuffer(encode_infos(self.infos), np.uint8)
        return kwargs, arrays

    def _restore_extra_file_state(self, arrays: Mapping[str, np.ndarray]) -> None:
        for name, attr in (("ep_start", "ep_start"), ("ep_length", "ep_length"),
                           ("current_ep_start", "_current_ep_start")):
            like, got = getattr(self, attr), arrays[name]
            if got.shape != like.shape or got.dtype != like.dtype:
                raise FormatError(f"HER array {name!r} has shape {got.shape} and dtype {got.dtype}; "
                                  f"this buffer needs {like.shape} and {like.dtype}")
            setattr(self, attr, np.array(got))
        if self.copy_info_dict:
            self.infos = decode_infos(arrays["infos_json"].tobytes(), self.infos.shape)


# == infos as JSON: exact for numpy scalars and arrays =======================================
def _encode(value: Any, where: str) -> Any:
    if value is None or (isinstance(value, (bool, int, float, str)) and not isinstance(value, np.generic)):
        return value
    if type(value) in (dict, OrderedDict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where}: only str keys can be saved, got {sorted(map(repr, value))}")
        tag = "odict" if isinstance(value, OrderedDict) else "dict"  # DummyVecEnv's terminal_observation
        return {tag: {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biufc":
        arr = np.asarray(value)
        return {"ndarray" if isinstance(value, np.ndarray) else "scalar":
                [arr.dtype.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode()]}
    raise TypeError(f"{where}: cannot save a {type(value).__name__} in HER infos "
                    "(supported: None, bool, int, float, str, dict, OrderedDict, list, tuple, numeric numpy values)")


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    (tag, body), = value.items()
    if tag in ("dict", "odict"):
        items = {k: _decode(v) for k, v in body.items()}
        return items if tag == "dict" else OrderedDict(items)
    if tag in ("list", "tuple"):
        seq = [_decode(v) for v in body]
        return seq if tag == "list" else tuple(seq)
    dtype, shape, data = body
    arr = np.frombuffer(base64.b64decode(data), np.dtype(dtype)).reshape(shape).copy()
    return arr if tag == "ndarray" else arr[()]


def encode_infos(infos: np.ndarray) -> bytes:
    """HER's ``infos`` (an object array of dicts) as JSON bytes; see :func:`decode_infos`.

    Examples
    --------
    >>> infos = np.empty((2, 1), object); infos[0, 0] = {"is_success": np.float32(1)}; infos[1, 0] = {}
    >>> decode_infos(encode_infos(infos), (2, 1))[0, 0]
    {'is_success': np.float32(1.0)}
    """
    cells = [_encode(info, f"infos[{i}]") for i, info in enumerate(infos.reshape(-1))]
    return json.dumps(cells, allow_nan=True, separators=(",", ":")).encode()


def decode_infos(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The object array that :func:`encode_infos` encoded."""
    cells = json.loads(data.decode())
    out = np.empty(len(cells), object)
    for i, cell in enumerate(cells):
        out[i] = _decode(cell)
    return out.reshape(shape)
