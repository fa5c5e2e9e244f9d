"""How a buffer stores its observations: the store options, their defaults and presets, checked once.

:class:`StoreOptions` is what a buffer's store arguments (``preset``, ``chunk_len``,
``compression_method``, ``cache_bytes``, ``tier``, ``threads``, ``buffer_device``,
``heap_bytes``) become when the buffer is built; :func:`device_budget` the byte budget its
frame stores share on a device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import get_codec
from chunkstore.array import DEFAULT_CACHE_BYTES as CORE_CACHE_BYTES
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from sb3_integration.errors import UsageTypeError

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "PRESETS",
    "STORE_OPTIONS",
    "StoreOptions",
    "check_frame_dedup",
    "check_positive_or_none",
    "device_budget",
]

#: the store defaults, shared with the core (chosen by measurement; see the README):
#: codec name in sb3-extra-buffers' grammar (note that "zstd-3" means zstd level -3
#: there) -- zstd with a dictionary trained on the buffer's first frames -- and frames
#: per chunk. Small chunks keep a random read cheap; the dictionary keeps them small.
DEFAULT_COMPRESSION = DEFAULT_CODEC
#: budget of the decoded-chunk cache shared by a buffer's arrays: off (see chunkstore.array)
DEFAULT_CACHE_BYTES = CORE_CACHE_BYTES

#: named store settings for a buffer's ``preset=`` argument. "fast" is the default;
#: "compact" trades sampling speed for memory (longer chunks compress better but a
#: random read decodes more); measured figures are in the README.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"chunk_len": DEFAULT_CHUNK_LEN, "compression_method": DEFAULT_COMPRESSION},
    "compact": {"chunk_len": 32, "compression_method": "zstd3+dict"},
}


@dataclass(frozen=True)
class StoreOptions:
    """How a buffer stores its observations, validated when the buffer is built.

    Built by :meth:`resolve` from a buffer's keyword arguments: an explicit
    ``compression_method``/``chunk_len`` wins over the ``preset``'s.
    """

    compression_method: Any  # a codec name or a Codec
    chunk_len: int
    cache_bytes: int
    tier: Any  # a Tier, a zero-argument factory returning one, or None (RAM)
    threads: int | None
    buffer_device: Any = None  # a torch.device: observation frames live and decode there; None: host
    heap_bytes: int | None = None  # with buffer_device: the device bytes of frame records (None: default)

    @classmethod
    def resolve(cls, *, preset: str | None, compression_method: Any, chunk_len: Any, cache_bytes: Any,
                tier: Any, threads: Any, buffer_device: Any = None, heap_bytes: Any = None) -> StoreOptions:
        from chunkstore import Tier

        base = PRESETS.get(preset or "fast")
        if base is None:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        method = base["compression_method"] if compression_method is None else compression_method
        get_codec(method)  # a bad name fails here, listing the valid forms
        length = base["chunk_len"] if chunk_len is None else chunk_len
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"chunk_len must be an integer >= 1, got {chunk_len!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, (int, np.integer)) or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an integer >= 0, got {cache_bytes!r}")
        if tier is not None and not isinstance(tier, Tier) and not callable(tier):
            raise TypeError(f"tier must be a chunkstore Tier (MemoryTier, DiskTier, HybridTier, "
                            f"DeviceTier), a zero-argument factory returning one, or None; got {tier!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                    or threads < 1):
            raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")
        device, heap = _device_options(buffer_device, heap_bytes, tier)
        return cls(method, int(length), int(cache_bytes), tier, None if threads is None else int(threads),
                   device, heap)

    @classmethod
    def from_kwargs(cls, compression_method: Any, kwargs: dict[str, Any],
                    defaults: dict[str, Any] | None = None, *,
                    owner: str = "buffer") -> tuple[StoreOptions, bool, str]:
        """The replay buffers' keyword-only store options: ``(options, frame_dedup, small_arrays)``.

        ``kwargs`` may hold :data:`STORE_OPTIONS` only: any other is a TypeError worded
        as Python words it for ``owner``'s ``__init__`` (SB3's message for the same
        keyword), listing the valid ones; ``defaults`` replaces their defaults.
        """
        unknown = [key for key in kwargs if key not in STORE_OPTIONS]
        if unknown:
            raise UsageTypeError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}",
                                 f"the store options are {list(STORE_OPTIONS)}; sb3-extra-buffers' arguments "
                                 "are named dtypes, normalize_images, compression_method, compression_kwargs, "
                                 "decompression_kwargs, output_dtype")
        opt = {**STORE_OPTIONS, **(defaults or {}), **kwargs}
        options = cls.resolve(preset=opt["preset"], compression_method=compression_method,
                              chunk_len=opt["chunk_len"], cache_bytes=opt["cache_bytes"], tier=opt["tier"],
                              threads=opt["threads"], buffer_device=opt["buffer_device"],
                              heap_bytes=opt["heap_bytes"])
        return options, check_frame_dedup(opt["frame_dedup"]), opt["small_arrays"]


#: the keyword-only store options of the buffers, with their defaults
STORE_OPTIONS: dict[str, Any] = {"preset": None, "chunk_len": None, "cache_bytes": DEFAULT_CACHE_BYTES,
                                 "tier": None, "frame_dedup": True, "threads": None, "small_arrays": "auto",
                                 "buffer_device": None, "heap_bytes": None}


def check_frame_dedup(value: Any) -> bool:
    """``frame_dedup`` as a bool; TypeError for anything else (``"no"`` is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"frame_dedup must be True or False, got {value!r}")
    return bool(value)


def check_positive_or_none(name: str, value: Any) -> None:
    """ValueError unless ``value`` is None or a positive int (not a bool)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


def _device_options(buffer_device: Any, heap_bytes: Any, tier: Any) -> tuple[Any, int | None]:
    """``buffer_device`` as a torch.device (None: host) and ``heap_bytes``, checked now."""
    check_positive_or_none("heap_bytes", heap_bytes)
    if buffer_device is None:
        if heap_bytes is not None:
            raise ValueError("heap_bytes is the device budget of buffer_device: pass buffer_device too "
                             "(observations are in host memory without it)")
        return None, None
    import torch

    try:
        device = torch.device(buffer_device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"buffer_device must name a torch device ('cuda', 'cuda:1', 'cpu'), got "
                         f"{buffer_device!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"buffer_device={buffer_device!r}: CUDA is not available here; use buffer_device='cpu' "
                         "or None (host)")
    from sb3_integration.engine.device_stacks import device_unusable

    why = device_unusable(device)
    if why is not None:
        raise ValueError(f"buffer_device={buffer_device!r}: torch cannot use this device here ({why}); use "
                         "'cuda', 'cpu' or None (host)")
    if tier is not None:
        raise ValueError("tier places chunks in host memory or on disk; with buffer_device the frames live in "
                         "device memory (heap_bytes caps it, older segments spill to host RAM): pass one of them")
    return device, None if heap_bytes is None else int(heap_bytes)


def device_budget(options: StoreOptions) -> Any:
    """The :class:`~chunkstore.device.heap.DeviceBudget` a buffer's frame stores share (None: host frames).

    ``heap_bytes``, or by default half of a CUDA device's free memory at construction
    (no limit on other devices).
    """
    if options.buffer_device is None:
        return None
    import torch

    from chunkstore.device.heap import DeviceBudget, default_budget

    limit = options.heap_bytes if options.heap_bytes is not None else default_budget(torch, options.buffer_device)
    return DeviceBudget(limit)
