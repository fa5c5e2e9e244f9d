"""A priority index in torch device memory: sample and update as a fixed number of torch ops.

:class:`TorchPriorityIndex` has :class:`~chunkstore.priority.PriorityIndex`'s semantics with
its state in tensors on one device, so a GPU learner's TD errors need not cross to the host:
``sample`` and ``update`` dispatch the same ops for every batch smaller than the number of
blocks (a larger one, a bulk ``set`` say, recomputes every block instead: a few ops more), and
none of them reads device data on the host (no ``.item()``, no data-sized outputs; checked on
torch's ``meta`` device). Two levels: fp32 masses in blocks of ``block`` slots, and per block the fp64 sum and
the smallest positive mass. A draw finds its block by ``searchsorted`` over the running sum of
block sums, then its slot by ``searchsorted`` over the running sum inside the block: each
sample reads ``k * block`` masses, each update recomputes the blocks it touched (all blocks,
once each, when the batch has as many entries as there are blocks).

Differences from the host index: generations are int32 (wrap after 2^31 overwrites); when a
batch names the same slot twice, one of its entries wins (the device decides which).

Measured against the host index on the cpu (``tools/bench_prioritized.py``): the host index's
numba kernels are several times faster there, and the replay buffers keep it (their device
samples need the drawn rows on the host anyway, to plan which frames to decode).
"""

from __future__ import annotations

from typing import Any

import torch

from chunkstore.validate import is_int

__all__ = ["TorchPriorityIndex"]


class TorchPriorityIndex:
    """Masses of ``capacity`` slots on ``device``, sampled in proportion (all 0 at first)."""

    def __init__(self, capacity: int, device: Any = "cpu", block: int = 1024) -> None:
        if not is_int(capacity, minimum=1):
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if not is_int(block, minimum=1):
            raise ValueError(f"block must be an int >= 1, got {block!r}")
        self.capacity, self.block, self.device = int(capacity), int(block), torch.device(device)
        self.nblocks = -(-self.capacity // self.block)
        dev = self.device
        self.masses = torch.zeros(self.nblocks * self.block, dtype=torch.float32, device=dev)
        self.generations = torch.zeros(self.capacity, dtype=torch.int32, device=dev)
        self.block_sums = torch.zeros(self.nblocks, dtype=torch.float64, device=dev)
        self.block_mins = torch.full((self.nblocks,), float("inf"), dtype=torch.float32, device=dev)
        self.max = torch.ones((), dtype=torch.float64, device=dev)  # the largest mass written so far

    # -- reading ---------------------------------------------------------------------------
    def total(self) -> torch.Tensor:
        """Sum of every mass (a 0-d fp64 tensor on the device)."""
        return self.block_sums.sum()

    def min(self) -> torch.Tensor:
        """The smallest positive mass (0-d fp32; ``inf`` when none)."""
        return self.block_mins.min()

    def sample(self, k: int, generator: torch.Generator | None = None, *,
               stratified: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(slots, masses, generations)`` of ``k`` draws in proportion to mass (int64, fp64, int32).

        An index with no mass returns slot 0 with mass 0 (checking would read the total on
        the host): check ``total()`` first where that can happen.
        """
        if not is_int(k, minimum=1):
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        k = int(k)
        u = torch.rand(k, generator=generator, dtype=torch.float64, device=self.device)
        total = self.block_sums.sum()
        targets = (torch.arange(k, device=self.device, dtype=torch.float64) + u) * (total / k) if stratified \
            else u * total
        cum = self.block_sums.cumsum(0)
        b = torch.searchsorted(cum, targets, right=True)
        b = torch.minimum(b, self._last_positive(self.block_sums > 0).expand_as(b))
        within = targets - (cum[b] - self.block_sums[b])
        rows = self.masses.view(self.nblocks, self.block)[b]  # (k, block)
        positive = rows > 0
        lcum = rows.double().cumsum(1)
        j = torch.searchsorted(lcum, within.unsqueeze(1), right=True).squeeze(1)
        j = torch.minimum(j, self._last_positive(positive))  # rounding past the last slot with mass
        slots = b * self.block + j
        return slots, self.masses[slots].double(), self.generations[slots.clamp(max=self.capacity - 1)]

    def _last_positive(self, positive: torch.Tensor) -> torch.Tensor:
        """Per row (or for a vector), the last index where ``positive`` holds (0 if none)."""
        steps = torch.arange(positive.shape[-1], device=self.device)
        return torch.where(positive, steps, torch.zeros_like(steps)).amax(dim=-1)

    # -- writing ------------------------------------------------------------------------------
    def set(self, slots: torch.Tensor, masses: torch.Tensor | None = None) -> None:
        """Slots with new contents: ``masses`` (default: the largest so far), generation + 1."""
        slots = self._slots(slots)
        values = self.max.expand(slots.shape) if masses is None else self._masses(masses, slots)
        self.generations.index_put_((slots,), self.generations[slots] + 1)
        self._write(slots, values, torch.ones_like(slots, dtype=torch.bool))

    def update(self, slots: torch.Tensor, masses: torch.Tensor,
               generations: torch.Tensor | None = None) -> torch.Tensor:
        """New masses where the slot's generation is still ``generations`` (all without);
        returns which entries were written (a bool tensor)."""
        slots = self._slots(slots)
        values = self._masses(masses, slots)
        ok = torch.ones_like(slots, dtype=torch.bool) if generations is None else \
            self.generations[slots] == generations.to(self.device, torch.int32)
        self._write(slots, values, ok)
        return ok

    def _write(self, slots: torch.Tensor, values: torch.Tensor, ok: torch.Tensor) -> None:
        new = torch.where(ok, values.float(), self.masses[slots])
        self.masses.index_put_((slots,), new)
        self.max = torch.maximum(self.max, torch.where(ok, values, torch.zeros_like(values)).amax())
        inf = torch.full((), float("inf"), dtype=torch.float32, device=self.device)
        if slots.numel() >= self.nblocks:  # as many blocks as there are: every block, read once
            rows = self.masses.view(self.nblocks, self.block)
            self.block_sums.copy_(rows.double().sum(1))
            self.block_mins.copy_(torch.where(rows > 0, rows, inf).amin(1))
            return
        blocks = slots // self.block
        rows = self.masses.view(self.nblocks, self.block)[blocks]
        self.block_sums.index_put_((blocks,), rows.double().sum(1))
        self.block_mins.index_put_((blocks,), torch.where(rows > 0, rows, inf).amin(1))

    def _slots(self, slots: Any) -> torch.Tensor:
        s = torch.as_tensor(slots, device=self.device)
        if s.ndim != 1 or s.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"slots must be a 1-D int64 or int32 tensor, got {s.dtype} of shape {tuple(s.shape)}")
        return s.long()

    def _masses(self, masses: Any, slots: torch.Tensor) -> torch.Tensor:
        v = torch.as_tensor(masses, device=self.device, dtype=torch.float64)
        if v.shape != slots.shape:
            raise ValueError(f"masses must have shape {tuple(slots.shape)}, got {tuple(v.shape)}")
        # bad values cannot be refused without reading them on the host: clamp them to what a mass can be
        return torch.nan_to_num(v, nan=0.0, posinf=float(torch.finfo(torch.float32).max)).clamp(
            0.0, float(torch.finfo(torch.float32).max))

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The state as host numpy arrays and numbers (the same keys as PriorityIndex's)."""
        return {"capacity": self.capacity, "fanout": None, "masses": self.masses[: self.capacity].cpu().numpy(),
                "generations": self.generations.cpu().numpy(), "max": float(self.max)}
