"""Helpers shared by the compressed SB3 buffers (replay and rollout).

* :class:`ObservationView` -- a read-only, ndarray-like stand-in for SB3's
  ``buffer.observations`` arrays, backed by any ``reader(rows, envs)``.
* :func:`coerce_obs` -- the observation policy of ``add()``: what SB3's
  assignment accepts (with SB3's errors where it fails), minus what it would
  store changed (see its docstring).
* :func:`pack_array` / :func:`unpack_array` -- small arrays (actions, rewards,
  descriptors) compressed for pickling.
* The default store options, as module constants.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from chunkstore import get_codec
from chunkstore.array import DEFAULT_CACHE_BYTES as CORE_CACHE_BYTES
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from chunkstore.casting import lossless_cast
from sb3_integration.errors import DataLossError, UsageTypeError, usage_error

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "PRESETS",
    "STORE_OPTIONS",
    "ObservationView",
    "StoreOptions",
    "check_positive_or_none",
    "coerce_obs",
    "device_budget",
    "lossless_obs",
    "pack_array",
    "same_rows",
    "sb3_obs",
    "stack_axis_order",
    "subspaces",
    "unpack_array",
]

#: the store defaults, shared with the core (chosen by measurement; see the README):
#: codec name in sb3-extra-buffers' grammar (note that "zstd-3" means zstd level -3
#: there) -- zstd with a dictionary trained on the buffer's first frames -- and frames
#: per chunk. Small chunks keep a random read cheap; the dictionary keeps them small.
DEFAULT_COMPRESSION = DEFAULT_CODEC
#: budget of the decoded-chunk cache shared by a buffer's arrays: off (see chunkstore.array)
DEFAULT_CACHE_BYTES = CORE_CACHE_BYTES

#: named store settings for a buffer's ``preset=`` argument. "fast" is the default;
#: "compact" trades sampling speed for memory (longer chunks compress better but a
#: random read decodes more); measured figures are in the README.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"chunk_len": DEFAULT_CHUNK_LEN, "compression_method": DEFAULT_COMPRESSION},
    "compact": {"chunk_len": 32, "compression_method": "zstd3+dict"},
}


@dataclass(frozen=True)
class StoreOptions:
    """How a buffer stores its observations, validated when the buffer is built.

    Built by :meth:`resolve` from a buffer's keyword arguments: an explicit
    ``compression_method``/``chunk_len`` wins over the ``preset``'s.
    """

    compression_method: Any  # a codec name or a Codec
    chunk_len: int
    cache_bytes: int
    tier: Any  # a Tier, a zero-argument factory returning one, or None (RAM)
    threads: int | None
    buffer_device: Any = None  # a torch.device: observation frames live and decode there; None: host
    heap_bytes: int | None = None  # with buffer_device: the device bytes of frame records (None: default)

    @classmethod
    def resolve(cls, *, preset: str | None, compression_method: Any, chunk_len: Any, cache_bytes: Any,
                tier: Any, threads: Any, buffer_device: Any = None, heap_bytes: Any = None) -> StoreOptions:
        from chunkstore import Tier

        base = PRESETS.get(preset or "fast")
        if base is None:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        method = base["compression_method"] if compression_method is None else compression_method
        get_codec(method)  # a bad name fails here, listing the valid forms
        length = base["chunk_len"] if chunk_len is None else chunk_len
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"chunk_len must be an integer >= 1, got {chunk_len!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an integer >= 0, got {cache_bytes!r}")
        if tier is not None and not isinstance(tier, Tier) and not callable(tier):
            raise TypeError(f"tier must be a chunkstore Tier (MemoryTier, DiskTier, HybridTier, "
                            f"DeviceTier), a zero-argument factory returning one, or None; got {tier!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                    or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")
        device, heap = _device_options(buffer_device, heap_bytes, tier)
        return cls(method, int(length), int(cache_bytes), tier, None if threads is None else int(threads),
                   device, heap)

    @classmethod
    def from_kwargs(cls, compression_method: Any, kwargs: dict[str, Any],
                    defaults: dict[str, Any] | None = None, *,
                    owner: str = "buffer") -> tuple[StoreOptions, bool, str]:
        """The replay buffers' keyword-only store options: ``(options, frame_dedup, small_arrays)``.

        ``kwargs`` may hold :data:`STORE_OPTIONS` only: any other is a TypeError worded
        as Python words it for ``owner``'s ``__init__`` (SB3's message for the same
        keyword), listing the valid ones; ``defaults`` replaces their defaults.
        """
        unknown = [key for key in kwargs if key not in STORE_OPTIONS]
        if unknown:
            raise UsageTypeError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}",
                                 f"the store options are {list(STORE_OPTIONS)}; sb3-extra-buffers' arguments "
                                 "are named dtypes, normalize_images, compression_method, compression_kwargs, "
                                 "decompression_kwargs, output_dtype")
        opt = {**STORE_OPTIONS, **(defaults or {}), **kwargs}
        options = cls.resolve(preset=opt["preset"], compression_method=compression_method,
                              chunk_len=opt["chunk_len"], cache_bytes=opt["cache_bytes"], tier=opt["tier"],
                              threads=opt["threads"], buffer_device=opt["buffer_device"],
                              heap_bytes=opt["heap_bytes"])
        return options, check_frame_dedup(opt["frame_dedup"]), opt["small_arrays"]


#: the keyword-only store options of the buffers, with their defaults
STORE_OPTIONS: dict[str, Any] = {"preset": None, "chunk_len": None, "cache_bytes": DEFAULT_CACHE_BYTES,
                                 "tier": None, "frame_dedup": True, "threads": None, "small_arrays": "auto",
                                 "buffer_device": None, "heap_bytes": None}


def check_frame_dedup(value: Any) -> bool:
    """``frame_dedup`` as a bool; TypeError for anything else (``"no"`` is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"frame_dedup must be True or False, got {value!r}")
    return bool(value)


