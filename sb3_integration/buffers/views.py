"""SB3's ``buffer.observations`` arrays as views: ndarray-like, read-only, backed by a reader.

* :class:`ObservationView` -- a read-only, ndarray-like stand-in for SB3's
  ``buffer.observations`` arrays, backed by any ``reader(rows, envs)``.
* :func:`same_rows` -- whether two reads of a batch ask for the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

__all__ = ["ObservationView", "Reader", "Writer", "same_rows"]


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
        raise IndexError("only integers, slices, ellipsis and integer or boolean arrays are valid indices, "
                         f"got {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())  # before the cast: uint64's 2**63 would read -2**63
    if lo < -n or hi >= n:
        raise IndexError(f"index {lo if lo < -n else hi} is out of bounds for axis {axis} with size {n}")
    arr = arr.astype(np.int64, copy=False)
    return (arr + n * (arr < 0) if lo < 0 else arr), True


#: ndarray methods that change the array in place (on a view they would change a temporary copy)
_IN_PLACE = frozenset({"fill", "itemset", "partition", "put", "resize", "setfield", "setflags", "sort"})
#: ndarray attributes that describe an array's own memory or device: a copy's would mislead (and a
#: ``hasattr(x, "device")`` probe must not read the whole buffer)
_NOT_FORWARDED = frozenset({"base", "ctypes", "data", "device", "flags", "to_device"})


def _span(k: Any) -> int:
    """How many axes one entry of an index consumes (a boolean array: its ndim; None: none)."""
    if k is None:
        return 0
    if k is Ellipsis or isinstance(k, (slice, int, np.integer)):
        return 1
    arr = np.asarray(k)  # an array, a list, a torch tensor
    return arr.ndim if arr.dtype == bool else 1


def _is_basic(k: Any) -> bool:
    return isinstance(k, (slice, int, np.integer))


class ObservationView(NDArrayOperatorsMixin):
    """Read-only ndarray-like view of ``(buffer_size, n_envs, *obs_shape)`` observations.

    Supports ``shape``, ``dtype``, ``ndim``, ``len``, numpy indexing (ints,
    slices, integer and boolean arrays, a 2-D boolean mask of the leading axes, tuples,
    ``...``), ``np.asarray``, ufuncs and operators (``view == x``, ``view + 1``),
    ``np.allclose``, iteration over the first axis, numpy's other array methods on
    a copy (``view.mean()``), and the ``swapaxes``/``reshape`` of the leading (row,
    env) axes that SB3's ``swap_and_flatten`` makes (other axes: numpy's, on a copy). With a ``writer``, assignments
    and in-place operators write through it. Every read returns a new array, fetched by
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
        if lead is None and len(shape) < 2:
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

    @property
    def strides(self) -> tuple[int, ...]:
        """The strides of the C-contiguous array a read returns (computed: a probe reads nothing)."""
        out, step = [], self.dtype.itemsize
        for n in reversed(self.shape):
            out.append(step)
            step *= n
        return tuple(reversed(out))

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ObservationView(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"

    def _expand(self, key: Any) -> tuple[Any, ...]:
        key = key if isinstance(key, tuple) else (key,)
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = sum(_span(k) for k in key if k is not Ellipsis)  # a 2-D boolean mask indexes two axes
        if n_ell:
            at = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - used) + key[at + 1 :]
        if used > self.ndim:
            raise IndexError(f"too many indices for array: array is {self.ndim}-dimensional, but {used} were indexed")
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
            first = np.asarray(key[0]) if key and not _is_basic(key[0]) else None
            if first is None or not (first.dtype == bool and first.ndim == 2):
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
        """numpy's ufuncs and operators (``view == 0``, ``view + 1``, ``-view``) on the values, as on an array.

        An ``out`` that is a view (``view += 1``) is computed into a new array and assigned
        back through ``view[...] =``, which a read-only view refuses with TypeError.
        """
        inputs = tuple(np.asarray(x) if isinstance(x, ObservationView) else x for x in inputs)
        out = kwargs.get("out")
        if out is None or not any(isinstance(o, ObservationView) for o in out):
            return getattr(ufunc, method)(*inputs, **kwargs)
        if len(out) != 1 or method != "__call__":
            raise TypeError(f"{self.name}: only a plain ufunc call can write into a view")
        kwargs.pop("out")
        out[0][...] = getattr(ufunc, method)(*inputs, **kwargs)
        return out[0]

    #: hashed by identity (an ndarray is not hashable; the operators above would otherwise unset it)
    __hash__ = object.__hash__

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.shape[0]):
            yield self[i]

    def copy(self) -> np.ndarray:
        return np.asarray(self)

    def __getattr__(self, name: str) -> Any:
        """numpy's other array methods and attributes (``mean``, ``max``, ``tolist``, ``T``, ...) on a copy.

        Only called for names the view lacks. Methods that change an array in place would
        change that copy only, so they raise TypeError instead.
        """
        if name.startswith("_") or name in _NOT_FORWARDED or not hasattr(np.ndarray, name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if name in _IN_PLACE:
            raise TypeError(f"{self.name}.{name}() changes an array in place; a compressed buffer's "
                            f"{self.name} are read through copies (take np.asarray({self.name}) to get one)")
        return getattr(np.asarray(self), name)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return np.asarray(self).astype(dtype)

    def swapaxes(self, a: int, b: int) -> ObservationView | np.ndarray:
        """Swap two leading axes (what SB3's ``swap_and_flatten`` calls): a view, no data is read.

        Any other pair of axes: numpy's ``swapaxes`` of a copy.
        """
        a, b = (x % self.ndim for x in (a, b))
        if a >= self._nlead or b >= self._nlead:
            return np.asarray(self).swapaxes(a, b)
        lead = self._pairs().swapaxes(a, b)
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return ObservationView(self._reader, tuple(shape), self.dtype, self.name, lead=lead, writer=self._writer)

    def reshape(self, *shape: Any) -> ObservationView | np.ndarray:
        """Reshape the leading axes, the observation shape as it is: a view, no data is read.

        Any other shape: numpy's ``reshape`` of a copy (and numpy's errors).
        """
        shape = tuple(shape[0]) if len(shape) == 1 and not np.isscalar(shape[0]) else shape
        item = self._item_shape
        count = math.prod(self.shape[: self._nlead])
        want = shape
        if shape.count(-1) == 1 and all(d != 0 for d in shape):
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if len(shape) < len(item) or tuple(shape[len(shape) - len(item):]) != item or \
                math.prod(shape[: len(shape) - len(item)]) != count or len(shape) == len(item):
            return np.asarray(self).reshape(want)
        lead = np.ascontiguousarray(self._pairs()).reshape(*shape[: len(shape) - len(item)], 2)
        return ObservationView(self._reader, tuple(int(d) for d in shape), self.dtype, self.name, lead=lead,
                               writer=self._writer)
