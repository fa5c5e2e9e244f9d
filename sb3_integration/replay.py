"""Drop-in compressed replay buffers for Stable-Baselines3.

:class:`CompressedReplayBuffer`, :class:`CompressedDictReplayBuffer` and
:class:`CompressedNStepReplayBuffer` subclass SB3's ``ReplayBuffer``,
``DictReplayBuffer`` and ``NStepReplayBuffer`` with the same constructor
arguments, plus keyword-only store options. Only the observation storage
changes: observations live in :class:`~sb3_integration.frames.FrameStore`
objects (each distinct frame once, in compressed chunks), while actions,
rewards, dones and timeouts stay SB3's own small numpy arrays.

Sampling is SB3's own code: ``sample()`` and ``_get_samples()`` are inherited,
so the random-number use and every computation (n-step returns, timeout
masking, VecNormalize) are SB3's. ``observations`` / ``next_observations`` are
:class:`~sb3_integration._common.ObservationView` objects that SB3's code
indexes as it indexes its arrays; during ``_get_samples`` the first read of a
key fetches every stack the batch needs (obs and next obs) in one pass over
the chunks, and the later reads are served from that pass.

``optimize_memory_usage`` is accepted with SB3's checks and sampled exactly as
SB3 samples it (``observations[pos]`` reads as the latest next observation),
but saves nothing here: frame dedup already stores ``next_obs[t] == obs[t+1]``
once, and keeps the terminal observations that ``optimize_memory_usage`` loses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import (
    BaseBuffer,
    DictReplayBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
)
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore import LRUChunkCache, Tier, get_codec
from sb3_integration._common import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_LEN,
    DEFAULT_COMPRESSION,
    ObservationView,
    coerce_obs,
    pack_array,
    unpack_array,
)
from sb3_integration.frames import FrameStore
from sb3_integration.persistence import ReplayBufferFileMixin

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "CompressedDictReplayBuffer",
    "CompressedNStepReplayBuffer",
    "CompressedReplayBuffer",
]

OBS, NEXT = 0, 1
_SMALL_ARRAYS = ("actions", "rewards", "dones", "timeouts")


def stack_axis_order(space: spaces.Space) -> tuple[int, ...]:
    """Axes to try for frame stacking, best first: where SB3's ``VecFrameStack`` stacks."""
    shape = space.shape or ()
    if is_image_space(space) and len(shape) == 3 and int(np.argmin(shape)) == 0:
        return (0, -1)  # channel-first image
    return (-1, 0)  # channel-last image, or not an image: VecFrameStack stacks on the last axis


