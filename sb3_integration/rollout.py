"""Drop-in replacements for SB3's ``RolloutBuffer`` and ``DictRolloutBuffer``.

A rollout is written once, read ``n_epochs`` times in a random order, and thrown
away by ``reset()`` at the start of the next rollout. That shapes the design,
which differs from the replay side on purpose:

* **Each distinct frame is stored once.** Per env, the observations are a stream
  of *units* (the frames of a frame stack, or whole observations when the data
  does not stack). An observation is ``n`` unit ids; when its first ``n - c``
  units equal the previous observation's last ``n - c`` (checked every time),
  only its ``c`` newest units are appended. Leading all-zero units (the padding
  ``VecFrameStack`` writes after a reset) point at one shared zero unit, which
  is also what unwritten slots read.
* **Reads gather from one flat array of units.** ``get()`` returns each batch
  with one ``np.take`` of its unit ids into a fresh array that becomes the torch
  tensor (``torch.as_tensor`` shares it). SB3 instead copies the whole rollout in
  ``swap_and_flatten`` and copies every batch twice (fancy index, then
  ``th.tensor``); here ``swap_and_flatten`` only reorders the small id table.
* **No allocation per reset** (without a codec). The unit arena and id table are
  allocated once (untouched pages cost nothing) and reused, so a rollout does
  not page-fault fresh memory (FACTS.md: 0.4 GB/s on these VMs).
* **A codec is optional, default off.** With ``compression_method="none"`` units
  are written straight into the arena, which every rollout reuses. With a codec,
  each env's units are staged raw until a chunk of ``chunk_len`` is full, then
  encoded into one :class:`~chunkstore.ChunkedArray`; the first read decodes
  them into an arena, which ``reset()`` drops, so only compressed chunks (and
  the stage) are held while the next rollout is collected. ``get()`` reads the
  whole rollout ``n_epochs`` times, so the decoded units are resident during
  ``get()`` either way: a codec cannot lower the peak, and it costs encode and
  decode time. Measured (8 envs x 128 steps of (4, 84, 84) real Pong and MsPacman
  frames, fill + compute_returns + 4 epochs of get(256), configurations
  interleaved in one process, torch on 1 thread, where SB3 is fastest): SB3
  holds 28.9 MB of observations (and copies them all in ``swap_and_flatten``);
  "none" holds 7.5 MB at 0.58-0.76x SB3's time; lz4-block/zstd1/zstd3 hold
  1.4-1.8 MB (0.3-0.6 MB of chunks plus the stage) at 0.77-1.07x. With torch's
  default 2 threads on a busy 2-core VM, SB3's per-batch ``th.tensor`` copy is
  3-5x slower and every variant here is <= 0.36x SB3.

Observations are returned exactly as SB3 2.9 returns them: in the observation
space's dtype (SB3 2.9's RolloutBuffer stores and returns the space's dtype, not
float32), bit for bit, with the same random-number use (SB3's own ``get()`` runs
unchanged; only ``reset``, ``add`` and ``_get_samples`` are replaced).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.type_aliases import DictRolloutBufferSamples, RolloutBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore import ChunkedArray
from sb3_integration._closing import ClosableBuffer
from sb3_integration._common import DEFAULT_CHUNK_LEN, coerce_obs, pack_array, unpack_array

__all__ = [
    "DEFAULT_ROLLOUT_COMPRESSION",
    "CompressedDictRolloutBuffer",
    "CompressedRolloutBuffer",
    "RolloutObservations",
]

#: codec of the rollout buffers (see the module docstring for why it is "none")
DEFAULT_ROLLOUT_COMPRESSION = "none"
#: a stack axis is used only when one unit is at least this large; smaller units
#: cost more in ids and bookkeeping than sharing them saves
_MIN_UNIT_BYTES = 256
#: adds tried for stack-shift detection before the store stops looking
_DETECT_ADDS = 16


# == how an observation splits into units ==========================================


class _Layout:
    """An observation of ``obs_shape`` as ``n`` units of ``unit_shape`` along ``axis``.

    ``axis`` is 0 (channel-first stacks), -1 (channel-last stacks) or None
    (the whole observation is one unit). The choice follows SB3's image
    convention (the smallest axis is the channel axis); whether frames are
    really shared is checked on the data, so a wrong guess costs space only.
    """

    def __init__(self, obs_shape: tuple[int, ...], dtype: np.dtype, stack: bool) -> None:
        self.obs_shape = obs_shape
        self.axis: int | None = None
        if stack and len(obs_shape) == 3 and dtype.kind in "biu":
            smallest = int(np.argmin(obs_shape))
            axis = {0: 0, 2: -1}.get(smallest)
            unit_bytes = int(np.prod(obs_shape)) // obs_shape[smallest] * dtype.itemsize
            if axis is not None and obs_shape[smallest] > 1 and unit_bytes >= _MIN_UNIT_BYTES:
                self.axis = axis
        if self.axis is None:
            self.n, self.unit_shape = 1, obs_shape
        elif self.axis == 0:
            self.n, self.unit_shape = obs_shape[0], obs_shape[1:]
        else:
            self.n, self.unit_shape = obs_shape[-1], obs_shape[:-1]

    def units(self, obs: np.ndarray) -> np.ndarray:
        """``(m, *obs_shape)`` -> ``(m, n, *unit_shape)``, a view."""
        if self.axis is None:
            return obs[:, None]
        if self.axis == 0:
            return obs
        return np.moveaxis(obs, -1, 1)

    def gather(self, arena: np.ndarray, ids: np.ndarray, out: np.ndarray) -> None:
        """``out[i] = observation made of units arena[ids[i]]``; ``out`` is C-contiguous."""
        flat = ids.reshape(-1)
        if self.axis == -1:
            tmp = np.take(arena, flat, axis=0, mode="clip")
            rows = out.reshape(-1, *self.obs_shape)
            np.copyto(np.moveaxis(rows, -1, 1), tmp.reshape(-1, self.n, *self.unit_shape))
        else:
            # mode="clip": ids are always valid, and "raise" would buffer the output
            np.take(arena, flat, axis=0, out=out.reshape(len(flat), *self.unit_shape), mode="clip")


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per leading index, whether ``a[i]`` and ``b[i]`` are equal (integer data: identical bits).

    A plain ``==`` on the bytes: numpy's SIMD uint8 compare beats viewing rows as
    uint64 words here (14 vs 24 us for 8 envs x 3 frames of 84x84).
    """
    return np.equal(a, b).reshape(len(a), -1).all(axis=1)


