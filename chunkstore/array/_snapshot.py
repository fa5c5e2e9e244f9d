"""One moment of a ChunkedArray, readable while the array keeps changing.

:meth:`ChunkedArray.snapshot` captures, under the array's lock, its geometry,
its codec and where every stored chunk's bytes are; open chunks are encoded on
the spot. It then *pins* the tier: segments emptied while the snapshot is alive
are not reused, so the captured bytes stay intact until :meth:`ArraySnapshot.close`
while the array goes on being written. A save reads the chunks from the snapshot
without holding the array (or the buffer around it) for longer than the capture.
A tier that cannot pin (a custom :class:`~chunkstore.tiers.Tier`) gets its chunk
bytes copied at capture instead.

A snapshot quacks like the array for persistence (``chunk_len``, ``capacity``,
``item_shape``, ``dtype``, ``codec``, ``stored_chunks``, ``iter_chunk_bytes``,
``chunk``), and is a ChunkedArray's state: :meth:`ArraySnapshot.materialize`
gives the plain dict a pickle holds, and ``ChunkedArray.from_state`` builds an
array from either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from chunkstore.array.frontend import ItemGeometry
from chunkstore.codecs import Codec
from chunkstore.tiers import ChunkRef, Tier

__all__ = ["STATE_VERSION", "ArraySnapshot"]

#: version of a ChunkedArray's materialized state (a dict: what a pickle holds)
STATE_VERSION = 2


class ArraySnapshot(ItemGeometry):
    """A frozen view of a ChunkedArray's contents (see the module docstring).

    Use it as a context manager, or call :meth:`close`, to unpin the tier.
    """

    def __init__(self, config: dict[str, Any], codec: Codec, chunks: np.ndarray, refs: np.ndarray,
                 encoded: dict[int, bytes], tier: Tier | None, unpin: Callable[[], None] | None) -> None:
        self.config = config
        self.codec = codec
        self.name: str = config["name"]
        self.capacity: int = config["capacity"]
        self.item_shape: tuple[int, ...] = tuple(config["item_shape"])
        self.dtype = np.dtype(config["dtype"])
        self.chunk_len: int = config["chunk_len"]
        self._chunks = chunks  # stored chunk indices, increasing (open ones included)
        self._refs = refs  # (3, n): where each is in the tier; segment -1: in ``encoded``
        self._encoded = encoded
        self._tier = tier
        self._unpin = unpin

    # -- geometry, as the array has it -------------------------------------------------
    @property
    def nchunks_total(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def chunk_rows(self, c: int) -> int:
        return min(self.chunk_len, self.capacity - c * self.chunk_len)

    # -- contents ----------------------------------------------------------------------
    def stored_chunks(self) -> np.ndarray:
        return self._chunks

    def chunk_sizes(self) -> np.ndarray:
        """Encoded size of each stored chunk, in the order of :meth:`stored_chunks`."""
        return self._refs[2].copy()

    def flush(self) -> None:
        """Nothing to seal: open chunks were encoded at capture."""

    def iter_chunk_bytes(self, chunks: np.ndarray | None = None) -> Iterator[memoryview]:
        """The encoded bytes of ``chunks`` (default: all stored), in order."""
        if chunks is None:
            pos = np.arange(len(self._chunks))
        else:
            chunks = np.asarray(chunks, np.int64)
            pos = np.searchsorted(self._chunks, chunks)
            bad = (pos >= len(self._chunks)) | (self._chunks[np.minimum(pos, len(self._chunks) - 1)] != chunks)
            if bad.any():
                raise KeyError(f"{self.name}: chunk {int(chunks[np.flatnonzero(bad)[0]])} is not stored")
        seg, off, n = self._refs[:, pos]
        for k, s, o, m in zip(pos.tolist(), seg.tolist(), off.tolist(), n.tolist(), strict=True):
            if s < 0:
                yield memoryview(self._encoded[int(self._chunks[k])])
            else:
                assert self._tier is not None
                yield memoryview(self._tier.peek(ChunkRef(s, o, m))).toreadonly()  # type: ignore[arg-type]

    def chunk(self, c: int) -> np.ndarray:
        """The decoded items of stored chunk ``c``."""
        (data,) = self.iter_chunk_bytes(np.array([c]))
        out = np.empty((self.chunk_rows(c), *self.item_shape), self.dtype)
        self.codec.decode(data, out=out)
        return out

    @property
    def tier(self) -> Tier | None:
        """The tier the stored chunks are read from (None: every chunk is held in the snapshot)."""
        return self._tier

    @property
    def cbytes(self) -> int:
        return int(self._refs[2].sum())

    def materialize(self) -> dict[str, Any]:
        """The plain state a pickle holds: config (codec included), chunk indices and their bytes."""
        return {
            "version": STATE_VERSION,
            "config": {**self.config, "codec": self.codec},
            "stored": self._chunks.copy(),
            "blobs": [bytes(b) for b in self.iter_chunk_bytes()],
            "open": {},
        }

    # -- lifetime ----------------------------------------------------------------------
    def close(self) -> None:
        """Unpin the tier: emptied segments may be reused again."""
        unpin = self._unpin
        if unpin is not None:
            unpin()  # idempotent: an interrupt before the next line only repeats it later
        self._unpin = None

    def __enter__(self) -> ArraySnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten snapshot must not pin a tier forever
        self.close()
