"""DeviceTier: compressed chunk bytes parked in torch uint8 tensors on a device (``cpu`` or ``cuda``).

This is storage placement only, not GPU sampling: every read copies a chunk's bytes
back to the host, where the host codec decodes it (on CUDA a device-to-host copy per
chunk read). Use it to keep compressed chunks in spare device memory. For frames that
are decoded and stacked on the device, with samples that never leave it, use a
buffer's ``buffer_device`` option (:class:`chunkstore.device.DeviceArray`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from chunkstore._cuda_fork import check_process, forked_from, note_cuda_store
from chunkstore.errors import MissingBackendError
from chunkstore.tiers._base import ChunkRef
from chunkstore.tiers._segments import (
    DEFAULT_SEGMENT_BYTES,
    SegmentedTier,
    _Segment,
    read_only,
)

__all__ = ["DeviceTier"]


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise MissingBackendError(
            "DeviceTier needs PyTorch: install torch (see the README)") from exc
    return torch


class DeviceTier(SegmentedTier):
    """Encoded chunks in torch uint8 segment tensors on ``device`` (decoded on the host).

    On ``cpu``, ``get`` is a zero-copy read-only numpy view of the segment
    tensor. On ``cuda``, ``get`` copies the chunk to a fresh host array (a
    shared staging buffer would be overwritten under a concurrent reader): the
    ChunkedArray decodes it on the host like any tier's chunk. No decoder in
    this package reads ``get_tensor``'s device slice; GPU sampling is
    ``buffer_device`` (:mod:`chunkstore.device`), which does not use tiers.
    ``put`` copies host bytes through a pinned staging buffer on ``cuda``.

    Parameters
    ----------
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
    segment_bytes : int
        Size of one segment tensor (default 4 MiB).
    max_bytes : int, optional
        Hard limit on reserved bytes; beyond it ``put`` raises ``TierFullError``.

    Examples
    --------
    >>> tier = DeviceTier("cpu", segment_bytes=1 << 16)
    >>> ref = tier.put(b"hello")
    >>> bytes(tier.get(ref)), tier.get_tensor(ref).device.type
    (b'hello', 'cpu')
    """

    kind = "device"

    def __init__(self, device: Any = "cpu", *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 max_bytes: int | None = None) -> None:
        super().__init__(segment_bytes=segment_bytes, max_bytes=max_bytes)
        self._torch = torch = _import_torch()
        self.device = torch.device(device)
        self._on_cpu = self.device.type == "cpu"
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"DeviceTier({str(device)!r}): CUDA is not available here; "
                             "use device='cpu'")
        self._staging: Any = None  # pinned host buffer for cuda puts (writer only)
        self._staging_lock = threading.Lock()
        # a forked child must not touch the CUDA objects made here (chunkstore._cuda_fork)
        self._pid = note_cuda_store(self) if self.device.type == "cuda" else None

    def _check_process(self) -> None:
        """A forked child's copy of a CUDA tier refuses by name (the name is made only then: get is hot)."""
        if self._pid is not None:
            check_process(f"DeviceTier({str(self.device)!r})", self.device, self._pid)

    def close(self) -> None:
        if forked_from(self._pid):  # the parent's CUDA memory: releasing it here would call into CUDA
            self._closed = True
            return
        super().close()

    def put(self, data: Any) -> ChunkRef:
        self._check_process()
        return super().put(data)

    def put_many(self, data: Any, sizes: Any) -> np.ndarray:
        self._check_process()
        return super().put_many(data, sizes)

    def _settings(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (str(self.device),), {"segment_bytes": self.segment_bytes, "max_bytes": self.max_bytes}

    @property
    def ram_nbytes(self) -> int:
        """Segments on a CUDA device are not this process's host memory (the pinned staging buffer is)."""
        if self._on_cpu:
            return self._reserved
        return 0 if self._staging is None else int(self._staging.numel())

    def get(self, ref: ChunkRef) -> np.ndarray:
        self._check_process()
        view = super().get(ref)
        if self._on_cpu:
            return view
        return view.cpu().numpy()  # device -> host outside the tier lock

    def peek(self, ref: ChunkRef) -> np.ndarray:
        self._check_process()
        view = super().peek(ref)
        return view if self._on_cpu else view.cpu().numpy()

    def get_tensor(self, ref: ChunkRef) -> Any:
        """The chunk as a uint8 tensor slice on the tier's device (no copy)."""
        self._check_process()
        with self._lock:
            seg = self._live_segment(ref)
            return seg.data[ref[1]:ref[1] + ref[2]]

    def info(self) -> dict[str, Any]:
        out = super().info()
        out["device"] = str(self.device)
        return out

    def _allocate(self, seg: _Segment) -> None:
        seg.data = self._torch.empty(seg.capacity, dtype=self._torch.uint8, device=self.device)
        if self._on_cpu:
            seg.ro = read_only(seg.data.numpy())

    def _free_storage(self, seg: _Segment) -> None:
        seg.data = seg.ro = None

    def _write(self, seg: _Segment, offset: int, src: np.ndarray) -> None:
        n = src.size
        if self._on_cpu:
            seg.ro.base[offset:offset + n] = src  # the writable numpy view of the tensor
            return
        with self._staging_lock:
            torch = self._torch
            if self._staging is None or self._staging.numel() < n:
                self._staging = torch.empty(max(n, 1 << 20), dtype=torch.uint8, pin_memory=True)
            self._staging.numpy()[:n] = src
            seg.data[offset:offset + n].copy_(self._staging[:n])

    def read_lock(self) -> Any:
        if self._on_cpu:
            return super().read_lock()
        return super(SegmentedTier, self).read_lock()  # device memory: no host addresses

    def _address(self, seg: _Segment) -> tuple[int, int]:
        return (0 if seg.ro is None else int(seg.ro.ctypes.data)), -1

    def _view(self, seg: _Segment, offset: int, nbytes: int) -> Any:
        if self._on_cpu:
            return seg.ro[offset:offset + nbytes]
        return seg.data[offset:offset + nbytes]
