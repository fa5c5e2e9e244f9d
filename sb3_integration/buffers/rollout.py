"""Drop-in replacements for SB3's ``RolloutBuffer`` and ``DictRolloutBuffer``.

A rollout is written once, read ``n_epochs`` times in a random order, and thrown
away by ``reset()`` at the start of the next rollout. Observations go into the
same frame engine as the replay buffers (:class:`~sb3_integration.engine.frames.FrameStore`,
one stack per row): each distinct frame is stored once, and every ``get()``
batch is one native gather of its frames straight into the batch array, which
becomes the torch tensor without another copy. SB3 instead copies the whole
rollout in ``swap_and_flatten`` and every batch twice (fancy index, then
``th.tensor``); here ``swap_and_flatten`` only reorders a small index of (row,
env) pairs.

The codec defaults to ``"none"``: ``get()`` reads the whole rollout ``n_epochs``
times, so a codec cannot lower the peak, only add encode and decode time; frames
are still stored once. Pass ``compression_method="zstd3"`` (any name) to keep
only compressed chunks while a rollout is collected.

Observations are returned exactly as SB3 2.9 returns them: in the observation
space's dtype, bit for bit, with the same random-number use (SB3's own ``get()``
runs unchanged; only ``reset``, ``add`` and ``_get_samples`` are replaced).

With ``buffer_device`` (a torch device) the frames live in device memory and each
``get()`` batch is decoded and stacked there (:mod:`sb3_integration.engine.device_stacks`):
the observations of a batch never pass through the host. Actions, values, log
probabilities, advantages and returns stay SB3's host arrays and are copied to
``device`` per batch, as SB3 copies them. ``heap_bytes`` caps the device bytes of the
frames. Reading ``buffer.observations[...]`` directly returns numpy copies.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.type_aliases import DictRolloutBufferSamples, RolloutBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore import Codec, get_codec
from sb3_integration.buffers._closing import ClosableBuffer
from sb3_integration.buffers.extra_buffers import (
    convert_samples,
    describe,
    parse_extra_buffers_args,
)
from sb3_integration.buffers.options import (
    StoreOptions,
    check_keywords,
    make_frame_stores,
    parse_store_options,
)
from sb3_integration.buffers.sb3_checks import (
    check_rollout_add,
    check_rollout_allocation,
    check_rollout_space,
)
from sb3_integration.buffers.views import ObservationView
from sb3_integration.engine.device_stacks import check_not_meta, to_host
from sb3_integration.engine.frames import OBS, FrameStore
from sb3_integration.errors import RolloutNotFullError

__all__ = ["DEFAULT_ROLLOUT_COMPRESSION", "ROLLOUT_STORE_OPTIONS", "CompressedDictRolloutBuffer",
           "CompressedRolloutBuffer"]

#: codec of the rollout buffers (see the module docstring for why it is "none")
DEFAULT_ROLLOUT_COMPRESSION = "none"
#: frames per chunk of a rollout: each env keeps one chunk open (raw) while it writes
DEFAULT_ROLLOUT_CHUNK_LEN = 16
#: the store options (:data:`~sb3_integration.buffers.options.STORE_OPTIONS`) a rollout buffer takes: a rollout
#: lives for one ``get()`` and is not saved, so it has no preset, tier, cache or compressed small arrays
ROLLOUT_STORE_OPTIONS = ("chunk_len", "frame_dedup", "threads", "buffer_device", "heap_bytes")
_ROLLOUT_DEFAULTS = {"chunk_len": DEFAULT_ROLLOUT_CHUNK_LEN, "cache_bytes": 0}


class _CompressedRolloutMixin(ClosableBuffer):
    """Store options and observation storage shared by both rollout buffers."""

    buffer_size: int
    n_envs: int
    device: th.device
    pos: int
    full: bool
    generator_ready: bool  # SB3's RolloutBuffer's
    normalize_images: bool
    observation_space: Any  # a Box or a Dict space (SB3's classes narrow it each their way)
    observations: Any  # views that read from the frame stores (a dict of them for a Dict space)
    _stores: dict[Any, FrameStore]

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        dtypes: Any = None,
        normalize_images: bool = False,
        compression_method: str | Codec | None = None,
        compression_kwargs: dict[str, Any] | None = None,
        decompression_kwargs: dict[str, Any] | None = None,
        **store_options: Any,
    ) -> None:
        """SB3's arguments, then sb3-extra-buffers' (its positional order), then store options.

        The store options take the replay buffers' one path
        (:func:`~sb3_integration.buffers.options.parse_store_options`: same names, checks and
        errors); a rollout buffer takes :data:`ROLLOUT_STORE_OPTIONS`. SB3's own
        ``__init__`` runs (its checks, its ``reset``, which is ours).
        """
        check_keywords(type(self), store_options, ROLLOUT_STORE_OPTIONS)  # as Python words it for SB3's class
        # SB3's errors first
        BaseBuffer.__init__(cast(BaseBuffer, self), buffer_size, observation_space, action_space, device, n_envs=n_envs)
        check_rollout_space(self)
        extra = parse_extra_buffers_args(
            observation_space, dtypes=dtypes, normalize_images=normalize_images,
            compression_method=DEFAULT_ROLLOUT_COMPRESSION if compression_method is None else compression_method,
            compression_kwargs=compression_kwargs, decompression_kwargs=decompression_kwargs)
        self.store_options, _ = parse_store_options(type(self), extra.compression_method, store_options,
                                                    accepted=ROLLOUT_STORE_OPTIONS, defaults=_ROLLOUT_DEFAULTS)
        self.buffer_device = self.store_options.device
        self._sampling = False
        # the public names (SB3's and sb3-extra-buffers'), read by users
        self.compression_method = get_codec(self.store_options.codec).name
        self.chunk_len, self.frame_dedup = self.store_options.chunk_len, self.store_options.dedup
        self._stores = {}
        describe(self, extra, observation_space)
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs)  # type: ignore[call-arg]

    def _make_stores(self) -> None:
        self._stores = make_frame_stores(self.observation_space, max(self.buffer_size, 1), self.n_envs, 1,
                                    self._store_options())

    def _store_options(self) -> StoreOptions:
        """The buffer's StoreOptions (a 0.1.0 pickle's lacks ``dedup``: the buffer's ``frame_dedup`` is it)."""
        return self.store_options.replace(dedup=self.frame_dedup)

    def _make_views(self) -> None:
        views = {
            key: ObservationView(partial(self._read, key), (self.buffer_size, self.n_envs, *fs.obs_shape),
                                 fs.dtype, name=fs.name)
            for key, fs in self._stores.items()
        }
        self.observations = views.get(None, views)

    @property
    def frame_stores(self) -> dict[Any, FrameStore]:
        """The frame store of each observation key (None for a non-Dict space)."""
        return dict(self._stores)

    def close(self) -> None:
        """Give the frame stores' storage back now; the buffer cannot be used afterwards."""
        for fs in self._stores.values():
            fs.close()

    def _read(self, key: Any, rows: np.ndarray, envs: np.ndarray) -> Any:
        out = self._stores[key].gather([(OBS, rows)], envs)[0]
        return out if self._sampling else to_host(out)  # outside a batch: numpy, as SB3's arrays

    @contextmanager
    def _batch(self) -> Iterator[None]:
        """Inside: observation reads hand device tensors over as they are (a ``get()`` batch)."""
        self._sampling = True
        try:
            yield
        finally:
            self._sampling = False

    def reset(self) -> None:
        check_rollout_allocation(self)  # SB3's allocations' errors (a Dict space, a negative size)
        _reset_fields(self)  # first: from here no row is visible, so clearing the stores hides nothing
        self._reset_observations()

    def get(self, batch_size: int | None = None) -> Generator[Any, None, None]:
        """SB3's ``get``, with its one-time flattening of the arrays done in one step.

        (SB3 flattens array after array: an interrupt in between would leave some
        flattened and some not, and the next ``get`` would flatten those twice.)
        Before the rollout is full, SB3's (empty) assertion says why too.
        """
        if not self.full:
            raise RolloutNotFullError("", f"get() needs a full rollout: {self.pos} of {self.buffer_size} steps "
                                          "added (SB3 asserts self.full)")
        if not self.generator_ready:
            self._flatten()
        yield from super().get(batch_size)  # type: ignore[misc]

    def _flatten(self) -> None:
        names = ("actions", "values", "log_probs", "advantages", "returns")
        new: dict[str, Any] = {name: self.swap_and_flatten(getattr(self, name)) for name in names}  # type: ignore[attr-defined]
        obs = self.observations
        new["observations"] = ({key: self.swap_and_flatten(v) for key, v in obs.items()}  # type: ignore[attr-defined]
                               if isinstance(obs, dict) else self.swap_and_flatten(obs))  # type: ignore[attr-defined]
        new["generator_ready"] = True
        self.__dict__.update(new)  # one step

    def add(self, obs: Any, action: np.ndarray, reward: np.ndarray, episode_start: np.ndarray,
            value: th.Tensor, log_prob: th.Tensor) -> None:
        """SB3's ``add`` (an array, or a dict of them for a Dict space); everything is checked
        before anything is written (SB3's errors, see :mod:`sb3_integration.buffers.sb3_checks`)."""
        checked, fields = check_rollout_add(self, obs, action, reward, episode_start, value, log_prob)
        _write_fields(self, fields)
        attempt = self.__dict__.get("_commits", 0)  # this add's name for the frame stores
        try:
            for key, fs in self._stores.items():
                fs.put(OBS, self.pos, checked[key], attempt=attempt)
            _advance(self)
        except BaseException:  # not committed: the try's frames leave the streams (or at the retry)
            if self.__dict__.get("_commits", 0) == attempt:
                for fs in self._stores.values():
                    fs.abandon(attempt)
            raise

    def _reset_observations(self) -> None:
        if not self._stores:
            self._make_stores()
        else:
            for fs in self._stores.values():
                fs.clear()
        self._make_views()

    def _converted(self, samples: Any) -> Any:
        return convert_samples(samples, output_dtype=None, normalize_images=self.normalize_images)

    def to_torch(self, array: np.ndarray, copy: bool = True) -> th.Tensor:
        if isinstance(array, ObservationView):  # torch reads a non-ndarray row by row (slow, and it warns)
            array = np.asarray(array)
        return super().to_torch(array, copy=copy)  # type: ignore[misc]

    def _obs_tensor(self, obs: Any) -> th.Tensor:
        # obs is a fresh array nobody else holds: share it instead of copying (SB3's to_torch copies)
        check_not_meta(obs, self.device, f"return samples on {self.device}")
        return th.as_tensor(obs, device=self.device)

    # -- sizes ---------------------------------------------------------------------------
    @property
    def nbytes_stored(self) -> int:
        """Bytes this buffer holds for observations (SB3 holds ``observations.nbytes``)."""
        return sum(fs.nbytes_stored for fs in self._stores.values())

    @property
    def nbytes_raw(self) -> int:
        """Bytes SB3's buffer holds for the same observations."""
        return sum(self.buffer_size * self.n_envs * math.prod(fs.obs_shape) * fs.dtype.itemsize
                   for fs in self._stores.values())

    @property
    def nbytes_held(self) -> int:
        """Every byte of memory the observation storage holds (slack, spare and output buffers included)."""
        return sum(fs.nbytes_held for fs in self._stores.values())

    def storage_info(self) -> dict[str, Any]:
        """Per observation key (``"observations"`` for a non-Dict space): layout, bytes, codec."""
        return {("observations" if k is None else k): fs.info() for k, fs in self._stores.items()}

    # -- pickling: the frame stores; views are rebuilt -------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        obs = state.pop("observations", None)
        # after get() has flattened the views, their (row, env) order must survive too
        state["_lead"] = {k: v._lead for k, v in obs.items()} if isinstance(obs, dict) else (
            None if obs is None else obs._lead)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("normalize_images", False)  # 0.1.0 pickles of the internal classes lack it
        state["_sampling"] = False
        lead = state.pop("_lead", None)
        self.__dict__.update(state)
        # where the frames are now (a pickle from a CUDA machine loads into host memory without CUDA)
        self.buffer_device = next((fs.device for fs in self._stores.values() if fs.device is not None), None)
        self._make_views()
        if lead is None:
            return
        if isinstance(self.observations, dict):
            for k, v in list(self.observations.items()):
                if lead.get(k) is not None:
                    self.observations[k] = _relead(v, lead[k])
        elif isinstance(lead, np.ndarray):
            self.observations = _relead(self.observations, lead)


