"""SB3's small per-transition arrays (actions, rewards, dones, timeouts) in compressed chunks.

SB3 keeps these as plain arrays: 20 bytes a transition for a Discrete action,
200 MB at 10M transitions, as much as the RAM budget of a larger-than-RAM
buffer. :class:`Columns` stores one record per row (every array's values for all
envs) in a :class:`~chunkstore.ChunkedArray` of ``chunk_len`` rows, and hands SB3
ndarray-like views (:class:`~sb3_integration.buffers.views.ObservationView` with a
writer) that its own code reads and writes as it would the arrays:
``_get_samples`` indexes them, ``NStepReplayBuffer`` patches ``timeouts`` for a
moment, HER and ``_setup_learn`` set ``dones``. Writes to an old row decode,
patch and re-encode one chunk (rare); the row being added goes into the open
chunk.

One sample reads each array once; the rows a sample needs are fetched once for
all four (``begin_batch`` / ``end_batch``), with one native gather.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from chunkstore import ChunkedArray
from sb3_integration.buffers.views import ObservationView, same_rows

__all__ = ["COLUMNS_CHUNK_LEN", "COLUMNS_CODEC", "SMALL_ARRAYS", "Columns"]

#: SB3's small per-transition arrays of a replay buffer
SMALL_ARRAYS = ("actions", "rewards", "dones", "timeouts")

#: rows per chunk: a sampled row decodes one chunk of ~1 KB
COLUMNS_CHUNK_LEN = 64
#: actions, rewards and flags compress well and must decode fast
COLUMNS_CODEC = "zstd1"


class Columns:
    """Arrays of shape ``(n_rows, n_envs, *shape)`` stored as compressed records of rows.

    Parameters
    ----------
    n_rows, n_envs
        SB3's ``buffer_size`` and ``n_envs``.
    fields
        ``{name: (dtype, shape)}`` per array (shape after ``(n_rows, n_envs)``).

    Examples
    --------
    >>> cols = Columns(100, 2, {"rewards": (np.float32, ()), "actions": (np.int64, (1,))})
    >>> cols.write_row(3, {"rewards": np.array([1.5, -2.0], np.float32), "actions": np.array([[4], [5]])})
    >>> views = cols.views()
    >>> views["rewards"][3].tolist(), views["actions"][3, 1].tolist()
    ([1.5, -2.0], [5])
    >>> views["rewards"][3, 0] = 7.0
    >>> float(views["rewards"][3, 0])
    7.0
    """

    def __init__(self, n_rows: int, n_envs: int, fields: dict[str, tuple[Any, tuple[int, ...]]], *,
                 chunk_len: int = COLUMNS_CHUNK_LEN, codec: str = COLUMNS_CODEC,
                 records: ChunkedArray | None = None) -> None:
        self.n_rows, self.n_envs = int(n_rows), int(n_envs)
        self.fields = {name: (np.dtype(dt), tuple(shape)) for name, (dt, shape) in fields.items()}
        self.dtype = np.dtype([(name, dt, (self.n_envs, *shape)) for name, (dt, shape) in self.fields.items()])
        if records is None:
            records = ChunkedArray(self.n_rows, (), self.dtype, chunk_len=min(chunk_len, self.n_rows),
                                   codec=codec, max_open=2, name="transitions")
        elif records.shape != (self.n_rows,) or records.dtype != self.dtype:
            raise ValueError(f"records are {records.shape} {records.dtype}; these columns need "
                             f"{(self.n_rows,)} {self.dtype}")
        self.records = records
        self._batch: tuple[np.ndarray, np.ndarray] | None = None  # rows fetched for the current sample

    # -- writing ---------------------------------------------------------------------
    def write_row(self, row: int, values: dict[str, np.ndarray]) -> None:
        """Row ``row`` of every array (values already in each array's dtype and shape)."""
        rec = np.zeros((), self.dtype)  # an array not given (timeouts when not handled) stays zero
        for name, v in values.items():
            rec[name] = v
        self.records[row] = rec
        self._batch = None

    def _write(self, name: str, rows: np.ndarray, envs: np.ndarray, values: np.ndarray) -> None:
        order = np.unique(rows)
        block = self.records.take(order)
        where = np.searchsorted(order, rows)
        block[name][where, envs] = values  # numpy order: the last write to a position wins
        self.records.put(order, block)
        self._batch = None

    # -- reading ---------------------------------------------------------------------
    def begin_batch(self) -> None:
        """Reads until :meth:`end_batch` that repeat the same rows share one fetch."""
        self._batch = None

    end_batch = begin_batch

    def _read(self, name: str, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        batch = self._batch
        if batch is None or not same_rows(batch[0], rows):
            batch = self._batch = (rows.copy(), self.records.take(rows))
        return batch[1][name][np.arange(len(rows)), envs]

    def views(self) -> dict[str, ObservationView]:
        """An ndarray-like, writable view per array."""
        return {
            name: ObservationView(partial(self._read, name), (self.n_rows, self.n_envs, *shape), dt, name=name,
                                  writer=partial(self._write, name))
            for name, (dt, shape) in self.fields.items()
        }

    def clear(self) -> None:
        self.records.clear()
        self._batch = None

    def close(self) -> None:
        """Give the records' storage back (the columns cannot be used afterwards)."""
        self.records.close()

    @property
    def nbytes(self) -> int:
        """Bytes held: compressed chunks, open chunks, chunk table."""
        return self.records.cbytes + self.records.table_nbytes

    @property
    def nbytes_held(self) -> int:
        """What the records cost the process (their tier with its slack, open and spare chunks, table)."""
        return self.records.nbytes_held

    def __getstate__(self) -> dict[str, Any]:
        # the records as plain state (bytes copied now): a caller holding its buffer's lock gets
        # this moment of them, not the one the pickler reaches later
        return {**self.__dict__, "_batch": None, "records": self.records.state_dict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        records = state["records"]
        if isinstance(records, dict):  # 0.1.0 pickled the ChunkedArray itself
            state = {**state, "records": ChunkedArray.from_state(records)}
        self.__dict__.update(state)
