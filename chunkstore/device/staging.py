"""Host buffers that bytes travel through on their way to the device.

On CUDA a copy from pageable memory blocks the host until the GPU's queue drains;
from page-locked ("pinned") memory it is queued like a kernel
(``non_blocking=True``) and the host goes on. A pinned buffer may be refilled only
once its last upload has run, so each buffer records a CUDA event after its upload
and :meth:`StagingBuffer.ready` waits on it (normally long done: the upload was
queued before the kernels that read it). On any other device the buffers are
ordinary memory and copies are synchronous.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["StagingBuffer", "StagingRing"]

#: staging buffers a ring holds before a read waits for an old upload to finish
MAX_IN_FLIGHT = 8


class _Views(NamedTuple):
    """The two views of one host buffer, replaced together (one assignment)."""

    tensor: Any  # uint8 torch tensor (pinned on CUDA), or None when released
    array: np.ndarray  # the same bytes as a numpy array


class StagingBuffer:
    """A growable host byte buffer, pinned on CUDA, with a numpy view for the host side.

    Parameters
    ----------
    torch
        The torch module.
    device
        The device uploads go to (a ``torch.device``).
    nbytes
        Initial size.

    Examples
    --------
    >>> import torch
    >>> buf = StagingBuffer(torch, torch.device("cpu"), 16)
    >>> buf.host(4)[:] = [1, 2, 3, 4]
    >>> dst = torch.zeros(4, dtype=torch.uint8)
    >>> buf.upload(dst, 4)
    >>> dst.tolist()
    [1, 2, 3, 4]
    """

    def __init__(self, torch: Any, device: Any, nbytes: int = 0) -> None:
        self._torch = torch
        self._pin = device.type == "cuda"
        self._event: Any = None
        self._views = _Views(None, np.zeros(0, np.uint8))
        if nbytes:
            self._allocate(nbytes)

    @property
    def tensor(self) -> Any:
        """The buffer as a uint8 torch tensor (None when released)."""
        return self._views.tensor

    @property
    def array(self) -> np.ndarray:
        """The buffer as a numpy array (the same bytes)."""
        return self._views.array

    @property
    def nbytes(self) -> int:
        return int(self._views.array.nbytes)

    def _allocate(self, nbytes: int) -> None:
        torch = self._torch
        tensor = torch.empty(int(nbytes), dtype=torch.uint8, pin_memory=self._pin)
        self._views = _Views(tensor, tensor.numpy())

    def busy(self) -> bool:
        """Whether the last upload from this buffer may still be running (never waits)."""
        return self._event is not None and not self._event.query()

    def ready(self) -> None:
        """Wait until the last upload from this buffer has run (CUDA; a no-op elsewhere)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None

    def host(self, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of the buffer, writable, once it is safe to overwrite."""
        self.ready()
        if nbytes > self.array.nbytes:
            self._allocate(max(int(nbytes), 2 * self.array.nbytes))
        return self.array[:nbytes]

    def upload(self, dst: Any, nbytes: int, start: int = 0) -> None:
        """Copy ``nbytes`` from ``start`` into the device tensor ``dst`` (queued on CUDA)."""
        dst.copy_(self.tensor[start:start + nbytes], non_blocking=True)
        if self._pin:
            self._event = self._torch.cuda.Event()
            self._event.record()

    def release(self) -> None:
        """Drop the storage (waits for a pending upload first)."""
        self.ready()
        self._views = _Views(None, np.zeros(0, np.uint8))


class StagingRing:
    """Staging buffers for reads, used in turn without waiting on the device.

    A read takes a buffer whose last upload is done (asked with a non-blocking event
    query); if all are busy it adds one, up to :data:`MAX_IN_FLIGHT`, and only then
    waits for the oldest. The host can thus queue several reads ahead of the GPU.

    Examples
    --------
    >>> import torch
    >>> ring = StagingRing(torch, torch.device("cpu"))
    >>> ring.acquire().host(8).size
    8
    """

    def __init__(self, torch: Any, device: Any) -> None:
        self._torch, self._device = torch, device
        self._buffers = [StagingBuffer(torch, device)]
        self._next = 0

    def acquire(self) -> StagingBuffer:
        n = len(self._buffers)
        for k in range(n):
            buf = self._buffers[(self._next + k) % n]
            if not buf.busy():
                self._next = (self._next + k + 1) % n
                return buf
        if n < MAX_IN_FLIGHT:
            self._buffers.append(StagingBuffer(self._torch, self._device))
            return self._buffers[-1]
        buf = self._buffers[self._next]  # the oldest: host() waits for it
        self._next = (self._next + 1) % n
        return buf

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers)

    def release(self) -> None:
        for b in self._buffers:
            b.release()