def _relead(view: ObservationView, lead: np.ndarray) -> ObservationView:
    shape = (*lead.shape[:-1], *view.shape[2:])
    return ObservationView(view._reader, shape, view.dtype, view.name, lead=lead)


class CompressedRolloutBuffer(_CompressedRolloutMixin, RolloutBuffer):
    """SB3's ``RolloutBuffer`` with each distinct observation frame stored once.

    SB3's constructor arguments, then sb3-extra-buffers' (in its positional order),
    then keyword-only store options. ``get()`` yields bit-identical
    ``RolloutBufferSamples`` to SB3's for the same ``np.random`` state (observations
    in the space's dtype, as SB3 2.9).

    Parameters
    ----------
    dtypes, normalize_images, compression_kwargs, decompression_kwargs
        sb3-extra-buffers' arguments (see :mod:`sb3_integration.buffers.extra_buffers`);
        ``dtypes`` is informational: observations are always stored losslessly in
        the space's dtype. sb3-extra-buffers' rollout buffers take no ``output_dtype``;
        neither do these.
    compression_method
        A codec name (sb3-extra-buffers' grammar: ``"zstd3"``, ``"lz4-block"``; NB
        ``"zstd-3"`` is level -3) or ``"none"`` (default): see the module docstring.
    chunk_len
        Frames per chunk (default 16).
    frame_dedup
        Share the frames of stacked observations (True) or store whole observations.
    threads
        Threads that share one batch's chunks (default ``chunkstore.array.DEFAULT_THREADS``: 2,
        or 1 on one core).
    buffer_device
        None (default): frames in host memory. A torch device (``"cuda"``): frames stored,
        decoded and stacked there (see the module docstring).
    heap_bytes
        With ``buffer_device``: the most device bytes of frame records, shared by all keys
        (default: half a CUDA device's free memory; no limit elsewhere); past it the oldest
        segments move to host RAM and are still read.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = CompressedRolloutBuffer(
    ...     128, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), device="cpu", n_envs=8
    ... )
    >>> buf.observations.shape, buf.observations.dtype
    ((128, 8, 4, 84, 84), dtype('uint8'))
    """

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> RolloutBufferSamples:
        with self._batch():
            obs = self._obs_tensor(self.observations[batch_inds])
        return self._converted(RolloutBufferSamples(obs, *_sample_fields(self, batch_inds)))


