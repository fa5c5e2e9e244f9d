"""The device side of the frame store: frame stacks assembled on the device, and its checks.

A frame store whose frames live in a :class:`~chunkstore.device.DeviceArray` reads a
batch in three steps, and only the first runs on the host:

1. the host computes which frames each stack needs, from its own descriptors
   (:meth:`~sb3_integration.engine.frames.FrameStore.frame_ids`: ``(stacks, depth)`` item
   ids, ``-1`` for a padding frame);
2. :meth:`DeviceArray.take_padded` uploads one small block (the ids' header and any record
   not on the device) and decodes every frame of the batch, padding frames as zeros,
   in a fixed number of torch ops;
3. :func:`read_stacks` lays the frames out as stacks: a channel-first (or unstacked)
   observation is a view of them (the frames of a stack are consecutive along axis 0),
   a channel-last one is one permuted copy. Several kinds of stack read together
   (observations and next observations) come back as separate tensors of one block.

Every size is known on the host (the batch size, the layout), so nothing here reads
device data back: the torch ops are the same for a batch of 2 or 2,000, for 1 env
or 8. Counted on the cpu: 27 ops for the read and 2 for the layout (a channel-last
layout adds a permute and, for frames wider than one channel, a copy).

Also here, so that :mod:`sb3_integration.engine.frames` stays about the frame engine: the
checks a device store makes when built (:func:`check_device`) and unpickled
(:func:`available_device`), and its :meth:`~sb3_integration.engine.frames.FrameStore.info`
(:func:`device_info`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from chunkstore.device import torch_dtype
from sb3_integration.engine.stacking import StackLayout

__all__ = ["available_device", "check_device", "device_info", "read_stacks", "to_host"]


def read_stacks(frames: Any, layout: StackLayout, ids: np.ndarray, parts: int = 1) -> list[Any]:
    """The stacks of ``ids`` as ``parts`` tensors of ``(n, *obs_shape)`` on the frames' device.

    Parameters
    ----------
    frames
        A :class:`~chunkstore.device.DeviceArray` of frames (``layout.frame_shape``).
    layout
        How a stack splits into frames.
    ids
        ``(parts * n, depth)`` int64 item ids (``-1``: a zero frame), part after part.
    parts
        How many kinds of stack ``ids`` holds, in order.

    Examples
    --------
    >>> from chunkstore.device import DeviceArray
    >>> arr = DeviceArray(8, (2, 3), np.uint8, chunk_len=4)
    >>> arr.write(0, np.arange(48, dtype=np.uint8).reshape(8, 2, 3))
    >>> lay = StackLayout((4, 3), axis=0, width=2, depth=2)
    >>> obs, nxt = read_stacks(arr, lay, np.array([[-1, 0], [0, 1]]), parts=2)
    >>> obs.tolist()[0][:2], nxt.shape
    ([[0, 0, 0], [0, 0, 0]], torch.Size([1, 4, 3]))
    """
    if len(ids) % parts:
        raise ValueError(f"{len(ids)} stacks do not split into {parts} equal parts")
    n, shape = len(ids) // parts, layout.obs_shape
    flat = frames.take_padded(np.ascontiguousarray(ids, np.int64).reshape(-1))  # (parts * n * depth, *frame_shape)
    if layout.axis is None or layout.axis == 0:  # a stack's frames are consecutive: a view
        out = flat.view(parts, n, *shape)
    else:  # channel-last: frame j's channels go to the last axis, one permuted copy
        d, w = layout.depth, layout.width
        out = flat.view(parts, n, d, *shape[:-1], w).movedim(2, -2).reshape(parts, n, *shape)
    return list(out.unbind(0))


#: what a buffer whose frames are on torch's meta device answers when asked for data
META_NO_DATA = "a buffer on the meta device holds no data"


def check_not_meta(x: Any, to: Any, what: str) -> None:
    """ValueError (:data:`META_NO_DATA`) when ``x`` is a meta tensor to be copied to ``to``, a real device."""
    if getattr(getattr(x, "device", None), "type", None) == "meta" and _device_type(to) != "meta":
        raise ValueError(f"{META_NO_DATA}: it cannot {what} (build it with buffer_device='cpu' or 'cuda' "
                         "to keep data; the meta device is for shapes only)")


def _device_type(device: Any) -> str:
    import torch

    return torch.device(device).type if device is not None else "cpu"


def to_host(x: Any) -> Any:
    """A device tensor as a numpy array (a copy to the host: for inspection, never a sample)."""
    if hasattr(x, "detach"):
        if x.device.type == "meta":
            raise ValueError("observations on the 'meta' device have no values to read")
        return x.detach().cpu().numpy()
    return x


def check_device(device: Any, dtype: np.dtype, name: str) -> Any:
    """``device`` as a torch.device (None: host frames); refuses, now, what cannot work."""
    if device is None:
        return None
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: CUDA is not available here; use buffer_device='cpu' or None (host)")
    why = device_unusable(dev)
    if why is not None:
        raise ValueError(f"{name}: torch cannot use device {str(dev)!r} here ({why}); use 'cuda', 'cpu' or None "
                         "(host)")
    if torch_dtype(dtype) is None:
        raise TypeError(f"{name}: torch has no dtype for {dtype}; frames of this dtype can only be stored "
                        "on the host (buffer_device=None)")
    return dev


def device_unusable(dev: Any) -> str | None:
    """Why torch cannot make a tensor on ``dev`` (a torch.device) in this process, or None if it can.

    A device type torch knows by name may have no backend here (``"mps"`` off a Mac, ``"xla"``
    without torch_xla) or no such index: one empty tensor tells, at construction, instead of a
    torch error at the first ``add``.
    """
    import torch

    try:
        torch.empty(0, device=dev)
    except Exception as e:  # RuntimeError, NotImplementedError, AssertionError: whatever the backend says
        return " ".join(f"{type(e).__name__}: {e}".split()).split(". ")[0][:160]
    return None


def available_device(device: str | None, name: str) -> str | None:
    """A pickled store's device if it exists here; else None (host frames), with a warning."""
    if device is None:
        return None
    import torch

    dev = torch.device(device)
    if (dev.type == "cuda" and not torch.cuda.is_available()) or device_unusable(dev) is not None:
        warnings.warn(f"{name}: pickled with its frames on {device}, which is not available here; "
                      "they are kept in host memory instead", RuntimeWarning, stacklevel=3)
        return None
    return device