class _CompressedReplayMixin(ReplayBufferFileMixin):
    """Observation storage shared by the three replay buffers (put before the SB3 class).

    ``save(path)`` / ``load(path, device=...)``: see :mod:`sb3_integration.persistence`.
    """

    buffer_size: int
    n_envs: int
    pos: int
    full: bool
    optimize_memory_usage: bool
    handle_timeout_termination: bool
    observation_space: spaces.Space
    action_space: spaces.Space
    action_dim: int
    device: th.device
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    timeouts: np.ndarray

    # -- construction ----------------------------------------------------------------
    def _init_base(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                   device: th.device | str, n_envs: int) -> None:
        # SB3's __init__ would allocate full observation arrays first; only BaseBuffer's runs
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)  # type: ignore[arg-type]
        self.buffer_size = max(buffer_size // n_envs, 1)

    def _init_storage(self, *, handle_timeout_termination: bool, compression_method: str | Any,
                      chunk_len: int, cache_bytes: int, tier: Tier | Callable[[], Tier] | None,
                      frame_dedup: bool) -> None:
        shape = (self.buffer_size, self.n_envs)
        self.actions = np.zeros((*shape, self.action_dim), dtype=ReplayBuffer._maybe_cast_dtype(self.action_space.dtype))
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.dones = np.zeros(shape, dtype=np.float32)
        self.handle_timeout_termination = handle_timeout_termination
        self.timeouts = np.zeros(shape, dtype=np.float32)

        self.compression_method = get_codec(compression_method).name  # fails early on a bad name
        self.chunk_len = int(chunk_len)
        self.frame_dedup = bool(frame_dedup)
        self._cache_bytes = int(cache_bytes)
        cache = LRUChunkCache(self._cache_bytes, name="replay") if self._cache_bytes else 0
        subspaces = self._subspaces()
        self._stores = {
            key: FrameStore(
                self._key_shape(key), sub.dtype, self.buffer_size, self.n_envs,
                stacks_per_row=2, chunk_len=self.chunk_len, codec=compression_method, tier=tier,
                cache=cache, dedup=self.frame_dedup, axis_order=stack_axis_order(sub),
                name="observations" if key is None else f"observations[{key}]",
            )
            for key, sub in subspaces.items()
        }
        self._plan: list[tuple[int, np.ndarray]] | None = None
        self._memo: dict[Any, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._owned: dict[int, np.ndarray] = {}  # batch arrays made in this call (kept alive: ids stay unique)
        self._make_views()

    def _subspaces(self) -> dict[Any, spaces.Space]:
        if isinstance(self.observation_space, spaces.Dict):
            return dict(self.observation_space.spaces)
        return {None: self.observation_space}

    def _key_shape(self, key: Any) -> tuple[int, ...]:
        shape = self.obs_shape if key is None else self.obs_shape[key]  # type: ignore[attr-defined]
        return tuple(shape)

    def _make_views(self) -> None:
        views = {
            which: {
                key: ObservationView(
                    partial(self._read, key, which),
                    (self.buffer_size, self.n_envs, *self._key_shape(key)),
                    store.dtype,
                    name=("observations" if which == OBS else "next_observations") + ("" if key is None else f"[{key}]"),
                )
                for key, store in self._stores.items()
            }
            for which in (OBS, NEXT)
        }
        if None in self._stores:
            self.observations, self.next_observations = views[OBS][None], views[NEXT][None]
        else:
            self.observations, self.next_observations = views[OBS], views[NEXT]

    # -- writing ---------------------------------------------------------------------------
    def _coerce(self, obs: Any, name: str) -> dict[Any, np.ndarray]:
        out = {}
        for key, sub in self._subspaces().items():
            if key is not None and not isinstance(obs, dict):
                raise ValueError(f"{name}: expected a dict with keys {list(self._stores)}, got {type(obs).__name__}")
            if key is not None and key not in obs:
                raise ValueError(f"{name}: missing key {key!r}")
            x = obs if key is None else obs[key]
            label = name if key is None else f"{name}[{key!r}]"
            shape = (self.n_envs, *self._key_shape(key))
            out[key] = coerce_obs(x, shape, self._stores[key].dtype, label, reshape=isinstance(sub, spaces.Discrete))
        return out

    def _small_values(self, action: Any, reward: Any, done: Any, infos: list[dict[str, Any]]) -> list[Any]:
        action = np.asarray(action)
        if action.size != self.n_envs * self.action_dim:
            raise ValueError(f"action: expected {self.n_envs * self.action_dim} values "
                             f"(n_envs={self.n_envs}, action_dim={self.action_dim}), got shape {action.shape}")
        values = [action.reshape((self.n_envs, self.action_dim)), np.array(reward), np.array(done)]
        if self.handle_timeout_termination:
            values.append(np.array([info.get("TimeLimit.truncated", False) for info in infos]))
        for name, v in zip(("reward", "done", "infos"), values[1:], strict=False):
            if v.ndim > 1 or v.size not in (1, self.n_envs):  # what broadcasting to (n_envs,) accepts
                raise ValueError(f"{name}: expected shape ({self.n_envs},), got shape {v.shape}")
        return values

    def add(self, obs: Any, next_obs: Any, action: np.ndarray, reward: np.ndarray, done: np.ndarray,
            infos: list[dict[str, Any]]) -> None:
        """SB3's ``add``; raises ValueError (and changes nothing) on a wrong shape or a lossy dtype."""
        obs_in, next_in = self._coerce(obs, "obs"), self._coerce(next_obs, "next_obs")
        small = self._small_values(action, reward, done, infos)
        if self.full:
            for store in self._stores.values():
                store.release_before((self.pos + 1) % self.buffer_size)
        for key, store in self._stores.items():
            store.put(OBS, self.pos, obs_in[key])
            store.put(NEXT, self.pos, next_in[key])
        for name, value in zip(_SMALL_ARRAYS, small, strict=False):
            getattr(self, name)[self.pos] = value
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        for store in self._stores.values():
            store.clear()

    # -- reading ---------------------------------------------------------------------------
    def _sample_plan(self, batch_inds: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """The (which, rows) reads SB3's ``_get_samples`` will make for ``batch_inds``."""
        if self.optimize_memory_usage:
            return [(OBS, batch_inds), (OBS, (batch_inds + 1) % self.buffer_size)]
        return [(OBS, batch_inds), (NEXT, batch_inds)]

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> Any:
        self._plan = self._sample_plan(np.asarray(batch_inds))
        self._memo, self._owned = {}, {}
        try:
            return super()._get_samples(batch_inds, env=env)  # type: ignore[misc]
        finally:
            self._plan, self._memo, self._owned = None, {}, {}

    def _remap(self, which: int, rows: np.ndarray) -> tuple[Any, np.ndarray]:
        """SB3 with ``optimize_memory_usage`` holds the latest next obs in ``observations[pos]``."""
        if not self.optimize_memory_usage or which != OBS or (self.pos == 0 and not self.full):
            return which, rows
        hit = rows == self.pos
        if not hit.any():
            return which, rows
        return hit.astype(np.intp), np.where(hit, (self.pos - 1) % self.buffer_size, rows)

    def _read(self, key: Any, which: int, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        store = self._stores[key]
        if self._plan is None:
            return store.gather([self._remap(which, rows)], envs)[0]
        memo = self._memo.get(key)
        if memo is None:  # first read of this key in this batch: fetch the whole plan with it
            reqs = [(which, rows)] + [(w, r) for w, r in self._plan
                                      if not (w == which and np.array_equal(r, rows))]
            outs = store.gather([self._remap(w, r) for w, r in reqs], envs)
            self._memo[key] = [(w, r, envs, o) for (w, r), o in zip(reqs[1:], outs[1:], strict=True)]
            self._owned.update((id(o), o) for o in outs)
            return outs[0]
        for i, (w, r, e, o) in enumerate(memo):
            if w == which and r.shape == rows.shape and np.array_equal(r, rows) and np.array_equal(e, envs):
                del memo[i]
                return o
        out = store.gather([self._remap(which, rows)], envs)[0]
        self._owned[id(out)] = out
        return out

    def to_torch(self, array: np.ndarray, copy: bool = True) -> th.Tensor:
        # a batch array this buffer just made for this call is handed over without a second copy
        if self._owned.pop(id(array), None) is array:
            return th.as_tensor(array, device=self.device)
        return super().to_torch(array, copy=copy)  # type: ignore[misc]

    # -- sizes -----------------------------------------------------------------------------
    @property
    def nbytes_stored(self) -> int:
        """Bytes holding the observations: compressed frames, open chunks, chunk tables, descriptors."""
        return sum(s.nbytes_stored for s in self._stores.values())

    @property
    def nbytes_raw(self) -> int:
        """Bytes SB3's buffer with the same arguments holds for observations (and next observations)."""
        per_row = sum(math.prod(s.obs_shape) * s.dtype.itemsize for s in self._stores.values())
        return per_row * self.buffer_size * self.n_envs * (1 if self.optimize_memory_usage else 2)

    def storage_info(self) -> dict[str, Any]:
        """Per observation key (``"observations"`` for a non-Dict space): layout, bytes, codec."""
        info = {("observations" if k is None else k): s.info() for k, s in self._stores.items()}
        info["_totals"] = {
            "nbytes_stored": self.nbytes_stored,
            "nbytes_raw": self.nbytes_raw,
            "other_arrays_nbytes": sum(getattr(self, n).nbytes for n in _SMALL_ARRAYS),
            "transitions": self.size() * self.n_envs,  # type: ignore[attr-defined]
        }
        return info

    # -- pickling: compressed chunks; caches, views and thread pools are rebuilt ---------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("observations", "next_observations", "_plan", "_memo", "_owned"):
            state.pop(name, None)
        for name in _SMALL_ARRAYS:
            state[name] = pack_array(state[name])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _SMALL_ARRAYS:
            state[name] = unpack_array(state[name])
        self.__dict__.update(state)
        cache = LRUChunkCache(self._cache_bytes, name="replay") if self._cache_bytes else 0
        for store in self._stores.values():
            store.share_cache(cache)
        self._plan, self._memo, self._owned = None, {}, {}
        self._make_views()


class CompressedReplayBuffer(_CompressedReplayMixin, ReplayBuffer):
    """SB3's ``ReplayBuffer`` with observations in compressed chunks, each distinct frame once.

    Parameters
    ----------
    buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage, handle_timeout_termination
        As in SB3's ``ReplayBuffer`` (same checks).
    compression_method
        Codec name in sb3-extra-buffers' grammar (``"zstd3"``, ``"lz4-block"``,
        ``"zstd-1"`` is zstd level -1, ...) or a :class:`~chunkstore.Codec`.
    dtypes
        Accepted for sb3-extra-buffers compatibility and ignored: observations
        are always stored losslessly in the space's dtype.
    chunk_len
        Frames per compressed chunk.
    cache_bytes
        Budget of the decoded-chunk cache shared by all observation keys (0: none).
    tier
        Where compressed chunks live: a :class:`~chunkstore.Tier`, a factory
        returning one, or None for RAM. A pickled buffer loads into RAM.
    frame_dedup
        False stores every observation whole (no frame sharing), for comparison.

    Examples
    --------
    >>> from stable_baselines3 import DQN
    >>> model = DQN("CnnPolicy", env, replay_buffer_class=CompressedReplayBuffer,
    ...             replay_buffer_kwargs={"compression_method": "zstd3"})  # doctest: +SKIP
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        compression_method: str | Any = DEFAULT_COMPRESSION,
        dtypes: Any = None,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tier: Tier | Callable[[], Tier] | None = None,
        frame_dedup: bool = True,
    ) -> None:
        if isinstance(observation_space, spaces.Dict):
            raise TypeError(f"{type(self).__name__} got a Dict observation space; use "
                            "CompressedDictReplayBuffer (SB3's DictReplayBuffer), or "
                            "CompressedHerReplayBuffer for goal-conditioned envs")
        self._init_base(buffer_size, observation_space, action_space, device, n_envs)
        if optimize_memory_usage and handle_timeout_termination:
            raise ValueError(
                "ReplayBuffer does not support optimize_memory_usage = True "
                "and handle_timeout_termination = True simultaneously."
            )
        self.optimize_memory_usage = optimize_memory_usage
        self._init_storage(handle_timeout_termination=handle_timeout_termination,
                           compression_method=compression_method, chunk_len=chunk_len,
                           cache_bytes=cache_bytes, tier=tier, frame_dedup=frame_dedup)


class CompressedDictReplayBuffer(_CompressedReplayMixin, DictReplayBuffer):
    """SB3's ``DictReplayBuffer``, compressed: one frame store per key (see :class:`CompressedReplayBuffer`)."""

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        compression_method: str | Any = DEFAULT_COMPRESSION,
        dtypes: Any = None,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tier: Tier | Callable[[], Tier] | None = None,
        frame_dedup: bool = True,
    ) -> None:
        self._init_base(buffer_size, observation_space, action_space, device, n_envs)
        assert isinstance(self.obs_shape, dict), "DictReplayBuffer must be used with Dict obs space only"
        assert not optimize_memory_usage, "DictReplayBuffer does not support optimize_memory_usage"
        self.optimize_memory_usage = optimize_memory_usage
        self._init_storage(handle_timeout_termination=handle_timeout_termination,
                           compression_method=compression_method, chunk_len=chunk_len,
                           cache_bytes=cache_bytes, tier=tier, frame_dedup=frame_dedup)


class CompressedNStepReplayBuffer(_CompressedReplayMixin, NStepReplayBuffer):
    """SB3's ``NStepReplayBuffer`` (n-step returns at sampling time), compressed.

    ``n_steps`` and ``gamma`` as in SB3; store options as in :class:`CompressedReplayBuffer`.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        n_steps: int = 3,
        gamma: float = 0.99,
        compression_method: str | Any = DEFAULT_COMPRESSION,
        dtypes: Any = None,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tier: Tier | Callable[[], Tier] | None = None,
        frame_dedup: bool = True,
    ) -> None:
        self._init_base(buffer_size, observation_space, action_space, device, n_envs)
        if optimize_memory_usage and handle_timeout_termination:
            raise ValueError(
                "ReplayBuffer does not support optimize_memory_usage = True "
                "and handle_timeout_termination = True simultaneously."
            )
        self.optimize_memory_usage = optimize_memory_usage
        self.n_steps = n_steps
        self.gamma = gamma
        if self.optimize_memory_usage:
            raise NotImplementedError("NStepReplayBuffer doesn't support optimize_memory_usage=True")
        self._init_storage(handle_timeout_termination=handle_timeout_termination,
                           compression_method=compression_method, chunk_len=chunk_len,
                           cache_bytes=cache_bytes, tier=tier, frame_dedup=frame_dedup)

    def _sample_plan(self, batch_inds: np.ndarray) -> list[tuple[int, np.ndarray]]:
        # the next-obs rows depend on dones; SB3 reads them first, and the obs rows ride along
        return [(OBS, batch_inds)]
