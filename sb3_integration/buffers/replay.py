"""Drop-in compressed replay buffers for Stable-Baselines3.

:class:`CompressedReplayBuffer`, :class:`CompressedDictReplayBuffer` and
:class:`CompressedNStepReplayBuffer` subclass SB3's ``ReplayBuffer``,
``DictReplayBuffer`` and ``NStepReplayBuffer`` with the same constructor
arguments, plus keyword-only store options. Only the observation storage
changes: observations live in :class:`~sb3_integration.engine.frames.FrameStore`
objects (each distinct frame once, in compressed chunks), while actions,
rewards, dones and timeouts stay SB3's own small numpy arrays.

Sampling is SB3's own code: ``sample()`` and ``_get_samples()`` are inherited,
so the random-number use and every computation (n-step returns, timeout
masking, VecNormalize) are SB3's. ``observations`` / ``next_observations`` are
:class:`~sb3_integration.buffers.views.ObservationView` objects that SB3's code
indexes as it indexes its arrays; during ``_get_samples`` the first read of a
key fetches every stack the batch needs (obs and next obs) in one pass over
the chunks, and the later reads are served from that pass.

With ``buffer_device`` (a torch device) the observation frames live in device memory
and a sample stays there: the host computes which frames the batch needs from its
index, the device decodes them and assembles ``obs`` and ``next_obs`` stacks
(:mod:`sb3_integration.engine.device_stacks`), and ``to_torch`` hands those tensors over
(moved only if ``device`` differs from ``buffer_device``). SB3's small arrays
(actions, rewards, dones, timeouts) stay numpy arrays on the host and are copied to
``device`` per sample, as SB3 copies them; ``heap_bytes`` caps the device bytes of
the frames (older segments spill to host RAM). Reads outside a sample
(``buffer.observations[...]``) return numpy copies, and so does a sample given a
``VecNormalize`` env (its normalisation is numpy code).

Keys that compression does not pay for are stored raw (``observation_storage``, see
:mod:`sb3_integration.engine.raw`): a vector observation of at most 4 KiB, or a larger one whose
first add compresses less than 1.3x, is SB3's own preallocated array, and ``observations`` /
``next_observations`` (or their Dict entries) *are* those numpy arrays. A buffer whose keys are all
raw (with SB3's small arrays raw, which ``small_arrays="auto"`` then keeps) holds what SB3's holds
and samples with SB3's ``_get_samples`` alone; in a Dict buffer only the compressed keys go through
the views.

``optimize_memory_usage`` is accepted with SB3's checks and sampled exactly as
SB3 samples it (``observations[pos]`` reads as the latest next observation),
but saves nothing here: frame dedup already stores ``next_obs[t] == obs[t+1]``
once, and keeps the terminal observations that ``optimize_memory_usage`` loses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import (
    BaseBuffer,
    DictReplayBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
)
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore import Codec, LRUChunkCache, Tier, get_codec
from sb3_integration.buffers._closing import ClosableBuffer
from sb3_integration.buffers._lean_frames import frame_samples, lean_frames
from sb3_integration.buffers._pickling import PickledBuffer
from sb3_integration.buffers._prefetching import PrefetchFront
from sb3_integration.buffers._prioritized_reads import read_samples
from sb3_integration.buffers._sizes import BufferSizes
from sb3_integration.buffers.columns import SMALL_ARRAYS, Columns
from sb3_integration.buffers.extra_buffers import (
    convert_samples,
    describe,
    parse_extra_buffers_args,
)
from sb3_integration.buffers.files import ReplayFiles
from sb3_integration.buffers.observations import subspaces
from sb3_integration.buffers.options import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_LEN,
    DEFAULT_COMPRESSION,
    StoreOptions,
    make_frame_stores,
    parse_store_options,
)
from sb3_integration.buffers.sb3_checks import check_replay_add, like_sb3, replay_constructor_checks
from sb3_integration.buffers.sources import convert_into
from sb3_integration.buffers.views import ObservationView, same_rows
from sb3_integration.engine.device_stacks import check_not_meta, to_host
from sb3_integration.engine.frame_state import RELEASE_LAG_CHUNKS
from sb3_integration.engine.frames import NEXT, OBS, FrameStore
from sb3_integration.engine.raw import (
    AUTO,
    RAW,
    RawStore,
    choose_after_probe,
    choose_storage,
    parse_storage,
)
from sb3_integration.samplers import Draw, Sampler, UniformSampler, check_prefetch
from sb3_integration.samplers.prefetch import prefetch_generator

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "CompressedDictReplayBuffer",
    "CompressedNStepReplayBuffer",
    "CompressedReplayBuffer",
]

_SMALL_ARRAYS = SMALL_ARRAYS
#: ``small_arrays="auto"`` compresses SB3's small arrays from this many transitions on when the
#: actions are integers (Discrete, MultiDiscrete, MultiBinary): below it they are a few MB, and
#: reading them raw keeps a sample cheaper
COMPRESS_SMALL_FROM = 1_000_000
#: ... and, whatever the actions, once they would take this many bytes raw. Float actions and
#: dense rewards compress ~1.3x (36 B a row of a 6-dim Box action to 28 B with zstd1), integer
#: actions and sparse rewards ~10x (20 B to 2 B), and a sampled row decodes its whole chunk of 64
#: rows: compressing a 1M SAC buffer's would save 8 MB and make sample(256) several times slower
COMPRESS_SMALL_BYTES = 256 << 20
B = TypeVar("B", bound="_CompressedReplayMixin")


class _CompressedReplayMixin(PrefetchFront, BufferSizes, PickledBuffer, ReplayFiles, ClosableBuffer):
    """Observation storage shared by the replay buffers (put before the SB3 class).

    ``save(path)`` / ``load(path, device=...)``: see :mod:`sb3_integration.persistence.files`.
    ``sample()`` asks :attr:`_sampler` for a :class:`~sb3_integration.samplers.base.Draw` and
    reads it (:meth:`_read_draw`); ``prefetch=k`` does both ahead (:mod:`sb3_integration.samplers.prefetch`).
    """

    #: what ``sample()`` draws with (stateless: shared by every buffer of the class)
    _sampler: Sampler = UniformSampler()
    #: whether ``prefetch`` may be set (HER relabels goals in SB3's own ``sample()``)
    _prefetch_supported = True
    _batch_thread: int | None  # the thread in _batch() now (None: none)

    buffer_size: int
    n_envs: int
    pos: int
    full: bool
    output_dtype: Any  # the sb3-extra-buffers option (None: the space's dtype)
    normalize_images: bool
    optimize_memory_usage: bool
    handle_timeout_termination: bool
    observation_space: Any  # a Box or a Dict space (SB3's classes narrow it each their way)
    # views that read from the frame stores (a dict of them for a Dict space), where SB3 has arrays
    observations: Any
    next_observations: Any
    action_space: spaces.Space
    action_dim: int
    device: th.device
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    timeouts: np.ndarray

    # -- construction ----------------------------------------------------------------
    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        dtypes: Any = None,
        normalize_images: bool = False,
        compression_method: str | Codec | None = None,
        compression_kwargs: dict[str, Any] | None = None,
        decompression_kwargs: dict[str, Any] | None = None,
        output_dtype: str = "raw",
        **store_options: Any,
    ) -> None:
        """SB3's arguments, then sb3-extra-buffers' (in its positional order), then store options.

        The one constructor of every compressed replay buffer: the SB3 class's own
        checks (:data:`_SB3_CHECKS`) run here, after ``BaseBuffer.__init__``, as
        SB3's constructors run them; SB3's full-size arrays are checked (the errors
        their shapes raise), not allocated.
        """
        prefetch = check_prefetch(store_options.pop("prefetch", None))
        prefetch_seed = store_options.pop("prefetch_seed", None)
        if prefetch and not self._prefetch_supported:
            raise ValueError(f"{type(self).__name__} does not take prefetch (it samples with SB3's own code)")
        extra = parse_extra_buffers_args(
            observation_space, dtypes=dtypes, normalize_images=normalize_images,
            compression_method=compression_method, compression_kwargs=compression_kwargs,
            decompression_kwargs=decompression_kwargs, output_dtype=output_dtype)
        storage = store_options.pop("observation_storage", AUTO)
        options, small_arrays = parse_store_options(type(self), extra.compression_method, store_options)
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)  # type: ignore[arg-type]
        for check in replay_constructor_checks(type(self)):
            check(self, optimize_memory_usage, handle_timeout_termination)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = optimize_memory_usage
        describe(self, extra, observation_space)
        self._init_storage(handle_timeout_termination=handle_timeout_termination, options=options,
                           small_arrays=small_arrays, storage=storage)
        if prefetch or prefetch_seed is not None:  # else none of it: a buffer without prefetch is as before
            self._prefetch_seed = prefetch_seed
            self._prefetch_rng = prefetch_generator(prefetch_seed) if prefetch else None
            self._prefetch_k = prefetch

    @classmethod
    def from_sb3_extra_buffers(cls: type[B], source: Any, **kwargs: Any) -> B:
        """This class, filled from an sb3-extra-buffers or SB3 replay buffer or its pickle.

        See :func:`sb3_integration.interop.convert.from_sb3_extra_buffers` (``buffer_class=cls``).
        """
        return convert_into(source, cls, **kwargs)

    def _init_storage(self, *, handle_timeout_termination: bool, options: StoreOptions,
                      small_arrays: str = "auto", storage: Any = AUTO) -> None:
        self.handle_timeout_termination = handle_timeout_termination
        if small_arrays not in ("auto", "raw", "compressed"):
            raise ValueError(f"small_arrays must be 'auto', 'raw' or 'compressed', got {small_arrays!r}")
        subs = subspaces(self.observation_space)
        host_keys = set(subs) - self._device_keys()
        modes = parse_storage(storage, list(subs))
        # each key's storage: raw or compressed now, or (None) measured on the first add
        self._storage: dict[Any, str | None] = {
            key: choose_storage(modes[key], tuple(self._key_shape(key)), sub.dtype,
                                device=None if key in host_keys else options.device)
            for key, sub in subs.items()}
        if small_arrays == "auto":  # with every key raw the buffer is SB3's size anyway: SB3's arrays, SB3's speed
            all_raw = all(m == RAW for m in self._storage.values())
            small_arrays = "compressed" if self._compress_small_arrays() and not all_raw else "raw"
        self.small_arrays = small_arrays
        self._columns: Columns | None = None
        self._init_small_arrays()

        self._lock = threading.RLock()  # add/reset/extend and a state capture exclude each other
        self.store_options = options
        # the public names (SB3's and sb3-extra-buffers'), read by users and saved files
        self.compression_method = get_codec(options.codec).name
        self.chunk_len, self.frame_dedup, self._cache_bytes = options.chunk_len, options.dedup, options.cache_bytes
        cache = LRUChunkCache(self._cache_bytes, name="replay") if self._cache_bytes else 0
        self._stores = make_frame_stores(self.observation_space, self.buffer_size, self.n_envs, 2, options, cache=cache,
                                         host_keys=host_keys, follow=self.optimize_memory_usage,
                                         raw_keys={k for k, m in self._storage.items() if m == RAW})
        self.buffer_device = options.device
        self._undecided = any(m is None for m in self._storage.values())
        self._plan: list[tuple[int, np.ndarray]] | None = None
        self._memo: dict[Any, list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._owned: dict[int, np.ndarray] = {}  # batch arrays made in this call (kept alive: ids stay unique)
        self._make_views()

    def _device_keys(self) -> set[Any]:
        """Observation keys whose frames go to ``buffer_device`` (all of them; HER keeps its goals on the host)."""
        return set(subspaces(self.observation_space))

    def _compress_small_arrays(self) -> bool:
        """``small_arrays="auto"``'s choice: from :data:`COMPRESS_SMALL_FROM` transitions on for
        integer actions, from :data:`COMPRESS_SMALL_BYTES` of raw small arrays on for any."""
        rows, fields = self.buffer_size * self.n_envs, self._small_fields()
        row_bytes = sum(np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64)) for dt, shape in fields.values())
        integer_actions = np.dtype(fields["actions"][0]).kind in "biu"
        return (integer_actions and rows >= COMPRESS_SMALL_FROM) or rows * row_bytes >= COMPRESS_SMALL_BYTES

    def _small_fields(self) -> dict[str, tuple[Any, tuple[int, ...]]]:
        """SB3's small arrays: dtype and shape after ``(buffer_size, n_envs)``."""
        action = ReplayBuffer._maybe_cast_dtype(self.action_space.dtype)
        return {"actions": (action, (self.action_dim,)), "rewards": (np.float32, ()),
                "dones": (np.float32, ()), "timeouts": (np.float32, ())}

    def _init_small_arrays(self, records: Any = None) -> None:
        if self.small_arrays == "compressed":
            self._columns = Columns(self.buffer_size, self.n_envs, self._small_fields(), records=records)
            for name, view in self._columns.views().items():
                setattr(self, name, view)
        else:
            for name, (dtype, shape) in self._small_fields().items():
                setattr(self, name, np.zeros((self.buffer_size, self.n_envs, *shape), dtype=dtype))

    def _key_shape(self, key: Any) -> tuple[int, ...]:
        shape = self.obs_shape if key is None else self.obs_shape[key]  # type: ignore[attr-defined]
        return tuple(shape)

    @property
    def observation_storage(self) -> Any:
        """How each observation key is stored: ``"raw"`` (SB3's arrays), ``"compressed"`` (a frame store),
        or ``"auto"`` while a large key awaits its measurement on the first add; a str for a non-Dict space.

        See :mod:`sb3_integration.engine.raw` for the rule (the constructor's ``observation_storage``).
        """
        modes = {k: AUTO if m is None else m for k, m in self._storage.items()}
        return modes.get(None, modes)

    def _decide_storage(self, obs: dict[Any, np.ndarray], next_obs: dict[Any, np.ndarray]) -> None:
        """The first add: measure each undecided key on its items and make it raw if they do not shrink."""
        for key, mode in list(self._storage.items()):
            if mode is not None:
                continue
            mode = choose_after_probe([obs[key], next_obs[key]])
            if mode == RAW:
                self._make_raw(key)
            self._storage[key] = mode
        self._make_views()

    def _make_raw(self, key: Any) -> None:
        """Key ``key``'s store, empty, made raw (the first add's measurement chose it)."""
        old = self._stores[key]
        self._stores[key] = RawStore(old.obs_shape, old.dtype, self.buffer_size, self.n_envs, stacks_per_row=2,
                                     follow=self.optimize_memory_usage, name=old.name)
        self.__dict__.pop("_add_signature", None)  # check_replay_add's fast path remembers the store
        old.close()

    def _make_views(self) -> None:
        views = {
            which: {
                key: store.view(which) if store.view(which) is not None
                else ObservationView(
                    partial(self._read, key, which),
                    (self.buffer_size, self.n_envs, *self._key_shape(key)),
                    store.dtype,
                    name=("observations", "next_observations")[which] + ("" if key is None else f"[{key}]"),
                )
                for key, store in self._stores.items()
            }
            for which in (OBS, NEXT)
        }
        if None in self._stores:
            self.observations, self.next_observations = views[OBS][None], views[NEXT][None]
        else:
            self.observations, self.next_observations = views[OBS], views[NEXT]
        self._lean = self._columns is None and all(type(s) is RawStore for s in self._stores.values())
        self._lean_frames = lean_frames(self, _CompressedReplayMixin._get_samples)  # one host frame store

    # -- writing ---------------------------------------------------------------------------
    def add(self, obs: Any, next_obs: Any, action: np.ndarray, reward: np.ndarray, done: np.ndarray,
            infos: list[dict[str, Any]]) -> None:
        """SB3's ``add``: SB3's errors where SB3 fails (nothing written), DataLossError for lossy input.

        See :mod:`sb3_integration.buffers.sb3_checks` (SB3's operations on scratch rows, first).
        """
        obs_in, next_in, small = check_replay_add(self, obs, next_obs, action, reward, done, infos)
        if self._undecided:  # the first add: measure the keys "auto" left open
            with self._lock:
                if self._undecided:
                    self._decide_storage(obs_in, next_in)
                    self._undecided = False
        with self._lock:
            self._quiesce()  # batches drawn ahead read the rows as they were drawn: before this write
            # an interrupt anywhere below leaves only row pos torn (pos has not moved), and the
            # next add rewrites it: the frame stores keep every other row intact
            pos = self.pos
            attempt = self.__dict__.get("_commits", 0)  # this add's name for the frame stores
            try:
                if self.full and pos % (self.chunk_len * RELEASE_LAG_CHUNKS) == 0:  # frees several whole chunks
                    for store in self._stores.values():
                        store.release_before((pos + 1) % self.buffer_size)
                for key, store in self._stores.items():
                    store.put_row(pos, (obs_in[key], next_in[key]), attempt=attempt)
                if self._columns is not None:
                    self._columns.write_row(pos, dict(zip(_SMALL_ARRAYS, small, strict=False)))
                else:  # SB3's arrays, written as SB3 writes them (timeouts only when handled)
                    self.actions[pos], self.rewards[pos], self.dones[pos] = small[0], small[1], small[2]
                    if len(small) > 3:
                        self.timeouts[pos] = small[3]
                self._advance(pos)
            except BaseException:
                # not committed: the try's frames leave the streams now (and, should a second
                # interrupt cut this short, at the retry, which comes with the same attempt)
                if self.__dict__.get("_commits", 0) == attempt:
                    for store in self._stores.values():
                        store.abandon(attempt)
                raise

    def _advance(self, pos: int) -> None:
        """Row ``pos`` is written: move on, ``pos``, ``full`` and the count of adds in one step (the commit)."""
        wrap = pos + 1 == self.buffer_size
        self.__dict__.update(pos=0 if wrap else pos + 1, full=self.full or wrap,
                             _commits=self.__dict__.get("_commits", 0) + 1)

    def reset(self) -> None:
        with self._lock:
            self._stop_prefetch()
            super().reset()  # type: ignore[misc]
            for store in self._stores.values():
                store.clear()
            if self._columns is not None:
                self._columns.clear()

    @property
    def frame_stores(self) -> dict[Any, FrameStore]:
        """The frame store of each observation key (None for a non-Dict space)."""
        return dict(self._stores)

    def close(self) -> None:
        """Give the storage back now: every frame store's (and their tiers), the small arrays',
        and a tier instance given to the constructor. The buffer cannot be used afterwards."""
        with self._lock:
            self._stop_prefetch()
            for store in self._stores.values():
                store.close()
            if any(isinstance(s, RawStore) for s in self._stores.values()):
                self._make_views()  # a raw key's arrays go with it (a read now says the store is closed)
            if self._columns is not None:
                self._columns.close()
            tier = self.store_options.tier
            if isinstance(tier, Tier):  # given to this buffer: it holds this buffer's chunks
                tier.close()

    # -- reading ---------------------------------------------------------------------------
    def sample(self, batch_size: int, env: VecNormalize | None = None) -> Any:
        """SB3's ``sample``; from an empty buffer, SB3's error (numpy's ``high <= 0``) says why too.

        The sampler draws the rows with SB3's call on numpy's global generator, and SB3's
        ``_get_samples`` draws the envs and reads them: SB3's samples, bit for bit (its errors
        too). With ``prefetch``, a batch drawn ahead (see :mod:`sb3_integration.samplers.prefetch`).
        Drawn and read under the writer's lock: an ``add()`` in another thread waits, so a sample is
        whole (each row's fields from one transition); with ``prefetch`` an ``add()`` waits for the
        reads already drawn, which gives the same.
        """
        if not self.size():  # type: ignore[attr-defined]
            return like_sb3(lambda: super(_CompressedReplayMixin, self).sample(batch_size, env=env),  # type: ignore[misc]
                            "sample() from an empty buffer: add transitions first", argument=False)
        if self.__dict__.get("_prefetch_k"):
            return self._prefetched(batch_size, env)
        with self._lock:
            draw = self._sampler.sample(self, batch_size)
            return self._finish_draw(draw, self._read_draw(draw, env))

    def _read_draw(self, draw: Draw, env: VecNormalize | None = None) -> Any:
        """The storage's read of a draw: SB3's ``_get_samples`` of its rows (or its computation, envs drawn)."""
        rows, envs = draw.rows, draw.envs
        if env is None and self._lean_frames and (lean := frame_samples(self, rows, envs)) is not None:
            return self._converted(lean)
        if envs is None:
            return self._get_samples(rows, env=env)
        return self._read_samples(rows, envs, env)

    def _finish_draw(self, draw: Draw, samples: Any) -> Any:
        """What ``sample()`` returns for a read draw (a prioritized buffer adds weights and indices)."""
        return samples

    def _sample_plan(self, batch_inds: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """The (which, rows) reads SB3's ``_get_samples`` will make for ``batch_inds``."""
        if self.optimize_memory_usage:
            return [(OBS, batch_inds), (OBS, (batch_inds + 1) % self.buffer_size)]
        return [(OBS, batch_inds), (NEXT, batch_inds)]

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> Any:
        if self._lean:  # SB3's arrays only: SB3's own code, nothing around it
            return self._converted(super()._get_samples(batch_inds, env=env))  # type: ignore[misc]
        return self._batch(batch_inds, lambda: super(_CompressedReplayMixin, self)._get_samples(  # type: ignore[misc]
            batch_inds, env=env))

    def _read_samples(self, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None = None) -> Any:
        """The samples of the transitions ``(batch_inds[i], env_indices[i])``: what SB3's ``_get_samples``
        returns when it draws ``env_indices`` (the storage's read of given indices, for samplers)."""
        if self._lean:
            return self._converted(read_samples(self, batch_inds, env_indices, env))
        return self._batch(batch_inds, lambda: read_samples(self, batch_inds, env_indices, env))

    def _converted(self, samples: Any) -> Any:
        """``samples`` with sb3-extra-buffers' ``output_dtype`` / ``normalize_images`` applied (as is without)."""
        return convert_samples(samples, output_dtype=self.output_dtype, normalize_images=self.normalize_images)

    def _batch(self, batch_inds: np.ndarray, read: Callable[[], Any]) -> Any:
        """``read()`` (SB3's reads of the rows ``batch_inds``) with every stack fetched in one pass per key."""
        # a prefetch worker's plan: other threads read around it (set before the plan they check first)
        self._batch_thread = threading.get_ident()
        self._plan = self._sample_plan(np.asarray(batch_inds))
        self._memo, self._owned = {}, {}
        if self._columns is not None:
            self._columns.begin_batch()
        try:
            samples = read()
        finally:
            self._plan, self._memo, self._owned, self._batch_thread = None, {}, {}, None
            if self._columns is not None:
                self._columns.end_batch()
        return self._converted(samples)

    def _remap(self, which: int, rows: np.ndarray) -> tuple[Any, np.ndarray]:
        """SB3 with ``optimize_memory_usage`` holds the latest next obs in ``observations[pos]``."""
        if not self.optimize_memory_usage or which != OBS or (self.pos == 0 and not self.full):
            return which, rows
        hit = rows == self.pos
        if not hit.any():
            return which, rows
        return hit.astype(np.intp), np.where(hit, (self.pos - 1) % self.buffer_size, rows)

    def _read(self, key: Any, which: int, rows: np.ndarray, envs: np.ndarray) -> Any:
        store = self._stores[key]
        if isinstance(store, RawStore):  # follow's next observations: SB3's reading, no remap
            return store.gather([(which, rows)], envs)[0]
        if self._plan is None or self.__dict__.get("_batch_thread") not in (None, threading.get_ident()):
            # not a sample (or another thread's read during a prefetch worker's): numpy, as SB3's arrays
            return to_host(store.gather([self._remap(which, rows)], envs)[0])
        memo = self._memo.get(key)
        if memo is None:  # first read of this key in this batch: fetch the whole plan with it
            reqs = [(which, rows)] + [(w, r) for w, r in self._plan
                                      if not (w == which and same_rows(r, rows))]
            outs = store.gather([self._remap(w, r) for w, r in reqs], envs)
            self._memo[key] = [(w, r, envs, o) for (w, r), o in zip(reqs[1:], outs[1:], strict=True)]
            self._owned.update((id(o), o) for o in outs)
            return outs[0]
        for i, (w, r, e, o) in enumerate(memo):
            if w == which and same_rows(r, rows) and same_rows(e, envs):
                del memo[i]
                return o
        out = store.gather([self._remap(which, rows)], envs)[0]
        self._owned[id(out)] = out
        return out

    def to_torch(self, array: np.ndarray, copy: bool = True) -> th.Tensor:
        if not self._owned and type(array) is np.ndarray:  # rows of SB3's arrays (raw keys too): SB3's conversion
            return th.tensor(array, device=self.device) if copy else th.as_tensor(array, device=self.device)
        # a batch array (or device tensor) this buffer just made for this call is handed over without a
        # second copy: a tensor already on ``device`` as it is
        if self._owned.pop(id(array), None) is array:
            check_not_meta(array, self.device, f"return samples on {self.device}")
            return th.as_tensor(array, device=self.device)
        if isinstance(array, ObservationView):  # torch reads a non-ndarray row by row (slow, and it warns)
            array = np.asarray(array)
        return super().to_torch(array, copy=copy)  # type: ignore[misc]

    def _normalize_obs(self, obs: Any, env: VecNormalize | None = None) -> Any:
        # VecNormalize normalises numpy arrays: a sample with one reads device observations back
        if env is not None:
            obs = {k: to_host(v) for k, v in obs.items()} if isinstance(obs, dict) else to_host(obs)
        return ReplayBuffer._normalize_obs(obs, env)

# -- the buffers ---------------------------------------------------------------------------
class CompressedReplayBuffer(_CompressedReplayMixin, ReplayBuffer):
    """SB3's ``ReplayBuffer`` with observations in compressed chunks, each distinct frame once.

    Parameters
    ----------
    buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage, handle_timeout_termination
        As in SB3's ``ReplayBuffer`` (same checks, same errors).
    dtypes, normalize_images, compression_method, compression_kwargs, decompression_kwargs, output_dtype
        sb3-extra-buffers' arguments, in its positional order (see
        :mod:`sb3_integration.interop.extra_buffers`). ``compression_method`` is a codec name in
        its grammar (``"zstd3"``, ``"lz4-block"``, ``"zstd-1"`` is zstd level -1, ...) or a
        :class:`~chunkstore.Codec` (default: the preset's, ``"zstd3+dict"``); ``dtypes`` is
        informational (observations are always stored losslessly in the space's dtype).
    **store_options
        Keyword-only (:class:`~sb3_integration.buffers.options.StoreOptions`): ``preset``
        (``"fast"``, the default: chunk_len 4, ``zstd3+dict``; or ``"compact"``: chunk_len 32,
        smaller and slower to sample; explicit arguments win), ``chunk_len`` (frames per
        chunk), ``cache_bytes`` (decoded-chunk cache shared by all keys; 0: none), ``tier``
        (where chunks live: a :class:`~chunkstore.Tier`, a factory returning one, or None for
        RAM; a pickled buffer loads into RAM), ``frame_dedup`` (False stores every observation
        whole), ``threads`` (threads sharing the chunks of one sample; default
        ``chunkstore.array.DEFAULT_THREADS``), ``small_arrays`` (``"raw"``: SB3's arrays,
        ``"compressed"``: chunks of rows, ``"auto"``: compressed from 1M transitions on for
        integer actions, once they would take 256 MiB raw for float ones, raw whenever every
        observation key is raw), ``observation_storage`` (per observation key, a str for all
        or a dict by Dict key: ``"auto"``, the default: raw, as SB3's arrays, when an observation
        is at most 4 KiB or its first add's observations compress less than 1.3x, else
        compressed; ``"raw"``; ``"compressed"``; see :mod:`sb3_integration.engine.raw`),
        ``buffer_device`` (None, the default: frames in host memory; a torch device such as
        ``"cuda"``: frames stored, decoded and stacked there, samples never leave it; see the
        module docstring) and ``heap_bytes`` (with ``buffer_device``: the most device bytes of
        frame records, shared by all keys; default half a CUDA device's free memory, no limit
        elsewhere; past it the oldest segments move to host RAM and are still read).

    Examples
    --------
    >>> from stable_baselines3 import DQN; from gymnasium import spaces
    >>> model = DQN("MlpPolicy", "CartPole-v1", buffer_size=10_000, replay_buffer_class=CompressedReplayBuffer,
    ...             replay_buffer_kwargs={"compression_method": "zstd3"})  # "CnnPolicy" and an Atari env alike
    >>> type(model.replay_buffer).__name__, model.replay_buffer.compression_method
    ('CompressedReplayBuffer', 'zstd/3')
    >>> buf = CompressedReplayBuffer(1000, spaces.Box(0, 255, (4, 84, 84), np.uint8),
    ...                              spaces.Discrete(6), "cpu", compression_method="zstd-3")
    >>> buf.compression_method, int(buf.flatten_len), buf.normalize_images
    ('zstd/-3', 28224, False)
    """


class CompressedDictReplayBuffer(_CompressedReplayMixin, DictReplayBuffer):
    """SB3's ``DictReplayBuffer``, compressed: one frame store per key (arguments as :class:`CompressedReplayBuffer`).

    Examples
    --------
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"image": spaces.Box(0, 255, (2, 2), np.uint8),
    ...                      "vector": spaces.Box(0, 255, (3,), np.uint8)})
    >>> buf = CompressedDictReplayBuffer(6, space, spaces.Discrete(2), "cpu", n_envs=2,
    ...                                  compression_method="rle")
    >>> int(buf.flatten_configs["image"]["shape"])
    4
    """


class CompressedNStepReplayBuffer(_CompressedReplayMixin, NStepReplayBuffer):
    """SB3's ``NStepReplayBuffer`` (n-step returns at sampling time), compressed.

    ``n_steps`` and ``gamma`` are keyword-only, as in SB3; sb3-extra-buffers' arguments
    and the store options are keywords here (see :class:`CompressedReplayBuffer`).
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, *, n_steps: int = 3, gamma: float = 0.99,
                 **options: Any) -> None:
        self.n_steps = n_steps
        self.gamma = gamma
        super().__init__(buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
                         handle_timeout_termination, **options)

    def _sample_plan(self, batch_inds: np.ndarray) -> list[tuple[int, np.ndarray]]:
        # the next-obs rows depend on dones; SB3 reads them first, and the obs rows ride along
        return [(OBS, batch_inds)]
