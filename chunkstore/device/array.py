"""DeviceArray: a ring of items kept encoded in device memory, read as device tensors.

The write side mirrors :class:`chunkstore.ChunkedArray` (items in chunks of
``chunk_len``; a chunk being written stays raw on the host until its last item is
written, too many chunks are open, or :meth:`DeviceArray.flush`; ``discard``,
``remap`` and ``clear`` work on whole chunks, with the same checks), so the frame
engine can use either. A sealed item is encoded against a reference item
(:mod:`chunkstore.device.runs`, :mod:`chunkstore.device.policy`) and its record
appended to the device heap (:mod:`chunkstore.device.heap`).

Reading (:meth:`DeviceArray.take`) is one upload and a fixed number of torch ops
(:mod:`chunkstore.device.decode`), whatever the batch size: the host keeps each
item's reference, record address, run and byte counts, computes every size and
address of a batch from them, and sends them with any record not on the device
(spilled, just written, or in an open chunk, encoded on the fly) as one block.
Nothing in a read copies device data to the host or waits for the device.

Items are stored as their bytes, so every dtype round-trips bit-exactly (NaN
payloads, ``-0.0``); a read views the bytes back as the dtype's torch
counterpart, or returns the bytes (:meth:`DeviceArray.take_bytes`) for dtypes
torch lacks.

State in and out goes through a host :class:`~chunkstore.ChunkedArray`'s formats:
:meth:`DeviceArray.snapshot` is an :class:`~chunkstore.array.ArraySnapshot` (chunks
encoded with a host codec, bytes copied), :meth:`DeviceArray.from_state` builds an
array from a snapshot, a ChunkedArray or its pickled state.

Interrupts. Each item's entry (reference, record address, run and byte counts) is
one row of one structured table, changed by one numpy assignment, and a chunk's new
records are installed before the old ones are freed; a remap installs its new tables
in one step (a new :class:`~chunkstore.device.indices.ItemTable`). An exception at any
line leaves every item reading as before or after; at worst some device bytes or a
reference are never freed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from chunkstore._cuda_fork import check_process, forked_from, note_cuda_store
from chunkstore.array import DEFAULT_CHUNK_LEN, MAX_OPEN_CHUNKS
from chunkstore.array.frontend import ItemGeometry, WriteFrontEnd, check_chunks, check_geometry
from chunkstore.device._fork import note_cpu_store
from chunkstore.device.batch import encode_open, upload_batch
from chunkstore.device.decode import decode
from chunkstore.device.dtypes import carrier_dtype, torch_dtype
from chunkstore.device.heap import DEFAULT_SEGMENT_BYTES, DeviceBudget, DeviceHeap
from chunkstore.device.indices import ItemTable, normalize_indices, ranks
from chunkstore.device.persist import export_chunked, host_array, import_chunked, snapshot_of
from chunkstore.device.policy import WINDOW, ReferencePolicy
from chunkstore.device.refs import ReferencePool
from chunkstore.device.runs import RunFormat, encode_items
from chunkstore.device.staging import StagingRing
from chunkstore.errors import MissingBackendError

__all__ = ["DeviceArray"]


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise MissingBackendError("DeviceArray needs PyTorch: install torch (see the README)") from exc
    return torch


class DeviceArray(WriteFrontEnd, ItemGeometry):
    """A fixed-capacity array of items encoded in device memory; ``take`` returns device tensors.

    Parameters
    ----------
    capacity
        Number of items.
    item_shape, dtype
        Shape and dtype of one item; any numpy dtype is stored bit-exactly.
    chunk_len
        Items per chunk: the unit of sealing, :meth:`discard` and :meth:`remap`.
    device
        A torch device (``"cpu"``, ``"cuda"``, ``"mps"``, ``"meta"``).
    budget_bytes
        Most bytes of record segments kept on the device (None: no limit); past it
        the oldest segments move to host RAM and are still read (more slowly).
        References and the read inbox come on top; :attr:`nbytes` counts everything.
        A :class:`~chunkstore.device.heap.DeviceBudget` is shared with the other
        arrays given it (the limit holds for all of them together).
    name
        Shown in errors.
    max_open
        Chunks kept open (raw, on the host) at once; one per sequential writer.
    segment_bytes
        Size of a heap segment (default 1 MiB, less for small arrays, at least 4 records).
    reference_window
        Items a candidate reference is tried on before it is kept or dropped
        (:data:`chunkstore.device.policy.WINDOW`).

    Examples
    --------
    >>> arr = DeviceArray(100, (2, 3), np.float32, chunk_len=4, device="cpu")
    >>> arr.write(0, np.ones((8, 2, 3), np.float32))
    >>> x = arr.take_padded(np.array([1, -1, 7]))
    >>> x.shape, x.device.type, x.sum().item()
    (torch.Size([3, 2, 3]), 'cpu', 12.0)
    """

    def __init__(
        self,
        capacity: int,
        item_shape: tuple[int, ...] | int = (),
        dtype: Any = np.uint8,
        *,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        device: Any = "cpu",
        budget_bytes: int | DeviceBudget | None = None,
        name: str | None = None,
        max_open: int = MAX_OPEN_CHUNKS,
        segment_bytes: int | None = None,
        reference_window: int = WINDOW,
    ) -> None:
        capacity, self.item_shape, self.dtype, self.chunk_len, self.max_open = check_geometry(
            capacity, item_shape, dtype, chunk_len, max_open)
        self.name = name or "device-array"
        self._torch = torch = _import_torch()
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{self.name}: CUDA is not available here; use device='cpu'")
        if self.device.type == "cpu":
            note_cpu_store(torch)  # forked children keep off OpenMP's dead threads (chunkstore.device._fork)
        # a forked child must not touch the CUDA objects made here (chunkstore._cuda_fork)
        self._pid = note_cuda_store(self) if self.device.type == "cuda" else None
        self._item_nbytes = int(np.prod(self.item_shape, dtype=np.int64)) * self.dtype.itemsize
        self.fmt = RunFormat.for_item(max(self._item_nbytes, 1))
        self._tdtype = torch_dtype(self.dtype)
        self._carrier = carrier_dtype(self._tdtype)  # the dtype decoding gathers in
        wide = self._item_nbytes > 0xFFFF  # run and byte counts of larger items need 32 bits
        count_dtype = np.uint32 if wide else np.uint16
        self._entry = np.dtype([("ref", np.int32), ("addr", np.int64), ("nw", count_dtype), ("nv", count_dtype)])
        self._table = ItemTable(capacity, self._blank_items(capacity), np.zeros(-(-capacity // self.chunk_len), bool),
                             OrderedDict())
        if segment_bytes is None:  # small arrays get small segments; every segment holds 4+ records
            fit = self.capacity * self.fmt.record_bound // 4
            segment_bytes = max(4 * self.fmt.record_bound, min(DEFAULT_SEGMENT_BYTES, max(fit, 64 << 10)))
        seg = int(segment_bytes)
        self._heap = DeviceHeap(torch, self.device, torch.int16 if self.fmt.word_bytes == 2 else torch.int32,
                                segment_bytes=-(-int(seg) // 8) * 8, budget_bytes=budget_bytes)
        if self.fmt.record_bound > self._heap.segment_bytes:
            raise ValueError(f"{self.name}: segment_bytes {segment_bytes} is smaller than one record "
                             f"({self.fmt.record_bound} bytes)")
        self._pool = ReferencePool(torch, self.device, self._item_nbytes)
        self._policy = ReferencePolicy(self.fmt, self._pool, window=reference_window)
        self._staging = StagingRing(torch, self.device)
        self._scratch = np.zeros(0, np.uint8)
        self._views: tuple[int, Any, Any] | None = None  # (pool version, typed rows, byte rows)
        self._lock = threading.RLock()
        self._closed = False

    def _blank_items(self, n: int) -> np.ndarray:
        items = np.zeros(n, self._entry)
        items["addr"] = -1
        return items

    # -- geometry and sizes -------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Number of items."""
        return self._table.capacity

    @property
    def nchunks_total(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def _rows(self, chunk: int) -> int:
        return min(self.chunk_len, self.capacity - chunk * self.chunk_len)

    @property
    def item_nbytes(self) -> int:
        """Bytes of one raw item."""
        return self._item_nbytes

    @property
    def nbytes(self) -> int:
        """Device bytes held: heap segments, the read inbox and the reference rows."""
        return self._heap.nbytes + self._pool.nbytes

    @property
    def record_nbytes(self) -> int:
        """Bytes of live records (the encoded items, without references or free space)."""
        return self._heap.live_nbytes

    @property
    def reference_nbytes(self) -> int:
        """Device bytes of the references in use."""
        return self._pool.live_rows * self._item_nbytes

    @property
    def index_nbytes(self) -> int:
        """Host bytes of the per-item index (reference, address, counts) and chunk flags."""
        return int(self._table.items.nbytes + self._table.stored.nbytes)

    @property
    def host_nbytes(self) -> int:
        """Host bytes held: index, open chunks, spilled segments, staging, reference copies."""
        opened = sum(b.nbytes + w.nbytes for b, w in self._table.open.values())
        staging = self._staging.nbytes + self._scratch.nbytes
        return self.index_nbytes + opened + staging + self._heap.host_nbytes + self._pool.host_nbytes

    #: no open chunks in host memory a native writer could fill (writes go through ``write``/``put``)
    supports_native_writes = False

    @property
    def nbytes_stored(self) -> int:
        """What the items cost stored: the device bytes and the host bytes."""
        return self.nbytes + self.host_nbytes

    @property
    def device_nbytes(self) -> int:
        """Device bytes held (:attr:`nbytes`)."""
        return self.nbytes

    def held_info(self) -> dict[str, int]:
        """Host memory held, by :meth:`ChunkedArray.held_info <chunkstore.ChunkedArray.held_info>`'s kinds.

        ``tier``: spilled segments, staging buffers, reference copies; ``open_chunks``:
        raw open chunks; ``chunk_table``: the per-item index. Device memory is :attr:`nbytes`.
        """
        opened = sum(b.nbytes + w.nbytes for b, w in self._table.open.values())
        return {"tier": self.host_nbytes - self.index_nbytes - opened, "open_chunks": opened,
                "spare_buffers": 0, "chunk_table": self.index_nbytes}

    @property
    def nbytes_held(self) -> int:
        """Host bytes held (:attr:`host_nbytes`, the sum of :meth:`held_info`)."""
        return self.host_nbytes

    @property
    def nchunks(self) -> int:
        """Number of sealed chunks."""
        return int(np.count_nonzero(self._table.stored))

    def stored_chunks(self) -> np.ndarray:
        """Indices of the sealed chunks (``flush()`` first to include open ones)."""
        return np.flatnonzero(self._table.stored)

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.shape,
            "dtype": str(self.dtype),
            "device": str(self.device),
            "chunk_len": self.chunk_len,
            "nchunks": self.nchunks,
            "nopen": len(self._table.open),
            "nbytes": self.nbytes,
            "record_nbytes": self.record_nbytes,
            "reference_nbytes": self.reference_nbytes,
            "references": self._pool.live_rows,
            "references_created": self._policy.created,
            "index_nbytes": self.index_nbytes,
            "host_nbytes": self.host_nbytes,
            "heap": self._heap.info(),
            "run_format": {"word_bytes": self.fmt.word_bytes, "max_len": self.fmt.max_len},
        }

    def __repr__(self) -> str:
        return (f"DeviceArray(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"device={self.device}, chunk_len={self.chunk_len}, nchunks={self.nchunks})")

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name}: the array is closed")
        check_process(self.name, self.device, self._pid)

    # -- writing: WriteFrontEnd's public writes, ChunkedArray's semantics -------------------------
    def _begin(self) -> None:
        self._check_open()

    def _put(self, idx: np.ndarray, vals: np.ndarray) -> None:
        order = np.argsort(idx, kind="stable")
        chunks = idx[order] // self.chunk_len
        for part in np.split(order, np.flatnonzero(np.diff(chunks)) + 1):
            c = int(idx[part[0]]) // self.chunk_len
            buf, written = self._open_chunk(c)
            rows = idx[part] - c * self.chunk_len
            buf[rows] = vals[part]
            written[rows] = True
            self._after_write(c, int(rows.max()))

    def _write_run(self, start: int, vals: np.ndarray) -> None:
        for c, r0, r1, k in self._pieces(start, len(vals)):
            part = vals[k:k + r1 - r0]
            if r0 == 0 and r1 == self._rows(c) and c not in self._table.open:
                self._seal_rows(c, np.arange(r1), part)  # a whole chunk: encode straight from the input
            else:
                buf, written = self._open_chunk(c)
                buf[r0:r1] = part
                written[r0:r1] = True
                self._after_write(c, r1 - 1)

    def _open_chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """The open buffer of chunk ``c``: raw rows and which of them were written.

        Rows not written keep their stored records, so opening a sealed chunk
        decodes nothing.
        """
        entry = self._table.open.get(c)
        if entry is not None:
            self._table.open.move_to_end(c)
            return entry
        rows = self._rows(c)
        entry = (np.zeros((rows, *self.item_shape), self.dtype), np.zeros(rows, bool))
        self._table.open[c] = entry
        while len(self._table.open) > self.max_open:
            self._seal(next(iter(self._table.open)))
        return entry

    def _after_write(self, c: int, last_row: int) -> None:
        if last_row == self._rows(c) - 1:
            self._seal(c)

    def _seal(self, c: int) -> None:
        buf, written = self._table.open[c]
        rows = np.flatnonzero(written)
        self._seal_rows(c, rows, buf[rows])
        del self._table.open[c]

    def _seal_rows(self, c: int, rows: np.ndarray, vals: np.ndarray) -> None:
        """Encode items ``c * chunk_len + rows`` (values ``vals``) and replace their records."""
        ids = c * self.chunk_len + rows
        self._table.stored[c] = True  # first: a chunk whose records may change is always one a snapshot keeps
        if ids.size and self._item_nbytes:
            items = np.ascontiguousarray(vals).reshape(len(ids), -1).view(np.uint8)
            before = int(self._table.items["ref"][ids[0] - 1]) if ids[0] > 0 else 0
            refs = self._policy.choose(c, before, items)
            meta = encode_items(items, self._pool.host[refs], self.fmt, self._scratch_for(len(ids)))
            new = np.empty(len(ids), self._entry)
            new["ref"], new["nw"], new["nv"] = refs, meta[:, 0], meta[:, 1]
            new["addr"] = -1
            old = self._table.items[ids]
            # take (records, reference counts), install in one step, give back the old ones. An
            # interrupt before the install gives back what was taken; one after it gives back
            # the old ones. Where a step may or may not have run (an interrupt as it returned)
            # it is left alone: the worst is a record or a reference kept, never one freed twice.
            # Whether the install ran is read from the items only where it may have (stage 2):
            # a chunk rewritten with what it holds (a retried add, items equal to their
            # references: records of 0 bytes at address -1) has new == old, and reading the
            # items earlier took a rewrite that never reached incref for an install, giving
            # back references that were never taken (counts below their users, rows recycled
            # under live items). At stage 2 with new == old both readings give back the same.
            stage = 0
            try:
                new["addr"] = self._heap.put(self._scratch, meta[:, 2])
                stage = 1
                self._pool.incref(refs)
                stage = 2
                self._table.items[ids] = new  # the one step: the items read their new records from here
                stage = 3
                self._heap.release(old["addr"], self._record_sizes(old))
                stage = 4
                self._pool.decref(old["ref"])
            except BaseException:
                installed = stage >= 3 or (stage == 2 and bool((self._table.items[ids] == new).all()))
                if not installed:
                    if stage >= 1:
                        self._heap.release(new["addr"], self._record_sizes(new))
                    if stage >= 2:
                        self._pool.decref(refs)
                elif stage <= 3:
                    if stage <= 2:
                        self._heap.release(old["addr"], self._record_sizes(old))
                    self._pool.decref(old["ref"])
                raise

    def _scratch_for(self, n: int) -> np.ndarray:
        need = n * self.fmt.record_bound
        if self._scratch.size < need:
            self._scratch = np.empty(need, np.uint8)
        return self._scratch

    def _record_sizes(self, entries: np.ndarray) -> np.ndarray:
        h = self.fmt.word_bytes
        raw = h * entries["nw"].astype(np.int64) + entries["nv"]
        return -(-raw // h) * h

    def _free_records(self, entries: np.ndarray) -> None:
        """The records and references of ``entries`` (rows no item holds any more) are dead."""
        self._heap.release(entries["addr"], self._record_sizes(entries))
        self._pool.decref(entries["ref"])

    def _release(self, ids: np.ndarray) -> None:
        """Items ``ids`` lose their records and references (they read as zeros)."""
        old = self._table.items[ids]
        self._table.items[ids] = self._blank_items(1)  # one step: the items read as zeros from here
        self._free_records(old)

    def flush(self) -> None:
        """Seal every open chunk and upload every record still on the host."""
        with self._lock:
            self._check_open()
            for c in list(self._table.open):
                self._seal(c)
            self._heap.flush()

    def _free_chunks(self, first: int, last: int) -> None:
        for c in [c for c in self._table.open if first <= c < last]:
            del self._table.open[c]
        hit = np.flatnonzero(self._table.stored[first:last]) + first
        if hit.size:
            ids = (hit[:, None] * self.chunk_len + np.arange(self.chunk_len)).reshape(-1)
            self._release(ids[ids < self.capacity])
            self._table.stored[hit] = False

    def clear(self) -> None:
        """Every item back to zeros; device space released."""
        super().clear()
        self._policy.reset()

    def _remap(self, capacity: int, src: np.ndarray, dst: np.ndarray) -> None:
        # only the per-item tables move; nothing is decoded or re-encoded
        L = self.chunk_len
        rows = np.minimum(L, self.capacity - src * L)
        keep = np.zeros(self.nchunks_total, bool)
        keep[src] = True
        self.discard_chunks(np.flatnonzero(self._table.stored & ~keep))
        old_ids = np.repeat(src * L, rows) + ranks(rows)
        new_ids = np.repeat(dst * L, rows) + ranks(rows)
        items = self._blank_items(capacity)
        items[new_ids] = self._table.items[old_ids]
        stored = np.zeros(-(-capacity // L), bool)
        stored[dst] = self._table.stored[src]
        moved = dict(zip(src.tolist(), dst.tolist(), strict=True))
        opened = OrderedDict((moved[c], e) for c, e in self._table.open.items() if c in moved)
        # one step: the tables, the open chunks and the capacity always agree
        self._table = ItemTable(capacity, items, stored, opened)
        self._policy.reset()

    def discard_chunks(self, chunks: np.ndarray) -> None:
        """Free whole chunks (stored or open) by index (IndexError / TypeError for a bad one: a
        float index was truncated, and ``1.5`` freed chunk 1)."""
        checked = check_chunks(self.name, chunks, self.nchunks_total)
        with self._lock:
            for c in checked.tolist():
                self.discard(c * self.chunk_len, min((c + 1) * self.chunk_len, self.capacity))

    def close(self) -> None:
        """Give the device memory back; the array cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if forked_from(self._pid):
                return  # the parent's CUDA memory: releasing it here would call into CUDA and abort
            self._heap.close()
            self._pool.close()
            self._staging.release()
            self._table.open.clear()
            self._views = None

    def __enter__(self) -> DeviceArray:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------
    def take(self, ids: Any) -> Any:
        """Items at ``ids`` as one tensor on the device: ``(*ids.shape, *item_shape)``.

        ``ids`` is a host integer array (negative ids count from the end) or a boolean
        mask, as :meth:`ChunkedArray.take <chunkstore.ChunkedArray.take>` reads it;
        ``-1`` as "no item" is :meth:`take_padded`. The read is one upload and a fixed
        number of torch ops, whatever ``len(ids)``, and never waits for the device.
        """
        return self._take(normalize_indices(ids, self.capacity, self.name), typed=True)

    def take_padded(self, ids: Any) -> Any:
        """Items at ``ids`` (``-1 .. capacity - 1``), where ``-1`` is an all-zero item; a device tensor."""
        return self._take(self._padded_ids(ids), typed=True)

    def take_bytes(self, ids: Any, *, padded: bool = False) -> Any:
        """Like :meth:`take` (:meth:`take_padded` if ``padded``), as raw bytes: uint8
        ``(*ids.shape, *item_shape, itemsize)`` (for dtypes torch lacks too)."""
        ids = self._padded_ids(ids) if padded else normalize_indices(ids, self.capacity, self.name)
        return self._take(ids, typed=False)

    def take_into(self, ids: Any, out: Any, *, checked: bool = True) -> Any:
        """``out[...] = take_padded(ids)``: ``out`` a tensor (copied on the device) or a numpy array
        (a copy to the host: never a sample's path). ``checked``: the host array's (ids checked here anyway)."""
        got = self.take_padded(ids)
        if isinstance(out, np.ndarray):
            out[...] = got.cpu().numpy()
        else:
            out.copy_(got)
        return out

    def _padded_ids(self, ids: Any) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.size and ids.dtype.kind not in "iu":
            raise IndexError(f"{self.name}: ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (int(ids.min()) < -1 or int(ids.max()) >= self.capacity):
            raise IndexError(f"{self.name}: ids must lie in -1..{self.capacity - 1}")
        return ids

    def _take(self, ids: np.ndarray, typed: bool) -> Any:
        """The items of checked int64 ``ids`` (``-1``: zeros) as a tensor (``typed``) or bytes."""
        if typed and self._tdtype is None:
            raise TypeError(f"{self.name}: torch has no dtype for {self.dtype}; use take_bytes()")
        flat = ids.reshape(-1)
        torch = self._torch
        with self._lock:
            self._check_open()
            if flat.size == 0 or self._item_nbytes == 0:
                shape = (flat.size, *self.item_shape) + (() if typed else (self.dtype.itemsize,))
                dtype = self._tdtype if typed else torch.uint8
                return torch.zeros((*ids.shape, *shape[1:]), dtype=dtype, device=self.device)
            refs = self._pool_views()[0 if typed else 1]
            header, n_runs, n_values = self._upload_batch(flat)
            heap = self._heap
            out = decode(torch, self.fmt, refs, heap.words, heap.bytes, header, n_runs, n_values)
        if typed and self._carrier != self._tdtype:
            out = out.view(self._tdtype)
        return out if ids.ndim == 1 else out.view(*ids.shape, *out.shape[1:])

    def _pool_views(self) -> tuple[Any, Any]:
        """The reference rows as ``(rows, *item_shape)`` in the carrier dtype, and as bytes (cached)."""
        pool = self._pool
        if self._views is None or self._views[0] != pool.version:
            rows = pool.rows
            n = rows.shape[0]
            typed = None
            if self._carrier is not None:
                typed = rows.view(self._carrier).view(n, *self.item_shape)
            raw = rows.view(n, *self.item_shape, self.dtype.itemsize)
            self._views = (pool.version, typed, raw)
        return self._views[1], self._views[2]

    def _upload_batch(self, ids: np.ndarray) -> tuple[Any, int, int]:
        """The batch's header and host-side records in the inbox (see :func:`upload_batch`)."""
        table = self._table
        fresh = encode_open(table.open, ids, self.chunk_len, self.item_shape, self.dtype, self.fmt, self._scratch_for)
        items = table.items
        return upload_batch(ids, (items["ref"], items["nw"], items["nv"], items["addr"]), fresh, self._heap,
                            self.fmt, self._item_nbytes, self._staging.acquire())

    # -- persistence hooks ------------------------------------------------------------------------
    def live_chunks(self) -> np.ndarray:
        """Chunks sealed or open: the chunks a :class:`~chunkstore.ChunkedArray` would hold."""
        opened = np.fromiter(self._table.open, np.int64, len(self._table.open))
        return np.union1d(np.flatnonzero(self._table.stored), opened).astype(np.int64)

    def to_chunked(self, codec: Any = None, *, batch_items: int = 4096, **kwargs: Any) -> Any:
        """The live items as a host :class:`~chunkstore.ChunkedArray` (same capacity, chunk_len, chunks).

        ``codec`` and ``kwargs`` go to the ChunkedArray (its default codec if None).
        Device data is copied to the host here: this is the save path, not a read.
        """
        with self._lock:
            self._check_open()
            return export_chunked(self, codec, batch_items=batch_items, **kwargs)

    def snapshot(self, codec: Any = None, *, batch_items: int = 4096) -> Any:
        """This array's live items, now, as an :class:`~chunkstore.array.ArraySnapshot`.

        The chunks are encoded with the host ``codec`` (ChunkedArray's default if None)
        and their bytes copied, so the snapshot pins nothing and outlives the array.
        It is what a host ChunkedArray's ``snapshot()`` is: files and pickles take it
        as they take theirs. Device data is copied to the host here (the save path).
        """
        with self._lock:
            self._check_open()
            return snapshot_of(self, codec, batch_items=batch_items)

    @classmethod
    def from_chunked(cls, src: Any, *, device: Any = "cpu", batch_items: int = 4096,
                     **kwargs: Any) -> DeviceArray:
        """A DeviceArray holding the items and stored chunks of ``src`` (flushed first).

        ``kwargs`` go to the constructor (``budget_bytes``, ``name``, ...).
        """
        out = cls(src.capacity, src.item_shape, src.dtype, chunk_len=src.chunk_len, device=device,
                  **kwargs)
        try:
            import_chunked(out, src, batch_items=batch_items)
        except BaseException:
            out.close()  # its device memory goes back with the error
            raise
        return out

    @classmethod
    def from_state(cls, state: Any, *, device: Any = "cpu", batch_items: int = 4096,
                   **kwargs: Any) -> DeviceArray:
        """A DeviceArray holding ``state``: an ArraySnapshot, a ChunkedArray's pickled state, or a ChunkedArray.

        A ChunkedArray given is read, not kept (close it when done); the others are
        decoded through a temporary host array.
        """
        src, temporary = host_array(state)
        try:
            return cls.from_chunked(src, device=device, batch_items=batch_items, **kwargs)
        finally:
            if temporary:
                src.close()