# == compressed unit streams (with a codec) ===========================================


class _CompressedStreams:
    """Per-env unit streams as compressed chunks of ``chunk_len`` units.

    Each env's chunk being filled is staged raw (one small reusable array) and
    written to the :class:`~chunkstore.ChunkedArray` only when whole, so every
    chunk is encoded once, straight from the stage, with one call per chunk
    rather than one per ``add()``. Env ``e``'s stream occupies the chunk-aligned
    region ``[e * span, (e + 1) * span)`` of the array.
    """

    def __init__(self, n_envs: int, cap: int, n: int, unit_shape: tuple[int, ...], dtype: np.dtype,
                 codec: str, chunk_len: int) -> None:  # fmt: skip
        self.L = chunk_len
        self.span = -(-cap // chunk_len) * chunk_len
        self.chunks = ChunkedArray(
            n_envs * self.span, unit_shape, dtype, chunk_len=chunk_len, codec=codec, cache=0,
            name="observations.units",
        )  # fmt: skip
        self.stage = np.zeros((n_envs, chunk_len + n, *unit_shape), dtype)
        self.staged = np.zeros(n_envs, np.intp)  # units waiting in the stage
        self.flushed = np.zeros(n_envs, np.intp)  # units in sealed chunks
        self.decoded = np.zeros(n_envs, np.intp)  # sealed units already decoded into the arena

    def clear(self) -> None:
        self.chunks.clear()
        for a in (self.staged, self.flushed, self.decoded):
            a.fill(0)

    def append(self, units: np.ndarray, keep: np.ndarray) -> None:
        """Append ``units[e, keep[e]:]`` to each env's stream."""
        n = units.shape[1]
        e_idx, j_idx = np.nonzero(np.arange(n) >= keep[:, None])
        self.stage[e_idx, self.staged[e_idx] + j_idx - keep[e_idx]] = units[e_idx, j_idx]
        self.staged += n - keep
        for e in np.flatnonzero(self.staged >= self.L):
            while self.staged[e] >= self.L:
                self.chunks.write(e * self.span + int(self.flushed[e]), self.stage[e, : self.L])
                rest = int(self.staged[e]) - self.L
                self.stage[e, :rest] = self.stage[e, self.L : self.L + rest]
                self.staged[e], self.flushed[e] = rest, self.flushed[e] + self.L

    def decode_into(self, arena: np.ndarray, bases: np.ndarray) -> None:
        """Make every unit present in ``arena`` (env ``e``'s unit ``k`` at ``bases[e] + k``)."""
        codec, L = self.chunks.codec, self.L
        for e, b in enumerate(bases):
            for k in range(int(self.decoded[e]), int(self.flushed[e]), L):
                chunk = (e * self.span + k) // L
                codec.decode(self.chunks.chunk_bytes(chunk), out=arena[b + k : b + k + L])
            self.decoded[e] = f = self.flushed[e]
            arena[b + f : b + f + self.staged[e]] = self.stage[e, : self.staged[e]]

    @property
    def cbytes(self) -> int:
        return self.chunks.cbytes + self.stage.nbytes

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["stage"] = pack_array(self.stage)
        state["decoded"] = np.zeros_like(self.decoded)  # the arena is not pickled
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["stage"] = unpack_array(state["stage"])
        self.__dict__.update(state)


# == the store of one observation key ==============================================


class _UnitStore:
    """Per-env streams of units for a rollout of ``buffer_size`` steps, ids per observation.

    Unit 0 of the arena is all zeros; env ``e``'s stream starts at
    ``bases[e]`` and has room for ``buffer_size * n`` units, the worst case
    (nothing shared).
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        dtype: Any,
        buffer_size: int,
        n_envs: int,
        *,
        compression_method: str,
        chunk_len: int,
        dedup: bool,
    ) -> None:
        self.obs_shape, self.dtype = tuple(obs_shape), np.dtype(dtype)
        self.buffer_size, self.n_envs = buffer_size, n_envs
        self.compression_method, self.chunk_len = compression_method, chunk_len
        self.layout = _Layout(self.obs_shape, self.dtype, dedup)
        n = self.layout.n
        self.cap = buffer_size * n
        self.bases = 1 + np.arange(n_envs, dtype=np.intp) * self.cap
        self.ids = np.zeros((buffer_size, n_envs, n), np.intp)
        self.ptr = np.zeros(n_envs, np.intp)
        self.shift: int | None = None  # the stack shift found on the data; 0: none found
        self._tries = 0
        # the last observation's units, and a spare of the same shape: each add() copies the
        # caller's observation into the spare once, then compares and stores from that warm copy
        self.last = np.zeros((n_envs, n, *self.layout.unit_shape), self.dtype) if n > 1 else None
        self._spare: np.ndarray | None = None
        self.has_last = np.zeros(n_envs, bool)
        self.last_pos = 0  # the step whose ids ``last`` describes
        self.streams: _CompressedStreams | None = None
        if compression_method != "none":
            self.streams = _CompressedStreams(
                n_envs,
                self.cap,
                n,
                self.layout.unit_shape,
                self.dtype,
                compression_method,
                chunk_len,
            )
        self._arena: np.ndarray | None = None

    @property
    def arena(self) -> np.ndarray:
        if self._arena is None:  # np.zeros maps pages lazily: only units written are touched
            self._arena = np.zeros(
                (1 + self.n_envs * self.cap, *self.layout.unit_shape), self.dtype
            )
        return self._arena

    def clear(self) -> None:
        self.ids.fill(0)
        self.ptr.fill(0)
        self.has_last.fill(False)
        if self.streams is not None:
            self.streams.clear()
            self._arena = None  # with a codec, only compressed units stay while collecting

    # -- writing -------------------------------------------------------------------
    def append(self, pos: int, obs: np.ndarray) -> None:
        """Store ``obs`` (``(n_envs, *obs_shape)``, our dtype, validated) as step ``pos``."""
        units = self.layout.units(obs)
        n = self.layout.n
        if self.last is not None:
            if self._spare is None:
                self._spare = np.empty_like(self.last)
            np.copyto(self._spare, units)
            units = self._spare
        c, shared = self._shared(units)
        ids, last_ids = self.ids[pos], self.ids[self.last_pos]
        if c and shared.all():  # the common case: every env appends its c newest units
            ids[:, : n - c] = last_ids[:, c:]
            ids[:, n - c :] = (self.bases + self.ptr)[:, None] + np.arange(c)
            keep = np.full(self.n_envs, n - c)
            new = None
        else:
            keep = np.where(shared, n - c, 0)  # leading units that need no new storage
            fresh = np.flatnonzero(~shared)
            if n > 1:  # whole observations are rarely all zeros: not worth a pass over them
                keep[fresh] = self._zero_prefix(units[fresh])
            j = np.arange(n)
            ids[...] = (self.bases + self.ptr - keep)[:, None] + j
            new = j >= keep[:, None]
            if c:
                ids[~new] = np.where(shared[:, None], last_ids[:, np.minimum(j + c, n - 1)], 0)[
                    ~new
                ]
            else:
                ids[~new] = 0
        self._write(units, keep, ids, new)
        self.ptr += n - keep
        if self.last is not None:
            self._spare, self.last = self.last, units
            self.has_last.fill(True)
            self.last_pos = pos

    def _zero_prefix(self, units: np.ndarray) -> np.ndarray:
        """Per row of ``units`` (``(m, n, ...)``, integer data), how many leading units are all zero.

        They are served by the shared zero unit: ``VecFrameStack`` pads with
        zeros after a reset, and unwritten slots read the same unit.
        """
        nonzero = units.reshape(*units.shape[:2], -1).any(axis=2)
        return np.cumprod(~nonzero, axis=1).sum(axis=1)

    def _shared(self, units: np.ndarray) -> tuple[int, np.ndarray]:
        """The shift ``c`` and, per env, whether ``units[e, :n-c]`` equals the last obs' ``[c:]``."""
        n = self.layout.n
        none = np.zeros(self.n_envs, bool)
        if self.last is None or not self.has_last.any() or self.shift == 0:
            return 0, none
        for c in [self.shift] if self.shift else range(1, n):
            eq = _rows_equal(units[:, : n - c], self.last[:, c:]) & self.has_last
            if self.shift is None:
                # a pair whose units are all equal proves no particular shift
                eq &= ~_rows_equal(units[:, 1:], units[:, :-1])
            if eq.any():
                self.shift = c
                return c, eq
        if self.shift is None:
            self._tries += 1
            if self._tries >= _DETECT_ADDS:
                self.shift = 0
        return (self.shift or 0), none

    def _write(
        self, units: np.ndarray, keep: np.ndarray, ids: np.ndarray, new: np.ndarray | None
    ) -> None:
        """Append ``units[e, keep[e]:]`` to each env's stream (``ids`` already assigned).

        ``new`` marks the new units; None when every env appends the same number.
        """
        if self.streams is None:
            if new is None:
                k = int(keep[0])
                self.arena[ids[:, k:].reshape(-1)] = units[:, k:].reshape(
                    -1, *self.layout.unit_shape
                )
            else:
                self.arena[ids[new]] = units[new]
            return
        self.streams.append(units, keep)

    # -- reading -------------------------------------------------------------------
    def materialize(self) -> np.ndarray:
        """The arena, with every written unit decoded into it."""
        arena = self.arena
        if self.streams is not None:
            self.streams.decode_into(arena, self.bases)
        return arena

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """Observations for an id array ``(*S, n)`` -> fresh ``(*S, *obs_shape)``."""
        out = np.empty((*ids.shape[:-1], *self.obs_shape), self.dtype)
        if out.size:
            self.layout.gather(self.materialize(), ids, out)
        return out

    # -- sizes -----------------------------------------------------------------------
    @property
    def units_written(self) -> int:
        return int(self.ptr.sum())

    @property
    def cbytes(self) -> int:
        """Bytes held for the rollout: units (compressed, or raw in the arena) and the id table."""
        unit_bytes = int(np.prod(self.layout.unit_shape)) * self.dtype.itemsize
        if self.streams is None:
            data = (1 + self.units_written) * unit_bytes
        else:
            data = self.streams.cbytes
        last = self.last.nbytes if self.last is not None else 0
        return data + self.ids.nbytes + last

    def info(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "obs_shape": self.obs_shape,
            "dtype": str(self.dtype),
            "layout": "whole observations"
            if lay.axis is None
            else f"{lay.n} units of {lay.unit_shape} on axis {lay.axis}",
            "shift": self.shift,
            "units_written": self.units_written,
            "codec": self.compression_method,
            "chunk_len": self.chunk_len if self.streams is not None else None,
            "nbytes": self.buffer_size
            * self.n_envs
            * int(np.prod(self.obs_shape))
            * self.dtype.itemsize,
            "cbytes": self.cbytes,
        }

    # -- pickling: written units only, packed -----------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arena"] = state["_spare"] = None
        # ids stay a plain array: the observations view shares this very object
        if self.streams is None:
            state["units"] = [
                pack_array(self.arena[b : b + p]) for b, p in zip(self.bases, self.ptr, strict=True)
            ]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        units = state.pop("units", None)
        self.__dict__.update(state)
        for b, u in zip(self.bases, units or (), strict=False):
            u = unpack_array(u)
            self.arena[b : b + len(u)] = u


# == the ndarray-like view =========================================================


class RolloutObservations:
    """Read-only, ndarray-like view of a rollout's observations.

    Shape ``(buffer_size, n_envs, *obs_shape)`` until SB3's ``get()`` flattens it
    to ``(buffer_size * n_envs, *obs_shape)``; dtype is the observation space's,
    as in SB3 2.9. Indexing, ``np.asarray``, ufuncs (``view == x``),
    ``swapaxes``/``reshape`` of the leading axes work; reads are copies.
    Writes go through the buffer's ``add()``.
    """

    def __init__(
        self, store: _UnitStore, ids: np.ndarray, item_shape: tuple[int, ...] | None = None
    ):
        self._store = store
        self._ids = ids
        self._item_shape = store.obs_shape if item_shape is None else tuple(item_shape)

    shape = property(lambda self: (*self._ids.shape[:-1], *self._item_shape))
    dtype = property(lambda self: self._store.dtype)
    ndim = property(lambda self: len(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    size = property(lambda self: int(np.prod(self.shape)))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"RolloutObservations(shape={self.shape}, dtype={self.dtype})"

    def gather(self, index: Any) -> np.ndarray:
        """``self[index]`` for an index on the first axis: the fast path of ``get()``."""
        ids = self._ids[index]
        return self._store.gather(ids).reshape(*ids.shape[:-1], *self._item_shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        nlead = self._ids.ndim - 1
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - len(key) + 1) + key[i + 1 :]
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for an array of {self.ndim} dimensions")
        lead, rest = key[:nlead], key[nlead:]
        ids = self._ids[(*lead, slice(None))]
        out = self._store.gather(ids).reshape(*ids.shape[:-1], *self._item_shape)
        return out[(slice(None),) * (ids.ndim - 1) + rest] if rest else out

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("rollout observations are read-only; the buffer's add() writes them")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.gather(slice(None))
        return out if dtype is None else out.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(np.asarray(x) if isinstance(x, RolloutObservations) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self.gather(i)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return np.asarray(self).astype(dtype, copy=copy)

    def copy(self) -> np.ndarray:
        return np.asarray(self)

    def swapaxes(self, a: int, b: int) -> RolloutObservations:
        """Swap two leading (per-observation) axes; what SB3's ``swap_and_flatten`` calls."""
        nlead = self._ids.ndim - 1
        a, b = (x % self.ndim for x in (a, b))
        if a >= nlead or b >= nlead:
            raise ValueError(
                "only the leading (step, env) axes of rollout observations can be swapped"
            )
        return RolloutObservations(self._store, self._ids.swapaxes(a, b), self._item_shape)

    def reshape(self, *shape: Any) -> RolloutObservations:
        """Reshape the leading axes (the item shape may change only by its own reshape)."""
        shape = tuple(shape[0]) if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        count = int(np.prod(self._ids.shape[:-1]))
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1]))
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        for k in range(len(shape) + 1):
            if int(np.prod(shape[:k])) == count and int(np.prod(shape[k:])) * count == self.size:
                ids = self._ids.reshape(*shape[:k], self._ids.shape[-1])
                return RolloutObservations(self._store, ids, shape[k:])
        raise ValueError(f"cannot reshape rollout observations of shape {self.shape} into {shape}")


# == validation ======================================================================


def _check_obs(
    obs: Any, space: spaces.Space, obs_shape: tuple[int, ...], n_envs: int, key: str
) -> np.ndarray:
    """``obs`` as ``(n_envs, *obs_shape)`` in the space's dtype: the replay buffers' policy.

    Discrete observations of the right size are reshaped, as SB3 does.
    """
    shape = (n_envs, *obs_shape)
    return coerce_obs(
        obs, shape, np.dtype(space.dtype), key, reshape=isinstance(space, spaces.Discrete)
    )


# == the buffers =====================================================================


class _CompressedRolloutMixin(ClosableBuffer):
    """Store options and observation storage shared by both rollout buffers."""

    buffer_size: int
    n_envs: int
    device: th.device

    def _init_options(self, compression_method: str | None, chunk_len: int, dedup: bool) -> None:
        method = (
            DEFAULT_ROLLOUT_COMPRESSION if compression_method is None else str(compression_method)
        )
        if method != "none":  # a bad codec name fails here, not at the first add()
            ChunkedArray(1, (), np.uint8, codec=method, cache=0)
        if int(chunk_len) < 1:
            raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
        self.compression_method, self.chunk_len, self.dedup = method, int(chunk_len), bool(dedup)

    def _new_store(self, obs_shape: tuple[int, ...], dtype: Any) -> _UnitStore:
        return _UnitStore(
            obs_shape, dtype, self.buffer_size, self.n_envs,
            compression_method=self.compression_method, chunk_len=self.chunk_len, dedup=self.dedup,
        )  # fmt: skip

    def _obs_tensor(self, obs: np.ndarray) -> th.Tensor:
        # obs is a fresh array nobody else holds: share it instead of copying (SB3's to_torch copies)
        return th.as_tensor(obs, device=self.device)

    def _check_not_full(self, pos: int) -> None:
        if pos >= self.buffer_size:
            raise IndexError(
                f"the rollout buffer holds {self.buffer_size} steps and is full; call reset()"
            )


class CompressedRolloutBuffer(_CompressedRolloutMixin, RolloutBuffer):
    """SB3's ``RolloutBuffer`` with each distinct observation frame stored once.

    Same constructor arguments as SB3's, plus keyword-only store options.
    ``get()`` yields bit-identical ``RolloutBufferSamples`` to SB3's for the same
    ``np.random`` state (observations in the space's dtype, as SB3 2.9).

    Parameters
    ----------
    compression_method
        sb3-extra-buffers' codec names (``"zstd3"``, ``"lz4-block"``; NB ``"zstd-3"``
        is level -3) or ``"none"`` (default). A codec keeps only compressed chunks
        while a rollout is collected, but ``get()`` needs the whole rollout decoded,
        so it saves nothing at the peak and costs time (see the module docstring).
    dtypes
        Accepted for sb3-extra-buffers compatibility and ignored: observations are
        always stored losslessly in the space's dtype.
    chunk_len
        Units (frames) per compressed chunk, with a codec; each env stages one
        chunk raw.
    dedup_frames
        Share the frames of stacked observations (True) or store whole observations.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = CompressedRolloutBuffer(
    ...     128, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), device="cpu", n_envs=8
    ... )
    >>> buf.observations.shape, buf.observations.dtype
    ((128, 8, 4, 84, 84), dtype('uint8'))
    """

    observations: RolloutObservations  # type: ignore[assignment]

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        *,
        compression_method: str | None = None,
        dtypes: Any = None,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        dedup_frames: bool = True,
    ) -> None:
        if isinstance(observation_space, spaces.Dict):
            raise TypeError("a Dict observation space needs CompressedDictRolloutBuffer")
        self._init_options(compression_method, chunk_len, dedup_frames)
        self._store: _UnitStore | None = None
        super().__init__(
            buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs
        )

    def reset(self) -> None:
        if self._store is None:
            self._store = self._new_store(self.obs_shape, self.observation_space.dtype)
        else:
            self._store.clear()
        self.observations = RolloutObservations(self._store, self._store.ids)
        _reset_fields(self)

    @property
    def obs_cbytes(self) -> int:
        """Bytes this buffer holds for observations (SB3 holds ``observations.nbytes``)."""
        assert self._store is not None
        return self._store.cbytes

    def storage_info(self) -> dict[str, Any]:
        """How observations are stored: layout, units written, codec, ``nbytes`` vs ``cbytes``."""
        assert self._store is not None
        return self._store.info()

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
    ) -> None:
        self._check_not_full(self.pos)
        obs = _check_obs(obs, self.observation_space, self.obs_shape, self.n_envs, "observations")
        assert self._store is not None
        _write_fields(self, action, reward, episode_start, value, log_prob)
        self._store.append(self.pos, obs)
        _advance(self)

    def _get_samples(
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> RolloutBufferSamples:
        return RolloutBufferSamples(
            self._obs_tensor(self.observations.gather(batch_inds)),
            *_sample_fields(self, batch_inds),
        )


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

    observations: dict[str, RolloutObservations]  # type: ignore[assignment]

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        *,
        compression_method: str | None = None,
        dtypes: Any = None,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        dedup_frames: bool = True,
    ) -> None:
        self._init_options(compression_method, chunk_len, dedup_frames)
        self._stores: dict[str, _UnitStore] = {}
        super().__init__(
            buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs
        )

    def reset(self) -> None:
        if not self._stores:
            self._stores = {
                key: self._new_store(shape, self.observation_space[key].dtype)
                for key, shape in self.obs_shape.items()
            }
        for store in self._stores.values():
            store.clear()
        self.observations = {key: RolloutObservations(s, s.ids) for key, s in self._stores.items()}
        _reset_fields(self)

    @property
    def obs_cbytes(self) -> int:
        """Bytes this buffer holds for observations, all keys."""
        return sum(s.cbytes for s in self._stores.values())

    def storage_info(self) -> dict[str, dict[str, Any]]:
        """:meth:`CompressedRolloutBuffer.storage_info` per key."""
        return {key: s.info() for key, s in self._stores.items()}

    def add(  # type: ignore[override]
        self,
        obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
    ) -> None:
        self._check_not_full(self.pos)
        missing = set(self._stores) - set(obs)
        if missing:
            raise ValueError(f"observation dict lacks key(s) {sorted(missing)}")
        # every key is checked before any is written, so a bad key leaves the buffer unchanged
        checked = {
            key: _check_obs(
                obs[key], self.observation_space[key], self.obs_shape[key], self.n_envs, key
            )
            for key in self._stores
        }
        _write_fields(self, action, reward, episode_start, value, log_prob)
        for key, store in self._stores.items():
            store.append(self.pos, checked[key])
        _advance(self)

    def _get_samples(  # type: ignore[override]
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> DictRolloutBufferSamples:
        return DictRolloutBufferSamples(
            {key: self._obs_tensor(v.gather(batch_inds)) for key, v in self.observations.items()},
            *_sample_fields(self, batch_inds),
        )


# == SB3's own handling of the non-observation fields ==================================
# Written out (rather than calling SB3's reset/add) because those allocate and write
# `observations`; each line matches SB3 2.9 so that every dtype and value is the same.
# add() writes these fields before the observations: if one of them is malformed, the
# error comes before the observation store changes, and `pos` has not moved (SB3 too
# leaves such a half-written row to be overwritten by the next add()).


def _reset_fields(buf: RolloutBuffer) -> None:
    shape = (buf.buffer_size, buf.n_envs)
    buf.actions = np.zeros((*shape, buf.action_dim), dtype=buf.action_space.dtype)
    for name in ("rewards", "returns", "episode_starts", "values", "log_probs", "advantages"):
        setattr(buf, name, np.zeros(shape, dtype=np.float32))
    buf.generator_ready = False
    buf.pos, buf.full = 0, False


def _write_fields(
    buf: RolloutBuffer, action: np.ndarray, reward: np.ndarray, episode_start: np.ndarray,
    value: th.Tensor, log_prob: th.Tensor,
) -> None:  # fmt: skip
    if len(log_prob.shape) == 0:
        log_prob = log_prob.reshape(-1, 1)
    action = action.reshape((buf.n_envs, buf.action_dim))
    buf.actions[buf.pos] = np.array(action)
    buf.rewards[buf.pos] = np.array(reward)
    buf.episode_starts[buf.pos] = np.array(episode_start)
    buf.values[buf.pos] = value.clone().cpu().numpy().flatten()
    buf.log_probs[buf.pos] = log_prob.clone().cpu().numpy()


def _advance(buf: RolloutBuffer) -> None:
    buf.pos += 1
    if buf.pos == buf.buffer_size:
        buf.full = True


def _sample_fields(buf: RolloutBuffer, batch_inds: np.ndarray) -> list[th.Tensor]:
    data = (
        # Cast to float32 (backward compatible), as SB3
        buf.actions[batch_inds].astype(np.float32, copy=False),
        buf.values[batch_inds].flatten(),
        buf.log_probs[batch_inds].flatten(),
        buf.advantages[batch_inds].flatten(),
        buf.returns[batch_inds].flatten(),
    )
    return [buf.to_torch(x) for x in data]
