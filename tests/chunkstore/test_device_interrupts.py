"""Ctrl-C inside the device store: an interrupt at any traced event of a write leaves it usable.

A KeyboardInterrupt is injected at event N (``conftest.Interrupt``) of a write that seals
a chunk while the reference pool grows, a heap segment opens, and (under a small budget)
the oldest segment spills. Afterwards every item reads as its old or its new value
(a chunk is sealed whole or not at all), later writes and reads work, and the pool's
and heap's bookkeeping never counts fewer users than there are (a freed row or segment
still in use would be overwritten: wrong reads later).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import count_events, interrupted

from chunkstore.device import DeviceArray

ITEM, L = 48, 4


def chunk_items(c: int) -> np.ndarray:
    """Chunk ``c``'s items: a base of its own with a few bytes changed per item (the first
    item pays as a reference, so each chunk makes one: the pool grows past its 8 rows)."""
    rng = np.random.default_rng(c)
    base = rng.integers(0, 256, ITEM, np.uint8)
    items = np.repeat(base[None], L, axis=0)
    for r in range(1, L):
        items[r, rng.integers(0, ITEM, 3)] = rng.integers(0, 256, 3, np.uint8)
    return items


def build(budget: int | None) -> DeviceArray:
    return DeviceArray(64, (ITEM,), np.uint8, chunk_len=L, device="cpu", segment_bytes=256,
                       budget_bytes=budget)


def check_books(arr: DeviceArray) -> None:
    items = arr._items
    users = np.bincount(items["ref"][items["ref"] > 0], minlength=arr._pool.count.size)
    assert (arr._pool.count >= users).all(), "a reference counts fewer users than it has"
    heap = arr._heap
    sizes = arr._record_sizes(items)
    has = items["addr"] >= 0
    held = np.bincount(items["addr"][has] // heap.segment_bytes, weights=sizes[has], minlength=heap._live.size)
    assert (heap._live >= held).all(), "a segment counts fewer live bytes than its records"
    assert heap._used[np.unique(items["addr"][has] // heap.segment_bytes)].all(), "a record in a freed segment"
    assert heap.budget.used == heap._nslots * heap.segment_bytes


@pytest.mark.parametrize("budget", [None, 512])  # 512: two segments on the device, the rest spill
@pytest.mark.parametrize("k", [7, 9])  # the 8th chunk's reference grows the pool; others open segments
def test_an_interrupt_anywhere_in_a_device_write(k, budget):
    model = np.concatenate([chunk_items(c) for c in range(k + 4)])
    probe = build(budget)
    probe.write(0, model[:k * L])
    total = count_events(lambda: probe.write(k * L, model[k * L:(k + 1) * L]))
    assert total > 50
    for at in range(1, total + 1):
        arr = build(budget)
        arr.write(0, model[:k * L])
        hit = interrupted(lambda arr=arr: arr.write(k * L, model[k * L:(k + 1) * L]), at)
        got = arr.take(np.arange((k + 1) * L)).numpy()
        assert np.array_equal(got[:k * L], model[:k * L]), f"an older chunk changed (event {at})"
        last = got[k * L:]
        assert (np.array_equal(last, model[k * L:(k + 1) * L]) or (hit and not last.any())
                or (hit and arr._open)), f"chunk {k} is neither old nor new (event {at})"
        check_books(arr)
        arr.write(k * L, model[k * L:])  # the retry, and more
        arr.flush()
        assert np.array_equal(arr.take(np.arange(len(model))).numpy(), model), f"event {at}"
        check_books(arr)
        arr.discard(0, 2 * L)  # frees rows and records: the recycled ones must not be in use
        arr.write(0, model[-2 * L:])
        assert np.array_equal(arr.take(np.arange(2 * L)).numpy(), model[-2 * L:])
        assert np.array_equal(arr.take(np.arange(2 * L, len(model))).numpy(), model[2 * L:])
        check_books(arr)


def test_the_pool_grows_in_one_step():
    """An interrupt at any event of the pool's growth leaves rows, host and count of one size."""
    from chunkstore.device.refs import ReferencePool

    def fill(pool: ReferencePool) -> None:
        for v in range(1, 8):
            pool.incref(np.array([pool.add(np.full(4, v, np.uint8))]))

    probe = ReferencePool(torch, torch.device("cpu"), 4)
    fill(probe)
    total = count_events(lambda: probe.add(np.full(4, 9, np.uint8)))
    for at in range(1, total + 1):
        pool = ReferencePool(torch, torch.device("cpu"), 4)
        fill(pool)
        interrupted(lambda pool=pool: pool.add(np.full(4, 9, np.uint8)), at)
        assert pool.rows.shape[0] == pool.host.shape[0] == pool.count.size
        rows = [pool.add(np.full(4, 20 + i, np.uint8)) for i in range(1)]
        pool.incref(np.array(rows))
        for i in range(12):  # many more: the next growth hands out rows within the tables
            row = pool.add(np.full(4, 40 + i, np.uint8))
            pool.incref(np.array([row]))
            assert pool.alive(row) and pool.rows[row].tolist() == [40 + i] * 4
        assert [pool.rows[r].tolist()[0] for r in range(1, 8)] == list(range(1, 8))
