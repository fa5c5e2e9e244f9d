"""ItemArray: what every array of items in chunkstore offers, whatever holds the items.

:class:`~chunkstore.ChunkedArray` (compressed chunks in a host tier) and
:class:`~chunkstore.device.DeviceArray` (items encoded in torch device memory) both
implement it; code above them (the frame store, tools) is written against it and
asks for capabilities through it instead of testing the class:

* :attr:`ItemArray.device` -- ``None``: items are read as numpy arrays in host memory;
  a torch device: reads are tensors there.
* :attr:`ItemArray.supports_native_writes` -- the array also offers ``open_chunks()``,
  ``writable_chunk(c)``, ``open_empty(chunks)`` and ``seal_full(chunks)``: a native writer
  fills its open chunks in place, has the empty chunks it writes next opened, and seals the
  full ones (ChunkedArray).

Reads. ``take(indices)`` is ``np.take(arr, indices, axis=0)`` on both arrays: negative
indices count from the end, the result has shape ``(*indices.shape, *item_shape)``.
``take_padded(ids)`` reads ``-1`` as an all-zero item ("no frame"); ``take_into(ids, out)``
is ``take_padded`` into an existing output.

Writes. ``arr[key] = value``, ``write``, ``put``, ``discard``, ``remap`` and ``clear``
have one front-end (:class:`~chunkstore.array.frontend.WriteFrontEnd`): the same checks,
errors and semantics (numpy's: the last write to an index wins) on both arrays.

:class:`chunkstore.testing.arrays.ArrayTests` and
:func:`chunkstore.testing.arrays.array_machine` are the contract tests an
implementation runs.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["ItemArray"]


@runtime_checkable
class ItemArray(Protocol):
    """A fixed-capacity array of items stored in chunks of ``chunk_len`` items."""

    name: str
    item_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_len: int
    max_open: int

    # -- geometry and capabilities -------------------------------------------------------------
    @property
    def capacity(self) -> int: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def nchunks_total(self) -> int: ...

    @property
    def nchunks(self) -> int: ...

    @property
    def device(self) -> Any:
        """None for host memory (numpy reads); a torch device (reads are tensors there)."""

    @property
    def supports_native_writes(self) -> bool:
        """Whether ``open_chunks``/``writable_chunk``/``open_empty``/``seal_full`` are offered."""

    def __len__(self) -> int: ...

    # -- writes ----------------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None: ...

    def write(self, start: int, items: Any) -> None: ...

    def put(self, indices: Any, values: Any) -> None: ...

    def discard(self, start: int, stop: int) -> None: ...

    def remap(self, capacity: int, src: Any, dst: Any) -> None: ...

    def clear(self) -> None: ...

    def flush(self) -> None: ...

    # -- reads -----------------------------------------------------------------------------------
    def take(self, indices: Any) -> Any: ...

    def take_padded(self, ids: Any) -> Any: ...

    def take_into(self, ids: Any, out: Any) -> Any: ...

    def stored_chunks(self) -> np.ndarray: ...

    # -- sizes -----------------------------------------------------------------------------------
    @property
    def nbytes_stored(self) -> int:
        """What the items cost stored (encoded bytes and their index; a device array's device bytes too)."""

    @property
    def device_nbytes(self) -> int:
        """Device memory held (0 for host arrays)."""

    def held_info(self) -> dict[str, int]:
        """Host memory held, by kind: ``tier``, ``open_chunks``, ``spare_buffers``, ``chunk_table``."""

    @property
    def nbytes_held(self) -> int: ...

    def info(self) -> dict[str, Any]: ...

    # -- state and ownership -----------------------------------------------------------------------
    def snapshot(self, codec: Any = None) -> Any:
        """The contents now as an :class:`~chunkstore.array.ArraySnapshot`.

        ``codec``: the host codec for items not already encoded by one (a device array's).
        """

    def close(self) -> None: ...
