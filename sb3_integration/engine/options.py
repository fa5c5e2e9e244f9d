"""How a frame store keeps its frames: :class:`StoreOptions`, one object, one name per concept.

A buffer turns its store arguments into one :class:`StoreOptions`
(:mod:`sb3_integration.buffers.options`) and hands it to every
:class:`~sb3_integration.engine.frames.FrameStore` it makes, whole. Inside, each
concept has one name; the buffers' public keywords (SB3's and sb3-extra-buffers')
are translated once, at the buffer's constructor:

=====================  =====================  =============================================
public keyword         field here             what it is
=====================  =====================  =============================================
``compression_method``  ``codec``              codec name or :class:`~chunkstore.Codec`
``chunk_len``          ``chunk_len``          frames per chunk
``cache_bytes``        ``cache_bytes``        decoded-chunk cache (0: none)
``tier``               ``tier``               where host chunks live (None: RAM)
``threads``            ``threads``            threads sharing one batch's chunks
``frame_dedup``        ``dedup``              share the frames of stacked observations
``buffer_device``      ``device``             torch device of the frames (None: host)
``heap_bytes``         ``budget_bytes``       device bytes of frame records (None: default)
=====================  =====================  =============================================

``budget_bytes`` is the name :class:`~chunkstore.device.DeviceArray` gives it too; the
:class:`~chunkstore.device.heap.DeviceBudget` a buffer's stores share is the account that
holds that many bytes (:meth:`StoreOptions.budget`, a FrameStore's ``budget``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from chunkstore.array import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from chunkstore.validate import is_int

__all__ = ["CHUNK_LEN_ALWAYS", "LEGACY_NAMES", "MAX_CHUNK_BYTES", "StoreOptions", "check_chunk_len", "max_chunk_len"]

#: raw bytes of one chunk of frames, at most, counting a frame as a whole observation (a frame is
#: at most one): every read decodes whole chunks, so this bounds what one chunk costs to read, and
#: what a small saved file can make a load allocate (a chunk of zeros compresses ~10,000-fold)
MAX_CHUNK_BYTES = 64 << 20
#: a chunk_len this small is always allowed, whatever an observation's size (the presets' and the
#: rollout buffers' defaults among them): the bound is for chunks of many frames
CHUNK_LEN_ALWAYS = 32

#: field names of pickles written before the one-name rename (0.1.0 and 0.2 buffers' ``store_options``)
LEGACY_NAMES = {"compression_method": "codec", "buffer_device": "device", "heap_bytes": "budget_bytes",
                "frame_dedup": "dedup"}


@dataclass(frozen=True)
class StoreOptions:
    """How frames are stored: codec, chunks, cache, tier, threads, dedup, device and its budget.

    Plain values, compared and pickled as such (a buffer's pickle holds no live
    ``tier``). Build one from a buffer's keywords with
    :func:`sb3_integration.buffers.options.parse_store_options`, which checks them; a
    :class:`~sb3_integration.engine.frames.FrameStore` takes it whole (``options=``).

    Examples
    --------
    >>> StoreOptions(codec="zstd3", chunk_len=8).replace(dedup=False)
    StoreOptions(codec='zstd3', chunk_len=8, cache_bytes=0, tier=None, threads=None, dedup=False, device=None, ...)
    """

    codec: Any = DEFAULT_CODEC  # a codec name or a Codec
    chunk_len: int = DEFAULT_CHUNK_LEN
    cache_bytes: int = DEFAULT_CACHE_BYTES
    tier: Any = None  # a Tier, a zero-argument factory returning one, or None (RAM)
    threads: int | None = None
    dedup: bool = True
    device: Any = None  # a torch.device: frames live and decode there; None: host
    budget_bytes: int | None = None  # with device: the device bytes of frame records (None: default)

    def replace(self, **changes: Any) -> StoreOptions:
        """A copy with ``changes`` (field names); TypeError naming an unknown one."""
        unknown = [k for k in changes if k not in _FIELDS]
        if unknown:
            raise TypeError(f"StoreOptions has no field {unknown[0]!r}; its fields are {list(_FIELDS)}")
        return StoreOptions(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (shallow: the tier and codec objects as they are)."""
        return {name: getattr(self, name) for name in _FIELDS}

    @staticmethod
    def merge(options: StoreOptions | None, fields: dict[str, Any], cache_bytes: int | None = None,
              owner: str = "FrameStore") -> StoreOptions:
        """``options`` (default ``StoreOptions()``) with ``fields`` replacing its own, and an int cache size.

        TypeError, as Python words it for ``owner``'s ``__init__``, for a keyword that is no field.
        """
        if options is not None and not isinstance(options, StoreOptions):
            raise TypeError(f"options must be a StoreOptions, got {type(options).__name__}")
        unknown = [k for k in fields if k not in _FIELDS]
        if unknown:
            raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        if cache_bytes is not None:
            fields = {**fields, "cache_bytes": int(cache_bytes)}
        base = StoreOptions() if options is None else options
        return base.replace(**fields) if fields else base

    def budget(self) -> Any:
        """The :class:`~chunkstore.device.heap.DeviceBudget` a buffer's frame stores share (None: host frames).

        ``budget_bytes``, or by default half of a CUDA device's free memory now (no
        limit on other devices).
        """
        if self.device is None:
            return None
        import torch

        from chunkstore.device.heap import DeviceBudget, default_budget

        limit = self.budget_bytes if self.budget_bytes is not None else default_budget(torch, self.device)
        return DeviceBudget(limit)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a pickle from before the rename holds the old field names (and 0.1.0's lacks the device ones)
        renamed = {LEGACY_NAMES.get(k, k): v for k, v in state.items()}
        values = {name: renamed.get(name, getattr(StoreOptions, name)) for name in _FIELDS}
        self.__dict__.update(values)


_FIELDS = tuple(f.name for f in fields(StoreOptions))


def max_chunk_len(item_bytes: int) -> int:
    """The largest chunk_len for items (observations, or frames) of ``item_bytes`` bytes: chunks
    within :data:`MAX_CHUNK_BYTES`, and never less than :data:`CHUNK_LEN_ALWAYS`."""
    return max(MAX_CHUNK_BYTES // max(int(item_bytes), 1), CHUNK_LEN_ALWAYS)


def check_chunk_len(chunk_len: Any, obs_shape: tuple[int, ...], dtype: Any, name: str) -> int:
    """``chunk_len`` as an int, if it is one >= 1 and at most :func:`max_chunk_len` of an
    ``obs_shape`` observation; else a ValueError naming the store (``name``) and the bound."""
    if not is_int(chunk_len, minimum=1):
        raise ValueError(f"{name}: chunk_len must be >= 1 (an int), got {chunk_len!r}")
    obs_bytes = math.prod(obs_shape) * np.dtype(dtype).itemsize
    most = max_chunk_len(obs_bytes)
    if chunk_len > most:
        raise ValueError(f"{name}: chunk_len {int(chunk_len):,} makes chunks of up to {int(chunk_len) * obs_bytes:,} "
                         f"bytes (observations of {obs_bytes:,} bytes); a chunk holds at most "
                         f"{MAX_CHUNK_BYTES >> 20} MiB, so chunk_len <= {most:,} here "
                         "(every read decodes whole chunks: a few frames per chunk read fastest)")
    return int(chunk_len)