def check_positive_or_none(name: str, value: Any) -> None:
    """ValueError unless ``value`` is None or a positive int (not a bool)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


def _device_options(buffer_device: Any, heap_bytes: Any, tier: Any) -> tuple[Any, int | None]:
    """``buffer_device`` as a torch.device (None: host) and ``heap_bytes``, checked now."""
    check_positive_or_none("heap_bytes", heap_bytes)
    if buffer_device is None:
        if heap_bytes is not None:
            raise ValueError("heap_bytes is the device budget of buffer_device: pass buffer_device too "
                             "(observations are in host memory without it)")
        return None, None
    import torch

    try:
        device = torch.device(buffer_device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"buffer_device must name a torch device ('cuda', 'cuda:1', 'cpu'), got "
                         f"{buffer_device!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"buffer_device={buffer_device!r}: CUDA is not available here; use buffer_device='cpu' "
                         "or None (host)")
    from sb3_integration.device_stacks import device_unusable

    why = device_unusable(device)
    if why is not None:
        raise ValueError(f"buffer_device={buffer_device!r}: torch cannot use this device here ({why}); use "
                         "'cuda', 'cpu' or None (host)")
    if tier is not None:
        raise ValueError("tier places chunks in host memory or on disk; with buffer_device the frames live in "
                         "device memory (heap_bytes caps it, older segments spill to host RAM): pass one of them")
    return device, None if heap_bytes is None else int(heap_bytes)


def device_budget(options: StoreOptions) -> Any:
    """The :class:`~chunkstore.device.heap.DeviceBudget` a buffer's frame stores share (None: host frames).

    ``heap_bytes``, or by default half of a CUDA device's free memory at construction
    (no limit on other devices).
    """
    if options.buffer_device is None:
        return None
    import torch

    from chunkstore.device.heap import DeviceBudget, default_budget

    limit = options.heap_bytes if options.heap_bytes is not None else default_budget(torch, options.buffer_device)
    return DeviceBudget(limit)


def subspaces(space: spaces.Space) -> dict[Any, spaces.Space]:
    """A buffer's observation keys and their spaces (``None`` for a non-Dict space)."""
    if isinstance(space, spaces.Dict):
        return dict(space.spaces)
    return {None: space}


