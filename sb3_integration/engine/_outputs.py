"""Output blocks of a frame store's reads, reused once nothing refers to them.

A sample that maps a fresh multi-MB block every call pays its page faults (a
sample(256) of Atari stacks is 14.5 MB: ~3,500 faults), and the malloc thresholds
glibc raises after freeing such a block move the learner's own allocations too
(the process's malloc settings are never touched here). :class:`OutputBlocks`
keeps a few blocks and hands one out again only when nothing but itself refers
to it: the arrays a read returns are views of its block, and SB3 turns them into
torch tensors that share the memory and hold the view, so while any batch, or a
tensor made from it, is alive its block has more references and is not reused.
A reused block is never aliased with what a caller holds.

Examples
--------
>>> blocks = OutputBlocks()
>>> a = blocks.take((2, 3), np.dtype(np.uint8)); a[:] = 1
>>> b = blocks.take((2, 3), np.dtype(np.uint8))   # a is held: another block
>>> np.shares_memory(a, b)
False
>>> del a
>>> c = blocks.take((2, 3), np.dtype(np.uint8))   # a's block, free again
>>> blocks.nbytes
12
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = ["OUTPUT_BLOCKS", "OUTPUT_BLOCK_MAX_BYTES", "OutputBlocks"]

#: blocks kept (a caller that holds its previous batch while it samples the next needs two)
OUTPUT_BLOCKS = 3
#: the largest block kept: bigger reads (a whole buffer as one array) get a fresh block, not kept
OUTPUT_BLOCK_MAX_BYTES = 64 << 20


class OutputBlocks:
    """A few output blocks, each handed out again once nothing refers to it (see the module docstring)."""

    def __init__(self) -> None:
        self._blocks: list[np.ndarray] = []

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A block of ``shape`` and ``dtype`` whose contents the caller overwrites: reused or new."""
        if math.prod(shape) * dtype.itemsize > OUTPUT_BLOCK_MAX_BYTES:
            return np.empty(shape, dtype)
        block = _unheld(self._blocks, shape, dtype)
        if block is None:
            block = np.empty(shape, dtype)
            if len(self._blocks) >= OUTPUT_BLOCKS:
                self._blocks.pop(0)  # the oldest: if still held, its holders keep it alive
            self._blocks.append(block)
        return block

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks kept (held or free)."""
        return sum(b.nbytes for b in self._blocks)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # buffers, not state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._blocks = []


def _unheld(blocks: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """The first block of ``shape``/``dtype`` that nothing but ``blocks`` refers to (no view, no tensor)."""
    for block in blocks:
        if block.shape == shape and block.dtype == dtype and sys.getrefcount(block) <= _UNHELD:
            return block
    return None


def _references_in_loop(blocks: list[np.ndarray]) -> int:
    for block in blocks:  # the loop of _unheld: the list, the loop's name, getrefcount's argument
        return sys.getrefcount(block)
    return 0


#: what sys.getrefcount says of a block only the list refers to, measured (Pythons differ)
_UNHELD = _references_in_loop([np.empty(0)])
