"""chunkstore.priority.torch_index.TorchPriorityIndex: the host index's semantics in torch ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chunkstore.device.checks import NoHostReads, OpCounter
from chunkstore.priority import PriorityIndex
from chunkstore.priority.torch_index import TorchPriorityIndex


def _skewed(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = np.exp(rng.uniform(np.log(1e-6), np.log(10.0), n)) ** 0.6
    m[rng.choice(n, n // 10, replace=False)] = 0.0
    return m.astype(np.float32)


@pytest.mark.parametrize(("n", "block"), [(3000, 64), (1000, 1024), (257, 16)])
def test_stratified_counts_exact_and_no_zero_mass(n: int, block: int) -> None:
    mass = _skewed(n, n)
    ix = TorchPriorityIndex(n, block=block)
    ix.set(torch.arange(n), torch.as_tensor(mass, dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    calls, k = 4, 20_000
    counts = np.zeros(n)
    for _ in range(calls):
        slots, m, _ = ix.sample(k, g)
        counts += np.bincount(slots.numpy(), minlength=n)
        np.testing.assert_array_equal(m.numpy(), mass[slots.numpy()])
    assert counts[mass == 0].sum() == 0
    expected = mass.astype(np.float64) / mass.astype(np.float64).sum() * k * calls
    assert np.abs(counts - expected).max() <= 2 * calls


def test_same_state_as_the_host_index() -> None:
    n, rng = 500, np.random.default_rng(3)
    host, dev = PriorityIndex(n), TorchPriorityIndex(n, block=32)
    for step in range(30):
        # distinct slots (the device picks among duplicates); 10 < 16 blocks: the blocks touched
        # are recomputed, 40: all blocks are
        size = 40 if step % 4 == 1 else 10
        slots = rng.choice(n, size, replace=False)
        if step % 3 == 0:
            host.set(slots)
            dev.set(torch.as_tensor(slots))
        else:
            m = rng.exponential(3.0, size)
            gens = host.generations(slots)
            if step % 5 == 0:
                gens[:5] -= 1  # stale entries
            a = host.update(slots, m, gens)
            b = dev.update(torch.as_tensor(slots), torch.as_tensor(m), torch.as_tensor(gens.astype(np.int64)))
            np.testing.assert_array_equal(a, b.numpy())
    np.testing.assert_array_equal(dev.masses[:n].numpy(), host.get(np.arange(n)).astype(np.float32))
    assert float(dev.total()) == pytest.approx(host.total, rel=1e-12)
    assert float(dev.min()) == host.min and float(dev.max) == pytest.approx(host.max)


@pytest.mark.parametrize("what", ["sample", "update", "set"])
def test_op_count_does_not_depend_on_the_batch(what: str) -> None:
    ix = TorchPriorityIndex(5000, block=16)  # 313 blocks: both batches touch fewer
    ix.set(torch.arange(5000), torch.rand(5000, dtype=torch.float64))
    counts = []
    for k in (32, 256):
        slots = torch.randperm(5000)[:k]
        with OpCounter() as ops:
            if what == "sample":
                ix.sample(k)
            elif what == "update":
                ix.update(slots, torch.rand(k, dtype=torch.float64), ix.generations[slots])
            else:
                ix.set(slots)
        counts.append(ops.total)
    assert counts[0] == counts[1] > 5


def test_no_host_reads_on_meta() -> None:
    ix = TorchPriorityIndex(4096, device="meta", block=64)
    with NoHostReads("meta"):
        ix.set(torch.arange(4096, device="meta"))
        for k in (32, 256):
            slots, masses, gens = ix.sample(k)
            ix.update(slots, torch.ones(k, dtype=torch.float64, device="meta"), gens)
        ix.total(), ix.min()
    assert slots.device.type == "meta" and slots.shape == (256,) and masses.dtype == torch.float64


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity must be"):
        TorchPriorityIndex(0)
    ix = TorchPriorityIndex(10)
    with pytest.raises(ValueError, match="slots must be a 1-D"):
        ix.update(torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="masses must have shape"):
        ix.update(torch.arange(3), torch.zeros(2))
    with pytest.raises(ValueError, match="k must be"):
        ix.sample(0)
