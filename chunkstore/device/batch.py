"""The host half of a read: a batch's header and every record the device lacks, in one upload.

The host holds each item's reference row, record address and run / byte counts,
so it computes every address and size of a batch itself (numpy, no device reads).
Records not on the device (in a spilled segment, in the segment being filled, or
encoded just now for an item of an open chunk) are copied after the header, each
once however often the batch names it, and the block goes to the heap's inbox in
one upload. The decoder (:mod:`chunkstore.device.decode`) then sees one address
space.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore.device.decode import HEADER_ROWS
from chunkstore.device.heap import DeviceHeap
from chunkstore.device.runs import RunFormat, encode_items
from chunkstore.device.staging import StagingBuffer

__all__ = ["FreshRecords", "encode_open", "upload_batch"]


@dataclass
class FreshRecords:
    """Records made for one read (items of open chunks): where in the batch, and their bytes.

    ``pos``: positions in the batch; ``inv``: which record each uses; ``meta``: runs,
    value bytes and record bytes per record; ``data``: the records back to back.
    """

    pos: np.ndarray
    meta: np.ndarray
    inv: np.ndarray
    data: np.ndarray

    @classmethod
    def none(cls) -> FreshRecords:
        empty = np.zeros(0, np.int64)
        return cls(empty, np.zeros((0, 3), np.int64), empty, np.zeros(0, np.uint8))


def encode_open(open_chunks: dict[int, tuple[np.ndarray, np.ndarray]], ids: np.ndarray, chunk_len: int,
                item_shape: tuple[int, ...], dtype: np.dtype, fmt: RunFormat,
                scratch_for: Callable[[int], np.ndarray]) -> FreshRecords:
    """Records of the items of ``ids`` written in open chunks, encoded now against the zero row.

    ``open_chunks`` maps an open chunk to its raw rows and which of them were written;
    ``scratch_for(n)`` gives a buffer for ``n`` records.
    """
    if not open_chunks:
        return FreshRecords.none()
    L = chunk_len
    keys = np.fromiter(open_chunks, np.int64, len(open_chunks))
    pos = np.flatnonzero((ids >= 0) & np.isin(ids // L, keys))
    if pos.size:
        hit = np.array([open_chunks[int(i) // L][1][int(i) % L] for i in ids[pos].tolist()], bool)
        pos = pos[hit]
    if pos.size == 0:
        return FreshRecords.none()
    uniq, inv = np.unique(ids[pos], return_inverse=True)
    items = np.empty((uniq.size, *item_shape), dtype)  # our dtype: concatenating
    for k, i in enumerate(uniq.tolist()):  # would turn a non-native byte order native
        items[k] = open_chunks[i // L][0][i % L]
    items = np.ascontiguousarray(items).reshape(uniq.size, -1).view(np.uint8)
    scratch = scratch_for(uniq.size)
    meta = encode_items(items, np.zeros_like(items), fmt, scratch)
    return FreshRecords(pos, meta, inv, scratch[:int(meta[:, 2].sum())])


def upload_batch(ids: np.ndarray, tables: tuple[np.ndarray, ...], fresh: FreshRecords,
                 heap: DeviceHeap, fmt: RunFormat, item_nbytes: int,
                 stage: StagingBuffer) -> tuple[Any, int, int]:
    """Upload the header of the batch ``ids`` (``-1``: zeros) and the records it needs.

    ``tables`` are the per-item (reference, runs, value bytes, virtual address).
    Returns the device header (int64 ``(5, n)``) and the batch's run and value-byte totals.
    """
    n, h = ids.size, fmt.word_bytes
    ref_t, nw_t, nv_t, addr_t = tables
    valid = ids >= 0
    at = np.where(valid, ids, 0)
    ref = np.where(valid, ref_t[at], 0).astype(np.int64)
    nw = np.where(valid, nw_t[at], 0).astype(np.int64)
    nv = np.where(valid, nv_t[at], 0).astype(np.int64)
    addr = np.where(valid, addr_t[at], -1)
    dev, away = heap.device_addresses(addr, -(-(h * nw + nv) // h) * h)
    if fresh.pos.size:  # they replace the items' stored records for this read
        ref[fresh.pos], nw[fresh.pos], nv[fresh.pos] = 0, fresh.meta[fresh.inv, 0], fresh.meta[fresh.inv, 1]
        away[fresh.pos] = False
    away_pos = np.flatnonzero(away)
    far, first, far_inv = np.unique(addr[away_pos], return_index=True, return_inverse=True)
    far_size = (-(-(h * nw + nv) // h) * h)[away_pos][first]
    far_off = np.cumsum(far_size) - far_size
    head, far_total = 8 * HEADER_ROWS * n, int(far_size.sum())
    fresh_off = far_total + np.cumsum(fresh.meta[:, 2]) - fresh.meta[:, 2]
    total = -(-(head + far_total + fresh.data.size) // 8) * 8
    heap.ensure_inbox(total)
    inbox = heap.inbox_offset
    dev[away_pos] = inbox + head + far_off[far_inv]
    dev[fresh.pos] = inbox + head + fresh_off[fresh.inv]
    buf = stage.host(total)
    run0, val0 = np.cumsum(nw) - nw, np.cumsum(nv) - nv
    header = buf[:head].view(np.int64).reshape(HEADER_ROWS, n)
    header[0], header[1] = ref, nw
    header[2] = dev // h - run0
    header[3] = np.arange(n, dtype=np.int64) * item_nbytes - val0
    header[4] = dev + h * nw - val0
    if far.size:
        heap.pack(far, far_size, buf, head + far_off)
    buf[head + far_total:head + far_total + fresh.data.size] = fresh.data
    stage.upload(heap.bytes[inbox:inbox + total], total)
    on_device = heap.int64.as_strided((HEADER_ROWS, n), (n, 1), inbox // 8)  # one view op, not slice + view
    return on_device, int(nw.sum()), int(nv.sum())
