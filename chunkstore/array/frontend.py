"""The write front-end every array of items shares: argument checks and dispatch, written once.

:class:`WriteFrontEnd` is a mixin of :class:`~chunkstore.ChunkedArray` and
:class:`~chunkstore.device.DeviceArray`. It owns what a caller sees of a write --
``arr[key] = value``, :meth:`~WriteFrontEnd.write`, :meth:`~WriteFrontEnd.put`,
:meth:`~WriteFrontEnd.discard`, :meth:`~WriteFrontEnd.remap`, the coercion of values
(:meth:`~WriteFrontEnd._coerce`) and the errors of bad arguments -- and hands the
checked arguments to the array's own storage through a few hooks:

* ``_begin()`` / ``_end()``: a mutating call starts (the lock is held; a closed array
  raises) and finishes (an array that repairs after interrupted calls marks it done);
* ``_write_run(start, vals)``: consecutive items; ``_put(idx, vals)``: any indices,
  repeats allowed (the last wins); ``_set_one(i, value)``: ``arr[i] = item``;
* ``_free_chunks(first, last)``: chunks ``first..last-1`` are dead;
* ``_remap(capacity, src, dst)``: the checked chunk moves.

:func:`check_geometry` is the one check of the constructor arguments both take; counts are
:func:`chunkstore.validate.check_count`'s (re-exported here). :class:`ItemGeometry` answers
``shape`` / ``ndim`` / ``size`` / ``len()`` for both, and for the array's snapshots.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from chunkstore._indexing import check_index, normalize_indices
from chunkstore.casting import lossless_cast
from chunkstore.validate import check_count, is_int

__all__ = ["ItemGeometry", "WriteFrontEnd", "check_chunk", "check_chunks", "check_count", "check_geometry"]


class _Items(Protocol):
    @property
    def capacity(self) -> int: ...

    @property
    def item_shape(self) -> tuple[int, ...]: ...


class ItemGeometry:
    """``shape``, ``ndim``, ``size`` and ``len()`` of ``capacity`` items of ``item_shape``.

    A base of :class:`~chunkstore.array.ChunkedArray`, its snapshots and
    :class:`~chunkstore.device.DeviceArray`, which provide ``capacity`` and ``item_shape``
    (attributes or properties).
    """

    @property
    def shape(self: _Items) -> tuple[int, ...]:
        return (self.capacity, *self.item_shape)

    @property
    def ndim(self: _Items) -> int:
        return 1 + len(self.item_shape)

    @property
    def size(self: _Items) -> int:
        return self.capacity * int(np.prod(self.item_shape, dtype=np.int64))

    def __len__(self: _Items) -> int:
        return self.capacity


def check_geometry(capacity: int, item_shape: tuple[int, ...] | int, dtype: Any, chunk_len: int,
                   max_open: int) -> tuple[int, tuple[int, ...], np.dtype, int, int]:
    """``(capacity, item_shape, dtype, chunk_len, max_open)`` checked and normalised.

    ``chunk_len`` is cut to ``capacity``; a sub-array dtype's shape joins ``item_shape`` (as in
    ``np.zeros``); a bad value raises ValueError (TypeError
    for an object dtype) naming the argument.

    Examples
    --------
    >>> check_geometry(3, 2, "f4", 8, 1)
    (3, (2,), dtype('float32'), 3, 1)
    >>> check_geometry(3, 2, ("u1", (4,)), 8, 1)
    (3, (2, 4), dtype('uint8'), 3, 1)
    """
    capacity, chunk_len, max_open = (check_count(arg, value) for arg, value in (
        ("capacity", capacity), ("chunk_len", chunk_len), ("max_open", max_open)))
    dims = [item_shape] if np.isscalar(item_shape) else item_shape
    try:
        shape = tuple(check_count("item_shape", d, 0) for d in dims)  # type: ignore[union-attr]
    except ValueError:
        raise ValueError(f"item_shape must be non-negative whole numbers, got {item_shape!r}") from None
    except TypeError:
        raise TypeError(f"item_shape must be an int or a tuple of ints, got {item_shape!r}") from None
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"object dtypes cannot be stored, got {dt}")
    if dt.subdtype is not None:  # ("u1", (3,)): numpy's own rule, the sub-array joins the item shape
        shape, dt = shape + dt.shape, dt.base
    return int(capacity), shape, dt, min(int(chunk_len), int(capacity)), int(max_open)


def check_chunk(name: str, c: Any, nchunks: int) -> int:
    """``c`` as a chunk index of array ``name`` (``0 .. nchunks - 1``): TypeError for what is not an
    int (``1.5``, ``True``), IndexError out of range (a negative index read another chunk)."""
    if not is_int(c):
        raise TypeError(f"{name}: a chunk index must be an int, got {type(c).__name__} {c!r}")
    if not 0 <= c < nchunks:
        raise IndexError(f"chunk {c} out of range for {name} ({nchunks} chunks)")
    return int(c)


def check_chunks(name: str, chunks: Any, nchunks: int) -> np.ndarray:
    """:func:`check_chunk` of every one of ``chunks`` (a 1-D array of ints; empty is fine), as int64."""
    given = np.asarray(chunks)
    if given.size and (given.ndim != 1 or given.dtype.kind not in "iu"):
        raise TypeError(f"{name}: chunks must be a 1-D array of ints, got {given.dtype} of shape {given.shape}")
    flat = given.reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= nchunks))  # before the cast: uint64's 2**63 is not -2**63
    if bad.size:
        raise IndexError(f"chunk {int(flat[bad[0]])} out of range for {name} ({nchunks} chunks)")
    return flat.astype(np.int64, copy=False)


class WriteFrontEnd:
    """The public writes of an array of items (a mixin; the array supplies the state and hooks)."""

    item_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_len: int
    name: str
    _lock: threading.RLock

    if TYPE_CHECKING:  # a read-only property of both arrays (their chunk or item table holds it)
        @property
        def capacity(self) -> int: ...

    # -- public writes ---------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            self._begin()
            self._setitem(key, value)
            self._end()

    def write(self, start: int, items: Any) -> None:
        """``items[k]`` goes to ``self[start + k]`` (no wrap-around)."""
        items = np.asarray(items)
        n = len(items) if items.ndim > len(self.item_shape) else 1
        capacity = self.capacity
        if start < 0 or start + n > capacity:
            raise IndexError(f"write of {n} items at {start} exceeds capacity {capacity}")
        vals = self._coerce(items, n)
        with self._lock:
            self._begin()
            self._write_run(start, vals)
            self._end()

    def put(self, indices: Any, values: Any) -> None:
        """``self[indices[i]] = values[i]``; any order, repeats allowed (the last wins)."""
        idx = normalize_indices(indices, self.capacity, self.name).reshape(-1)
        vals = self._coerce(values, idx.size)
        if idx.size == 0:
            return
        with self._lock:
            self._begin()
            self._put(idx, vals)
            self._end()

    def discard(self, start: int, stop: int) -> None:
        """Items in ``[start, stop)`` are dead: free the chunks wholly inside the range.

        Those chunks read as zeros afterwards; partially covered chunks are kept.
        """
        for name, value in (("start", start), ("stop", stop)):
            if not is_int(value):
                raise TypeError(f"{self.name}: discard's {name} must be an int, got {type(value).__name__} {value!r}")
        capacity = self.capacity
        start, stop = max(0, int(start)), min(capacity, int(stop))
        first = -(-start // self.chunk_len)
        last = stop // self.chunk_len if stop < capacity else -(-capacity // self.chunk_len)
        with self._lock:
            self._begin()
            if last > first:
                self._free_chunks(first, last)
            self._end()

    def clear(self) -> None:
        """Every item back to zeros; storage released."""
        self.discard(0, self.capacity)

    def remap(self, capacity: int, src: Any, dst: Any) -> None:
        """Change the capacity; stored or open chunk ``src[i]`` becomes chunk ``dst[i]``.

        Every other chunk is freed. Nothing is decoded or re-encoded: only the
        chunk table moves, in one step. A ring that outgrows its capacity uses this
        to grow while keeping its live chunks. Moved chunks must keep their row count.
        """
        src = np.asarray(src, np.int64).reshape(-1)
        dst = np.asarray(dst, np.int64).reshape(-1)
        capacity = int(capacity)
        if capacity < 1 or src.shape != dst.shape:
            raise ValueError(f"remap needs capacity >= 1 and src/dst of equal length, got "
                             f"{capacity}, {src.shape}, {dst.shape}")
        L, old = self.chunk_len, self.capacity
        n_new = -(-capacity // L)
        if src.size and (src.min() < 0 or src.max() >= -(-old // L) or dst.min() < 0
                         or dst.max() >= n_new or np.unique(dst).size != dst.size):
            raise IndexError(f"{self.name}: remap chunks out of range or duplicated")
        if not np.array_equal(np.minimum(L, capacity - dst * L), np.minimum(L, old - src * L)):
            raise ValueError(f"{self.name}: remap would change the row count of a chunk")
        with self._lock:
            self._begin()
            self._remap(capacity, src, dst)
            self._end()

    # -- dispatch ------------------------------------------------------------------------------
    def _setitem(self, key: Any, value: Any) -> None:
        if isinstance(key, tuple):
            if len(key) != 1:
                self._set_partial(key, value)
                return
            key = key[0]
        capacity = self.capacity
        if isinstance(key, (int, np.integer)):  # the appender's case: one item
            self._set_one(check_index(int(key), capacity, self.name), value)
        elif isinstance(key, slice):
            start, stop, step = key.indices(capacity)
            if step == 1:
                if stop > start:
                    self._write_run(start, self._coerce(value, stop - start))
            else:
                idx = np.arange(start, stop, step)
                vals = self._coerce(value, idx.size)
                if idx.size:  # (an empty strided slice: ChunkedArray's _put failed on it)
                    self._put(idx, vals)
        else:
            idx = normalize_indices(key, capacity, self.name).reshape(-1)
            vals = self._coerce(value, idx.size)
            if idx.size:
                self._put(idx, vals)

    def _coerce(self, value: Any, n: int) -> np.ndarray:
        """``value`` as an array of (n, *item_shape) in our dtype, refusing lossy casts."""
        arr = np.asarray(value)
        if arr.dtype != self.dtype:
            arr = lossless_cast(arr, self.dtype, self.name)
        shape = (n, *self.item_shape)
        if arr.shape != shape:
            if arr.shape == self.item_shape and n == 1:
                arr = arr.reshape(shape)
            else:
                try:
                    arr = np.broadcast_to(arr, shape)
                except ValueError:
                    raise ValueError(
                        f"{self.name}: cannot write values of shape {np.shape(value)} into "
                        f"{n} item(s) of shape {self.item_shape}"
                    ) from None
        return arr

    def _pieces(self, start: int, n: int) -> Iterator[tuple[int, int, int, int]]:
        """``(chunk, first row, end row, offset in the values)`` of each chunk that items
        ``start .. start + n - 1`` touch, in order (the walk of every ``_write_run``)."""
        L, capacity = self.chunk_len, self.capacity
        pos, end = start, start + n
        while pos < end:
            c, r0 = divmod(pos, L)
            r1 = min(L, end - c * L, capacity - c * L)
            yield c, r0, r1, pos - start
            pos += r1 - r0

    # -- hooks -----------------------------------------------------------------------------------
    def _begin(self) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        """A mutating call finished (nothing to do unless the array repairs interrupted calls)."""

    def _set_one(self, i: int, value: Any) -> None:
        self._write_run(i, self._coerce(value, 1))

    def _set_partial(self, key: tuple[Any, ...], value: Any) -> None:
        raise TypeError(f"{self.name}: only whole items can be written (arr[i] = item)")

    def _write_run(self, start: int, vals: np.ndarray) -> None:
        raise NotImplementedError

    def _put(self, idx: np.ndarray, vals: np.ndarray) -> None:
        raise NotImplementedError

    def _free_chunks(self, first: int, last: int) -> None:
        raise NotImplementedError

    def _remap(self, capacity: int, src: np.ndarray, dst: np.ndarray) -> None:
        raise NotImplementedError
