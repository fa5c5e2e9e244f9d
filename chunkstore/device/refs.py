"""The reference pool: the raw items that records are encoded against, on the device.

Row 0 is the zero item (what unwritten, discarded and ``-1`` items decode to). Every
other row is a reference some live items use; it counts them and is recycled when
the count drops to zero (a row nobody counts is free). The host keeps a copy of every row (the encoder compares
new items with them); rows are few (a new one only when it pays for its bytes,
see :mod:`chunkstore.device.policy`), so the copy is small next to the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore.device.staging import StagingBuffer

__all__ = ["ReferencePool"]

_START_ROWS = 8


@dataclass(frozen=True)
class _Rows:
    """The pool's rows, their host copy and their user counts, replaced whole when the pool grows
    (one assignment: all-or-nothing under Ctrl-C). ``count`` changes in place, by single numpy calls."""

    rows: Any  # (n, item_nbytes) uint8 tensor on the device; None once closed
    host: np.ndarray  # the host copy of every row
    count: np.ndarray  # users per row; a row > 0 nobody uses is free
    version: int  # bumped when ``rows`` is reallocated (views of it are stale then)


class ReferencePool:
    """Reference items in a ``(rows, item_nbytes)`` uint8 device tensor, counted by their users.

    Parameters
    ----------
    torch
        The torch module.
    device
        A ``torch.device``.
    item_nbytes
        Bytes per item.

    Examples
    --------
    >>> import torch
    >>> pool = ReferencePool(torch, torch.device("cpu"), 4)
    >>> row = pool.add(np.array([1, 2, 3, 4], np.uint8))
    >>> pool.incref(np.array([row]))
    >>> pool.rows[row].tolist(), pool.live_rows
    ([1, 2, 3, 4], 1)
    """

    def __init__(self, torch: Any, device: Any, item_nbytes: int) -> None:
        self._torch, self.device, self.item_nbytes = torch, device, int(item_nbytes)
        self._staging = StagingBuffer(torch, device)
        self._table = _Rows(torch.zeros((_START_ROWS, self.item_nbytes), dtype=torch.uint8, device=device),
                            np.zeros((_START_ROWS, self.item_nbytes), np.uint8), np.zeros(_START_ROWS, np.int64), 0)

    @property
    def rows(self) -> Any:
        """The ``(n, item_nbytes)`` uint8 device tensor of every row (None once closed)."""
        return self._table.rows

    @property
    def host(self) -> np.ndarray:
        """The host copy of every row."""
        return self._table.host

    @property
    def count(self) -> np.ndarray:
        """Users per row (row 0, the zero item, is not counted; a row > 0 nobody uses is free)."""
        return self._table.count

    @property
    def version(self) -> int:
        """Bumped when :attr:`rows` is reallocated (views of it are stale then)."""
        return self._table.version

    # Interrupts (a KeyboardInterrupt between any two bytecodes): the pool's one piece of
    # bookkeeping is ``count``, changed by single numpy calls; free rows are read from it
    # (no free list to fall out of step), and growth installs rows, host and count in one
    # step (a new ``_Rows``). A row handed out by :meth:`add` is taken only by the :meth:`incref` that
    # follows: if an interrupt comes between them, the row is still free.

    def add(self, item: np.ndarray) -> int:
        """Store ``item`` (uint8, ``item_nbytes``) in a free row, uploaded now; its count is 0.

        The row stays free (the next ``add`` may hand it out again) until :meth:`incref`.
        """
        free = np.flatnonzero(self.count[1:] == 0)
        if free.size == 0:
            self._grow()
            free = np.flatnonzero(self.count[1:] == 0)
        row = int(free[0]) + 1
        self.host[row] = item
        self._staging.host(self.item_nbytes)[:] = item
        self._staging.upload(self.rows[row], self.item_nbytes)
        return row

    def _grow(self) -> None:
        torch = self._torch
        old = self.host.shape[0]
        rows = torch.empty((2 * old, self.item_nbytes), dtype=torch.uint8, device=self.device)
        rows[:old].copy_(self.rows)
        host = np.concatenate([self.host, np.zeros_like(self.host)])
        count = np.concatenate([self.count, np.zeros(old, np.int64)])
        # one step: rows, their host copy, their counts and the version always agree
        self._table = _Rows(rows, host, count, self.version + 1)

    def incref(self, rows: np.ndarray) -> None:
        """``rows`` gain a user each (row 0, the zero item, is not counted)."""
        rows = np.asarray(rows, np.int64)
        np.add.at(self.count, rows[rows != 0], 1)  # one call

    def decref(self, rows: np.ndarray) -> None:
        """Users of ``rows`` are gone; rows nobody uses any more are free again."""
        rows = np.asarray(rows, np.int64)
        rows = rows[rows != 0]
        if rows.size == 0:
            return
        gone = np.bincount(rows, minlength=self.count.size)
        if (gone > self.count).any():
            raise RuntimeError("reference counts would go negative: a bug in the caller")
        np.subtract(self.count, gone, out=self.count)  # one call

    def alive(self, row: int) -> bool:
        return row == 0 or self.count[row] > 0

    @property
    def live_rows(self) -> int:
        """Rows in use (the zero row not counted)."""
        return int(np.count_nonzero(self.count[1:]))

    @property
    def nbytes(self) -> int:
        """Device bytes of the pool (every row, used or free)."""
        return int(self.host.nbytes)

    @property
    def host_nbytes(self) -> int:
        return int(self.host.nbytes + self.count.nbytes + self._staging.nbytes)

    def close(self) -> None:
        self._staging.release()
        self._table = _Rows(None, self.host, self.count, self.version)
