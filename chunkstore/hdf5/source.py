"""ChunkSource: everything the writer needs of one array, and nothing else.

The writer never calls a ChunkedArray itself: it reads an array's geometry, codec,
stored chunk indices, their sizes and, once, their bytes in order, through this one
small interface. A live array adapts to it (:meth:`ChunkSource.from_array`: bytes read
as the save goes), and so does a frozen snapshot handed over as ``(chunk index, bytes)``
pairs (:meth:`ChunkSource.from_chunks`): the saved file then holds exactly the snapshot,
however the array changes while or after the file is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore.codecs import Codec, get_codec

__all__ = ["ChunkSource", "as_source"]


@dataclass(frozen=True, eq=False)
class ChunkSource:
    """One array as the writer sees it: geometry, codec and stored chunks' bytes.

    Parameters
    ----------
    capacity, item_shape, dtype, chunk_len, codec
        The array's geometry and codec (as :class:`~chunkstore.ChunkedArray` has them).
    chunks
        Indices of the stored chunks, increasing.
    nbytes
        Encoded size of each stored chunk.
    blobs
        Called once per save: yields each stored chunk's bytes, in the order of
        ``chunks`` (any C-contiguous buffer). A size that differs from ``nbytes``
        stops the save with an error (the array changed under it).

    Examples
    --------
    >>> import numpy as np
    >>> from chunkstore.codecs import get_codec
    >>> codec = get_codec("zstd3")
    >>> blob = bytes(codec.encode(np.arange(8, dtype=np.uint8)))
    >>> src = ChunkSource.from_chunks([(1, blob)], capacity=16, item_shape=(), dtype=np.uint8,
    ...                               chunk_len=8, codec=codec)
    >>> src.chunks.tolist(), src.nbytes.tolist() == [len(blob)]
    ([1], True)
    >>> [bytes(b) == blob for b in src.iter_bytes()]
    [True]
    """

    capacity: int
    item_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_len: int
    codec: Codec
    chunks: np.ndarray
    nbytes: np.ndarray
    blobs: Callable[[], Iterable[Any]]

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalize once, here
        set_(self, "item_shape", tuple(int(d) for d in self.item_shape))
        set_(self, "dtype", np.dtype(self.dtype))
        set_(self, "chunks", np.asarray(self.chunks, np.int64).reshape(-1))
        set_(self, "nbytes", np.asarray(self.nbytes, np.int64).reshape(-1))
        if not (1 <= self.chunk_len <= self.capacity):
            raise ValueError(f"chunk_len {self.chunk_len} must be within 1..capacity {self.capacity}")
        c = self.chunks
        if len(c) and (c[0] < 0 or c[-1] >= self.nchunks_total or np.any(np.diff(c) <= 0)):
            raise ValueError(f"chunk indices must increase within 0..{self.nchunks_total - 1}")
        if len(self.nbytes) != len(c) or np.any(self.nbytes < 0):
            raise ValueError(f"{len(c)} chunks need as many sizes >= 0, got {len(self.nbytes)}")

    # -- adapters ---------------------------------------------------------------------
    @classmethod
    def from_array(cls, arr: Any) -> ChunkSource:
        """A :class:`~chunkstore.ChunkedArray`'s sealed chunks, read as the save goes.

        Call ``arr.flush()`` first to include its open chunks (:func:`save` does).
        """
        chunks = arr.stored_chunks()
        return cls(arr.capacity, arr.item_shape, arr.dtype, arr.chunk_len, arr.codec, chunks,
                   arr.chunk_nbytes()[chunks], lambda: arr.iter_chunk_bytes(chunks))

    @classmethod
    def from_chunks(cls, pairs: Iterable[tuple[int, Any]], *, capacity: int, item_shape: Any,
                    dtype: Any, chunk_len: int, codec: Codec | str) -> ChunkSource:
        """A frozen snapshot: ``(chunk index, bytes)`` pairs, in any order, each index once."""
        items = sorted(((int(c), memoryview(b).cast("B")) for c, b in pairs), key=lambda p: p[0])
        views = [v for _, v in items]
        shape = tuple(np.atleast_1d(item_shape).tolist()) if np.ndim(item_shape) else (int(item_shape),)
        return cls(int(capacity), shape, np.dtype(dtype), int(chunk_len), get_codec(codec),
                   np.array([c for c, _ in items], np.int64), np.array([v.nbytes for v in views], np.int64),
                   lambda: iter(views))

    # -- what the writer reads --------------------------------------------------------
    @property
    def nchunks_total(self) -> int:
        return -(-self.capacity // self.chunk_len)

    @property
    def item_nbytes(self) -> int:
        return math.prod(self.item_shape) * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.capacity, *self.item_shape)

    def rows(self, c: int) -> int:
        """Items in chunk ``c`` (the last one may be shorter)."""
        return min(self.chunk_len, self.capacity - c * self.chunk_len)

    def iter_bytes(self, name: str = "array") -> Iterator[memoryview]:
        """Each stored chunk's bytes, in order, each checked against its listed size."""
        count = 0
        for k, blob in enumerate(self.blobs()):
            view = memoryview(blob)
            if k >= len(self.chunks) or view.nbytes != self.nbytes[k]:
                what = (f"chunk {self.chunks[k]} holds {view.nbytes} bytes, {self.nbytes[k]} were "
                        "listed" if k < len(self.chunks) else "more chunks than listed")
                raise RuntimeError(f"{name}: the chunks changed while they were saved ({what}); "
                                   "nothing was written")
            count += 1
            yield view
        if count != len(self.chunks):
            raise RuntimeError(f"{name}: {count} chunks' bytes for {len(self.chunks)} listed; "
                               "nothing was written")


def as_source(arr: Any) -> ChunkSource:
    """``arr`` itself if it is a :class:`ChunkSource`, else the adapter of a ChunkedArray or snapshot."""
    if isinstance(arr, ChunkSource):
        return arr
    from chunkstore.array import ArraySnapshot, ChunkedArray

    if isinstance(arr, ArraySnapshot):
        chunks = arr.stored_chunks()
        return ChunkSource(arr.capacity, arr.item_shape, arr.dtype, arr.chunk_len, arr.codec, chunks,
                           arr.chunk_sizes(), arr.iter_chunk_bytes)
    if not isinstance(arr, ChunkedArray):
        raise TypeError(f"arrays are saved from ChunkedArray or ChunkSource (or an ArraySnapshot), "
                        f"got {type(arr).__name__}")
    return ChunkSource.from_array(arr)