def same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Two index arrays with the same entries (SB3 passes the same arrays to each read of a batch)."""
    return a is b or (a.shape == b.shape and np.array_equal(a, b))


Reader = Callable[[np.ndarray, np.ndarray], np.ndarray]
Writer = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


# -- the ndarray-like view ---------------------------------------------------------------
def _axis_index(i: Any, n: int, axis: int) -> tuple[np.ndarray, bool]:
    """An index on one axis of length ``n`` as (int64 array, is_advanced), numpy's rules."""
    if isinstance(i, slice):
        return np.arange(*i.indices(n), dtype=np.int64), False
    arr = np.asarray(i)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise IndexError(f"boolean index of shape {arr.shape} does not match axis {axis} of length {n}")
        return np.flatnonzero(arr), True
    if arr.size == 0:
        return arr.astype(np.int64), True
    if arr.dtype.kind not in "iu":
        raise IndexError(f"only integers, slices, ellipsis and integer or boolean arrays are valid indices, got {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < -n or hi >= n:
        raise IndexError(f"index {lo if lo < -n else hi} is out of bounds for axis {axis} with size {n}")
    return (arr + n * (arr < 0) if lo < 0 else arr), True


def _is_basic(k: Any) -> bool:
    return isinstance(k, (slice, int, np.integer))


class ObservationView:
    """Read-only ndarray-like view of ``(buffer_size, n_envs, *obs_shape)`` observations.

    Supports ``shape``, ``dtype``, ``ndim``, ``len``, numpy indexing (ints,
    slices, integer and boolean arrays, tuples, ``...``), ``np.asarray``, ufuncs
    (``view == x``), ``np.allclose``, iteration over the first axis, and the
    ``swapaxes``/``reshape`` of the leading (row, env) axes that SB3's
    ``swap_and_flatten`` makes. Every read returns a new array, fetched by
    ``reader(rows, envs)`` (flat, in-range int64 arrays; it returns
    ``(len(rows), *obs_shape)``). Exotic indices (``None``, advanced indices past
    the leading axes) materialise the whole array first.

    Examples
    --------
    >>> data = np.arange(24, dtype=np.uint8).reshape(3, 2, 4)
    >>> view = ObservationView(lambda r, e: data[r, e], data.shape, data.dtype)
    >>> view[np.array([0, 2]), np.array([1, 0]), :].tolist()
    [[4, 5, 6, 7], [16, 17, 18, 19]]
    >>> flat = view.swapaxes(0, 1).reshape(6, 4)  # env-major, as SB3's rollout get() flattens
    >>> flat[1].tolist() == data[1, 0].tolist()
    True
    """

    def __init__(self, reader: Reader, shape: tuple[int, ...], dtype: Any, name: str = "observations",
                 *, lead: np.ndarray | None = None, writer: Writer | None = None) -> None:
        if len(shape) < 2:
            raise ValueError(f"shape must start with (buffer_size, n_envs), got {shape}")
        self._reader = reader
        self._writer = writer
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        # None: the leading axes are (rows, envs); else (*leading shape, 2) int64 (row, env) pairs
        self._lead = lead
        self._nlead = 2 if lead is None else lead.ndim - 1
        self._item_shape = self.shape[self._nlead:]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """What the equivalent ndarray would hold (logical, uncompressed)."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ObservationView(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"

    def _expand(self, key: Any) -> tuple[Any, ...]:
        key = key if isinstance(key, tuple) else (key,)
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if n_ell:
            at = next(i for i, k in enumerate(key) if k is Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:at] + (slice(None),) * fill + key[at + 1 :]
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for array: array is {self.ndim}-dimensional, but {len(key)} were indexed")
        return key

    def __getitem__(self, key: Any) -> np.ndarray:
        fast = self._sb3_batch(key)
        if fast is not None:
            return fast
        found = self._resolve(key)
        if found is None:
            return np.asarray(self)[key]
        rows, envs, idx_shape, rest = found
        data = self._reader(rows, envs)
        if data.shape != idx_shape + self._item_shape:  # keep the reader's array itself when it fits
            data = data.reshape(idx_shape + self._item_shape)
        if any(not (isinstance(k, slice) and k == slice(None)) for k in rest):
            data = data[(slice(None),) * len(idx_shape) + tuple(rest)]
        return data

    def _sb3_batch(self, key: Any) -> np.ndarray | None:
        """SB3's ``view[batch_inds, env_indices, :]``: two in-range int64 vectors, served directly."""
        if self._lead is not None or type(key) is not tuple or not 2 <= len(key) <= 3:
            return None
        rows, envs = key[0], key[1]
        if (type(rows) is not np.ndarray or type(envs) is not np.ndarray or rows.dtype != np.int64
                or envs.dtype != np.int64 or rows.ndim != 1 or envs.shape != rows.shape
                or (len(key) == 3 and not (type(key[2]) is slice and key[2] == slice(None))) or not rows.size):
            return None
        if rows.min() < 0 or rows.max() >= self.shape[0] or envs.min() < 0 or envs.max() >= self.shape[1]:
            return None  # numpy's rules (negative indices, errors) on the general path
        return self._reader(rows, envs)

    def _resolve(self, key: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[Any, ...]] | None:
        """``key`` as flat (rows, envs), the shape of the leading result, and the item index.

        None for keys served by materialising the whole array (``None``, advanced
        indices past the leading axes).
        """
        if any(k is None for k in (key if isinstance(key, tuple) else (key,))):
            return None
        key = self._expand(key)
        if self._lead is not None:
            lead_key, rest = key[: self._nlead], key[self._nlead :]
            pairs = self._lead[lead_key]
            rows, envs, idx_shape = pairs[..., 0], pairs[..., 1], pairs.shape[:-1]
        else:
            key = key + (slice(None),) * (2 - len(key)) if len(key) < 2 else key
            first = np.asarray(key[0]) if not _is_basic(key[0]) else None
            if first is not None and first.dtype == bool and first.ndim == 2:
                if first.shape != self.shape[:2]:
                    raise IndexError(f"boolean index of shape {first.shape} does not match {self.shape[:2]}")
                rows, envs = np.nonzero(first)
                idx_shape = (len(rows),)
                rest = key[1:]
            else:
                rows, adv0 = _axis_index(key[0], self.shape[0], 0)
                envs, adv1 = _axis_index(key[1], self.shape[1], 1)
                rest = key[2:]
                if adv0 and adv1:
                    rows, envs = np.broadcast_arrays(rows, envs)
                else:
                    rows = rows.reshape(rows.shape + (1,) * envs.ndim)
                    envs = envs.reshape((1,) * (rows.ndim - envs.ndim) + envs.shape)
                    rows, envs = np.broadcast_arrays(rows, envs)
                idx_shape = rows.shape
        if not all(_is_basic(k) for k in rest):
            return None
        return (np.ascontiguousarray(rows).reshape(-1), np.ascontiguousarray(envs).reshape(-1),
                tuple(idx_shape), tuple(rest))

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._writer is None:
            raise TypeError(f"{self.name} of a compressed buffer is read-only; write through add()")
        found = self._resolve(key)
        if found is None:
            raise IndexError(f"{self.name}: this kind of index cannot be assigned to; index the leading "
                             "(row, env) axes with ints, slices or arrays")
        rows, envs, idx_shape, rest = found
        block = self._reader(rows, envs).reshape(idx_shape + self._item_shape).copy()
        block[(slice(None),) * len(idx_shape) + rest] = value  # numpy's casting and broadcasting
        self._writer(rows, envs, block.reshape(-1, *self._item_shape))

    def _pairs(self) -> np.ndarray:
        """(row, env) of every leading position, shape ``(*leading shape, 2)``."""
        if self._lead is not None:
            return self._lead
        n0, n1 = self.shape[:2]
        pairs = np.empty((n0, n1, 2), np.int64)
        pairs[..., 0] = np.arange(n0)[:, None]
        pairs[..., 1] = np.arange(n1)[None, :]
        return pairs

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        pairs = self._pairs().reshape(-1, 2)
        out = self._reader(pairs[:, 0].copy(), pairs[:, 1].copy()).reshape(self.shape)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(np.asarray(x) if isinstance(x, ObservationView) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.shape[0]):
            yield self[i]

    def copy(self) -> np.ndarray:
        return np.asarray(self)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return np.asarray(self).astype(dtype)

    def swapaxes(self, a: int, b: int) -> ObservationView:
        """Swap two leading axes (what SB3's ``swap_and_flatten`` calls); no data is read."""
        a, b = (x % self.ndim for x in (a, b))
        if a >= self._nlead or b >= self._nlead:
            raise ValueError(f"only the leading (row, env) axes of {self.name} can be swapped")
        lead = self._pairs().swapaxes(a, b)
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return ObservationView(self._reader, tuple(shape), self.dtype, self.name, lead=lead, writer=self._writer)

    def reshape(self, *shape: Any) -> ObservationView:
        """Reshape the leading axes; the observation shape must stay as it is."""
        shape = tuple(shape[0]) if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        item = self._item_shape
        count = math.prod(self.shape[: self._nlead])
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if len(shape) < len(item) or tuple(shape[len(shape) - len(item):]) != item or \
                math.prod(shape[: len(shape) - len(item)]) != count or len(shape) == len(item):
            raise ValueError(f"cannot reshape {self.name} of shape {self.shape} into {shape}: only "
                             f"the leading axes can change (observations are {item})")
        lead = np.ascontiguousarray(self._pairs()).reshape(*shape[: len(shape) - len(item)], 2)
        return ObservationView(self._reader, tuple(int(d) for d in shape), self.dtype, self.name, lead=lead,
                               writer=self._writer)


def stack_axis_order(space: Any) -> tuple[int, ...]:
    """Axes to try for frame stacking, best first: where SB3's ``VecFrameStack`` stacks."""
    from stable_baselines3.common.preprocessing import is_image_space

    shape = space.shape or ()
    if is_image_space(space) and len(shape) == 3 and int(np.argmin(shape)) == 0:
        return (0, -1)  # channel-first image
    return (-1, 0)  # channel-last image, or not an image: VecFrameStack stacks on the last axis


# -- add() input policy --------------------------------------------------------------------
#: numpy's warning for a complex -> real cast (moved to numpy.exceptions in numpy 1.25)
_COMPLEX_WARNING = getattr(getattr(np, "exceptions", np), "ComplexWarning", Warning)


def coerce_obs(x: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, *, reshape: bool = False) -> np.ndarray:
    """One observation argument of ``add()`` as the buffer stores it: ``shape``, in ``dtype``.

    :func:`sb3_obs` (SB3's assignment and its errors), then :func:`lossless_obs`
    (what SB3 would store changed is refused). ``reshape=True`` first reshapes an
    input of the right size (SB3 does this for Discrete spaces). Never copies an
    input that already fits.
    """
    return lossless_obs(sb3_obs(x, shape, dtype, name, reshape=reshape), shape, dtype, name)


def _obs_hint(name: str, shape: tuple[int, ...], dtype: np.dtype, arr: np.ndarray) -> str:
    return f"{name}: expected shape {shape} and dtype {dtype}, got shape {arr.shape} and dtype {arr.dtype}"


def sb3_obs(x: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, *, reshape: bool = False) -> np.ndarray:
    """``x`` as an array that SB3's ``row[...] = np.array(x)`` accepts for a row of ``shape``/``dtype``.

    Where that numpy assignment fails, raises its exception type with numpy's
    message (:class:`~sb3_integration.errors.ArgumentError` and kin); the assignment
    runs on a scratch row only when ``x`` is not already a numeric array of ``shape``.
    The result may still differ from ``shape`` and ``dtype``: :func:`lossless_obs` next.
    """
    if type(x) is np.ndarray and x.shape == shape and x.dtype == dtype:  # the common case: as SB3 makes it
        return x
    try:
        arr = np.asarray(x)  # SB3's np.array(x): the same errors (a ragged list), without the copy
    except Exception as e:
        raise usage_error(e, f"{name}: cannot store {type(x).__name__} {x!r:.60}", argument=True) from None
    if reshape and arr.shape != shape and arr.size == math.prod(shape):
        arr = arr.reshape(shape)
    if arr.shape != shape or arr.dtype.kind not in "biufc":
        try:  # SB3's assignment, on a scratch row: numpy's broadcasting and conversion errors
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.empty((1, *shape), dtype)[0] = arr
        except Exception as e:
            raise usage_error(e, _obs_hint(name, shape, dtype, arr), argument=True) from None
    return arr


def lossless_obs(arr: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """An array :func:`sb3_obs` accepted, as stored: exactly ``shape``, in ``dtype``, values unchanged.

    Raises :class:`~sb3_integration.errors.DataLossError` where SB3 would store
    something else: a broadcast that repeats values (one env's observation for
    several envs), or a cast that changes values (:func:`chunkstore.casting.lossless_cast`; float ->
    float casts round, as SB3 stores a float space, so samples stay bit-identical to SB3's).
    Leading axes of length 1 may be added or dropped, as numpy's assignment does
    (one env, no env axis).
    """
    if arr.shape != shape:
        if arr.size != math.prod(shape):
            raise DataLossError(f"{_obs_hint(name, shape, dtype, arr)}: SB3 would broadcast it, storing the "
                                "same values for several envs or elements; pass one observation per env")
        arr = arr.reshape(shape)  # equal sizes and broadcastable: only leading axes of length 1 differ
    if arr.dtype != dtype:
        try:
            if arr.dtype.kind == "c":  # the cast to a real dtype warns; lossless_cast refuses what it drops
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", _COMPLEX_WARNING)
                    arr = lossless_cast(arr, dtype, name, round_floats=True)
            else:
                arr = lossless_cast(arr, dtype, name, round_floats=True)
        except ValueError as e:
            raise DataLossError(f"{e} (SB3 would store them changed)") from None
    return arr


# -- pickling small arrays -----------------------------------------------------------------
_PACK_CODEC = "zstd3"


def pack_array(a: np.ndarray) -> dict[str, Any]:
    """``a`` compressed, for a pickle (actions, rewards, descriptors)."""
    a = np.ascontiguousarray(a)
    data = bytes(get_codec(_PACK_CODEC).encode(a)) if a.size else b""
    return {"shape": a.shape, "dtype": a.dtype.str, "codec": _PACK_CODEC, "data": data}


def unpack_array(packed: dict[str, Any]) -> np.ndarray:
    out = np.zeros(packed["shape"], np.dtype(packed["dtype"]))
    if out.size:
        get_codec(packed["codec"]).decode(packed["data"], out=out)
    return out