class CompressedDictRolloutBuffer(_CompressedRolloutMixin, DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` with each key stored as :class:`CompressedRolloutBuffer` stores it.

    Same arguments as :class:`CompressedRolloutBuffer`; every key of the Dict
    space keeps its own dtype.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"img": spaces.Box(0, 255, (4, 16, 16), np.uint8),
    ...                      "vec": spaces.Box(-1, 1, (3,), np.float32)})
    >>> buf = CompressedDictRolloutBuffer(8, space, spaces.Discrete(2), device="cpu", n_envs=2)
    >>> buf.observations["vec"].shape
    (8, 2, 3)
    """

    def _get_samples(self, batch_inds: np.ndarray,  # type: ignore[override]
                     env: VecNormalize | None = None) -> DictRolloutBufferSamples:
        obs = self.observations
        assert isinstance(obs, dict)
        with self._batch():
            tensors = {key: self._obs_tensor(v[batch_inds]) for key, v in obs.items()}
        return self._converted(DictRolloutBufferSamples(tensors, *_sample_fields(self, batch_inds)))


# == SB3's own handling of the non-observation fields ==================================
# Written out (rather than calling SB3's reset/add) because those allocate and write
# `observations`; each conversion matches SB3 2.9 so that every dtype and value is the
# same. add() converts all of them first and writes only then: a malformed field leaves
# the buffer unchanged.


def _reset_fields(buf: Any) -> None:
    shape = (buf.buffer_size, buf.n_envs)
    fresh: dict[str, Any] = {"pos": 0, "full": False, "generator_ready": False,
                             "actions": np.zeros((*shape, buf.action_dim), dtype=buf.action_space.dtype)}
    for name in ("rewards", "returns", "episode_starts", "values", "log_probs", "advantages"):
        fresh[name] = np.zeros(shape, dtype=np.float32)
    buf.__dict__.update(fresh)  # one step: never a full buffer with zeroed fields


_FIELDS = ("actions", "rewards", "episode_starts", "values", "log_probs")


def _write_fields(buf: Any, rows: list[np.ndarray]) -> None:
    for name, row in zip(_FIELDS, rows, strict=True):
        getattr(buf, name)[buf.pos] = row


def _advance(buf: Any) -> None:
    """The row is written: ``pos``, ``full`` and the count of adds move in one step (the add's commit)."""
    buf.__dict__.update(pos=buf.pos + 1, full=buf.full or buf.pos + 1 == buf.buffer_size,
                        _commits=buf.__dict__.get("_commits", 0) + 1)


def _sample_fields(buf: Any, batch_inds: np.ndarray) -> list[th.Tensor]:
    data = (
        # Cast to float32 (backward compatible), as SB3
        buf.actions[batch_inds].astype(np.float32, copy=False),
        buf.values[batch_inds].flatten(),
        buf.log_probs[batch_inds].flatten(),
        buf.advantages[batch_inds].flatten(),
        buf.returns[batch_inds].flatten(),
    )
    return [buf.to_torch(x) for x in data]