def device_info(store: Any, arr: Any) -> dict[str, Any]:
    """A device store's ``info()``: a host store's keys, plus the device's bytes and heap."""
    lay, dev = store.layout, arr.info()
    held = dev["record_nbytes"] + dev["reference_nbytes"]
    return {
        "name": store.name, "obs_shape": store.obs_shape, "dtype": str(store.dtype),
        "layout": lay.describe(), "stack_axis": lay.axis, "frame_width": lay.width, "depth": lay.depth,
        "ring_frames": store.ring_frames, "frames_written": store.frames_written,
        "frames_cbytes": held, "sealed_chunks": dev["nchunks"],
        "sealed_cratio": arr.nchunks * arr.chunk_len * arr.item_nbytes / max(held, 1),
        "index_nbytes": store.index_nbytes, "chunk_table_nbytes": dev["index_nbytes"],
        "nbytes_stored": store.nbytes_stored, "codec": f"device runs (saved with {store.codec})",
        "chunk_len": store.chunk_len, "device": str(store.device),
        "device_nbytes": dev["nbytes"], "frames_host_nbytes": dev["host_nbytes"],
        "device_record_nbytes": dev["record_nbytes"], "device_reference_nbytes": dev["reference_nbytes"],
        "references": dev["references"], "heap": dev["heap"],
    }
