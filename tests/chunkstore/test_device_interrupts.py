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
    items = arr._table.items
    users = np.bincount(items["ref"][items["ref"] > 0], minlength=arr._pool.count.size)
    assert (arr._pool.count >= users).all(), "a reference counts fewer users than it has"
    heap = arr._heap
    sizes = arr._record_sizes(items)
    has = items["addr"] >= 0
    held = np.bincount(items["addr"][has] // heap.segment_bytes, weights=sizes[has], minlength=heap._segs.live.size)
    assert (heap._segs.live >= held).all(), "a segment counts fewer live bytes than its records"
    assert heap._segs.used[np.unique(items["addr"][has] // heap.segment_bytes)].all(), "a record in a freed segment"
    assert heap.budget.used == heap._arena.nslots * heap.segment_bytes


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
                or (hit and arr._table.open)), f"chunk {k} is neither old nor new (event {at})"
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


@pytest.mark.slow
@pytest.mark.parametrize("budget", [None, 256, 0])  # 256: one segment on the device (spills); 0: host RAM only
def test_a_chunk_rewritten_with_what_it_holds_interrupted_anywhere(budget):
    """A retried add writes a chunk's items again: items equal to their reference have records of
    0 bytes (address -1), so the new entries equal the old ones. An interrupt before the new
    references were counted was read as "installed" and gave back the old references: counts fell
    below their users, the row was recycled under live items (wrong reads), and a later rewrite
    raised "reference counts would go negative" (issue 34)."""
    same, other = SAME, [chunk_items(1)]

    def build() -> DeviceArray:
        return build_rewritable(budget)

    probe = build()
    assert (probe._table.items["addr"][:L] == -1).all() and (probe._table.items["ref"][:L] > 0).all()
    total = count_events(lambda: probe.write(0, same))
    assert total > 50
    for at in range(1, total + 1):
        arr = build()
        interrupted(lambda arr=arr: arr.write(0, same), at)
        check_books(arr)
        arr.write(0, same)  # the retry
        arr.flush()
        check_books(arr)
        for c in (2, 3):  # new references: a row given back too early is handed out again
            arr.write(c * L, chunk_items(c))
        want = np.concatenate([same, *other, chunk_items(2), chunk_items(3)])
        assert np.array_equal(arr.take(np.arange(4 * L)).numpy(), want), f"event {at}"
        arr.write(0, chunk_items(40))  # frees the old references: never below zero
        check_books(arr)


def build_small(budget: int | None) -> DeviceArray:
    return DeviceArray(64, (ITEM,), np.uint8, chunk_len=L, device="cpu", segment_bytes=256, budget_bytes=budget,
                       max_open=1)


#: a chunk whose items all equal the reference the policy makes of the first (records of 0 bytes)
SAME = np.repeat(np.random.default_rng(34).integers(1, 256, ITEM, np.uint8)[None], L, axis=0)


def build_rewritable(budget: int | None) -> DeviceArray:
    """Chunk 0 holds :data:`SAME` (references counted, no record), chunk 1 an ordinary chunk."""
    arr = build_small(budget)
    arr.write(0, SAME)
    arr.write(L, chunk_items(1))
    return arr


@pytest.mark.parametrize("budget", [None, 256, 0])
def test_a_rewrite_interrupted_before_its_references_are_counted(budget, monkeypatch):
    """The deterministic case of the test above: Ctrl-C as the rewrite counts its references
    (``incref`` raising before it runs). Nothing was taken, so nothing may be given back."""
    arr = build_rewritable(budget)
    calls = []

    def incref(rows: np.ndarray) -> None:
        calls.append(rows)
        raise KeyboardInterrupt

    monkeypatch.setattr(arr._pool, "incref", incref)
    with pytest.raises(KeyboardInterrupt):
        arr.write(0, SAME)
    monkeypatch.undo()
    assert calls, "the rewrite did not reach incref"
    check_books(arr)  # the original code gave back chunk 0's four references here
    arr.write(0, SAME)  # the retry
    arr.write(2 * L, chunk_items(2))  # a new reference: takes a row given back too early
    want = np.concatenate([SAME, chunk_items(1), chunk_items(2)])
    assert np.array_equal(arr.take(np.arange(3 * L)).numpy(), want)
    arr.write(0, chunk_items(3))  # gives chunk 0's references back: never below zero
    check_books(arr)
