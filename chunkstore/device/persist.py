"""Persistence hooks: a DeviceArray's live chunks to and from a host ChunkedArray.

Saving goes through the host store (any codec, its file format); loading builds a
DeviceArray from one. Whole chunks move in runs of consecutive chunks, so each
ChunkedArray chunk is encoded (or each DeviceArray chunk sealed) straight from
the batch, once. :func:`snapshot_of` gives the host store's state object (an
:class:`~chunkstore.array.ArraySnapshot` holding its chunk bytes), so files and
pickles take a device array's state as they take a host array's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["chunk_runs", "export_chunked", "host_array", "import_chunked", "snapshot_of"]


def chunk_runs(chunks: np.ndarray, chunk_len: int, capacity: int,
               batch_items: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first item, item ids)`` of runs of consecutive ``chunks``, at most ``batch_items`` long."""
    chunks = np.asarray(chunks, np.int64)
    per = max(1, batch_items // chunk_len)
    for run in np.split(chunks, np.flatnonzero(np.diff(chunks) != 1) + 1):
        for i in range(0, run.size, per):
            part = run[i:i + per]
            if part.size:
                start = int(part[0]) * chunk_len
                yield start, np.arange(start, min(int(part[-1] + 1) * chunk_len, capacity), dtype=np.int64)


def export_chunked(arr: Any, codec: Any = None, *, batch_items: int = 4096, **kwargs: Any) -> Any:
    """A :class:`~chunkstore.ChunkedArray` with the live chunks of the DeviceArray ``arr``."""
    from chunkstore import ChunkedArray

    if codec is not None:
        kwargs["codec"] = codec
    out = ChunkedArray(arr.capacity, arr.item_shape, arr.dtype, chunk_len=arr.chunk_len,
                       name=kwargs.pop("name", arr.name), **kwargs)
    for start, ids in chunk_runs(arr.live_chunks(), arr.chunk_len, arr.capacity, batch_items):
        raw = arr.take_bytes(ids).cpu().numpy()
        out.write(start, raw.view(arr.dtype).reshape(len(ids), *arr.item_shape))
    return out


def import_chunked(dst: Any, src: Any, *, batch_items: int = 4096) -> None:
    """Write the stored chunks of the ChunkedArray ``src`` (flushed first) into the DeviceArray ``dst``."""
    src.flush()
    for start, ids in chunk_runs(src.stored_chunks(), src.chunk_len, src.capacity, batch_items):
        dst.write(start, src.take(ids))
    dst.flush()


def snapshot_of(arr: Any, codec: Any = None, *, batch_items: int = 4096) -> Any:
    """An ArraySnapshot of the DeviceArray ``arr``'s live chunks, their bytes copied (nothing pinned)."""
    from chunkstore.array import ArraySnapshot

    tmp = export_chunked(arr, codec, batch_items=batch_items)
    try:
        with tmp.snapshot() as snap:
            chunks = snap.stored_chunks().copy()
            blobs = {c: bytes(b) for c, b in zip(chunks.tolist(), snap.iter_chunk_bytes(), strict=True)}
            refs = np.zeros((3, chunks.size), np.int64)
            refs[0] = -1  # every chunk in ``blobs``: no tier behind the snapshot
            refs[2] = [len(b) for b in blobs.values()]
            return ArraySnapshot(snap.config, snap.codec, chunks, refs, blobs, None, None)
    finally:
        tmp.close()


def host_array(state: Any) -> tuple[Any, bool]:
    """``(ChunkedArray, made here)`` for a ChunkedArray, an ArraySnapshot or a ChunkedArray's state dict."""
    from chunkstore import ChunkedArray
    from chunkstore.array import ArraySnapshot

    if isinstance(state, ChunkedArray):
        return state, False
    if isinstance(state, (ArraySnapshot, dict)):
        return ChunkedArray.from_state(state), True
    raise TypeError(f"expected a ChunkedArray, an ArraySnapshot or a ChunkedArray state, got "
                    f"{type(state).__name__}")
