"""The reference pool: the raw items that records are encoded against, on the device.

Row 0 is the zero item (what unwritten, discarded and ``-1`` items decode to). Every
other row is a reference some live items use; it counts them and is recycled when
the count drops to zero. The host keeps a copy of every row (the encoder compares
new items with them); rows are few (a new one only when it pays for its bytes,
see :mod:`chunkstore.device.policy`), so the copy is small next to the records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.device.staging import StagingBuffer

__all__ = ["ReferencePool"]

_START_ROWS = 8


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
        self.host = np.zeros((_START_ROWS, self.item_nbytes), np.uint8)  # the host copy of every row
        self.count = np.zeros(_START_ROWS, np.int64)
        self._free = list(range(_START_ROWS - 1, 0, -1))  # row 0 is the zero item, never freed
        self._staging = StagingBuffer(torch, device)
        self.rows = torch.zeros((_START_ROWS, self.item_nbytes), dtype=torch.uint8, device=device)
        self.version = 0  # bumped when ``rows`` is reallocated (views of it are stale then)

    def add(self, item: np.ndarray) -> int:
        """Store ``item`` (uint8, ``item_nbytes``) as a new row, uploaded now; its count is 0."""
        if not self._free:
            self._grow()
        row = self._free.pop()
        self.host[row] = item
        self._staging.host(self.item_nbytes)[:] = item
        self._staging.upload(self.rows[row], self.item_nbytes)
        return row

    def _grow(self) -> None:
        torch = self._torch
        old = self.host.shape[0]
        rows = torch.empty((2 * old, self.item_nbytes), dtype=torch.uint8, device=self.device)
        rows[:old].copy_(self.rows)
        self.rows = rows
        self.host = np.concatenate([self.host, np.zeros_like(self.host)])
        self.count = np.concatenate([self.count, np.zeros(old, np.int64)])
        self._free += list(range(2 * old - 1, old - 1, -1))
        self.version += 1

    def incref(self, rows: np.ndarray) -> None:
        """``rows`` gain a user each (row 0, the zero item, is not counted)."""
        rows = np.asarray(rows, np.int64)
        np.add.at(self.count, rows[rows != 0], 1)

    def decref(self, rows: np.ndarray) -> None:
        """Users of ``rows`` are gone; rows nobody uses any more are recycled."""
        rows = np.asarray(rows, np.int64)
        rows = rows[rows != 0]
        if rows.size == 0:
            return
        np.subtract.at(self.count, rows, 1)
        if self.count[rows].min() < 0:
            raise RuntimeError("reference counts went negative: a bug in the caller")
        self._free += np.unique(rows[self.count[rows] == 0]).tolist()

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
        self.rows = None
