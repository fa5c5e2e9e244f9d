"""How a buffer stores its observations: the store options, their defaults and presets, checked once.

:func:`parse_store_options` is the one path from a buffer's store arguments (``compression_method``
and the keyword-only ``preset``, ``chunk_len``, ``cache_bytes``, ``tier``, ``frame_dedup``,
``threads``, ``buffer_device``, ``heap_bytes``; their public names) to the
:class:`~sb3_integration.engine.options.StoreOptions` the buffer's frame stores take whole
(one internal name per concept: see that module); every buffer, replay and rollout, goes
through it, with the same checks and the same error for a keyword it does not take.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunkstore import Tier, get_codec
from chunkstore.array import DEFAULT_CACHE_BYTES as CORE_CACHE_BYTES
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from chunkstore.tiers import check_tier
from chunkstore.validate import is_int
from sb3_integration.buffers.observations import stack_axis_order, subspaces
from sb3_integration.engine.frames import FrameStore
from sb3_integration.engine.options import StoreOptions
from sb3_integration.engine.raw import AUTO, RawStore
from sb3_integration.errors import UsageTypeError

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "PRESETS",
    "STORE_OPTIONS",
    "StoreOptions",
    "check_frame_dedup",
    "check_keywords",
    "check_load_options",
    "check_positive_or_none",
    "device_budget",
    "make_frame_stores",
    "parse_store_options",
]

#: the store defaults, shared with the core (chosen by measurement; see docs/performance.md):
#: codec name in sb3-extra-buffers' grammar (note that "zstd-3" means zstd level -3
#: there) -- zstd with a dictionary trained on the buffer's first frames -- and frames
#: per chunk. Small chunks keep a random read cheap; the dictionary keeps them small.
DEFAULT_COMPRESSION = DEFAULT_CODEC
#: budget of the decoded-chunk cache shared by a buffer's arrays: off (see chunkstore.array)
DEFAULT_CACHE_BYTES = CORE_CACHE_BYTES

#: named store settings for a buffer's ``preset=`` argument. "fast" is the default;
#: "compact" trades sampling speed for memory (longer chunks compress better but a
#: random read decodes more); measured figures are in docs/performance.md.
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"chunk_len": DEFAULT_CHUNK_LEN, "compression_method": DEFAULT_COMPRESSION},
    "compact": {"chunk_len": 32, "compression_method": "zstd3+dict"},
}


def parse_store_options(owner: type, compression_method: Any, kwargs: dict[str, Any], *,
                        accepted: Sequence[str] = (), defaults: dict[str, Any] | None = None,
                        ) -> tuple[StoreOptions, str]:
    """A buffer's keyword-only store options, checked: ``(options, small_arrays)``.

    (``observation_storage``, a replay buffer's per-key choice, is checked by the buffer against its
    keys: :func:`sb3_integration.engine.raw.parse_storage`.)

    The one path from a buffer's keywords (public names, :data:`STORE_OPTIONS`) to the
    :class:`StoreOptions` its frame stores take whole. ``kwargs`` may hold the names in
    ``accepted`` (default: all of :data:`STORE_OPTIONS`); any other is the TypeError
    Python raises for ``owner``'s ``__init__`` (SB3's message for the same keyword),
    listing the accepted ones. ``defaults`` replaces their defaults. An explicit
    ``compression_method``/``chunk_len`` wins over the ``preset``'s.
    """
    check_keywords(owner, kwargs, accepted)
    opt = {**STORE_OPTIONS, **(defaults or {}), **kwargs}
    preset = opt["preset"]
    base = PRESETS.get(preset or "fast")
    if base is None:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    method = base["compression_method"] if compression_method is None else compression_method
    get_codec(method)  # a bad name fails here, listing the valid forms
    length = base["chunk_len"] if opt["chunk_len"] is None else opt["chunk_len"]
    if not is_int(length, minimum=1):
        raise ValueError(f"chunk_len must be an integer >= 1, got {opt['chunk_len']!r}")
    cache_bytes, tier, threads = opt["cache_bytes"], opt["tier"], opt["threads"]
    if not is_int(cache_bytes, minimum=0):
        raise ValueError(f"cache_bytes must be an integer >= 0, got {cache_bytes!r}")
    if tier is not None and not isinstance(tier, Tier) and not callable(tier):
        raise TypeError(f"tier must be a chunkstore Tier (MemoryTier, DiskTier, HybridTier, "
                        f"DeviceTier), a zero-argument factory returning one, or None; got {tier!r}")
    if threads is not None and not is_int(threads, minimum=1):
        raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")
    dedup = check_frame_dedup(opt["frame_dedup"])
    device, budget = _device_options(opt["buffer_device"], opt["heap_bytes"], tier)
    options = StoreOptions(codec=method, chunk_len=int(length), cache_bytes=int(cache_bytes), tier=tier,
                           threads=None if threads is None else int(threads), dedup=dedup, device=device,
                           budget_bytes=budget)
    return options, opt["small_arrays"]


def check_keywords(owner: type, kwargs: dict[str, Any], accepted: Sequence[str] = ()) -> None:
    """The TypeError Python raises for ``owner``'s ``__init__`` unless ``kwargs`` are store options it takes.

    ``accepted`` (default: all of :data:`STORE_OPTIONS`) are the ones ``owner`` takes; the
    hint lists them and the constructor's named arguments.
    """
    names = tuple(accepted) or tuple(STORE_OPTIONS)
    unknown = [key for key in kwargs if key not in names]
    if unknown:
        raise UsageTypeError(f"{owner.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}",
                             f"{owner.__name__}'s store options are {', '.join(names)}; its other arguments "
                             f"are {_named_arguments(owner)}")


def _named_arguments(owner: type) -> str:
    """The named parameters of ``owner``'s constructor (SB3's, sb3-extra-buffers'), for an error's hint."""
    try:
        params = inspect.signature(owner.__init__).parameters.values()  # type: ignore[misc]
    except (TypeError, ValueError):
        return "?"
    return ", ".join(p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))


#: the keyword-only store options of the buffers, with their defaults
STORE_OPTIONS: dict[str, Any] = {"preset": None, "chunk_len": None, "cache_bytes": DEFAULT_CACHE_BYTES,
                                 "tier": None, "frame_dedup": True, "threads": None, "small_arrays": "auto",
                                 "buffer_device": None, "heap_bytes": None, "observation_storage": AUTO}


def check_frame_dedup(value: Any) -> bool:
    """``frame_dedup`` as a bool; TypeError for anything else (``"no"`` is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"frame_dedup must be True or False, got {value!r}")
    return bool(value)


def check_positive_or_none(name: str, value: Any) -> None:
    """ValueError unless ``value`` is None or a positive int (not a bool)."""
    if value is not None and not is_int(value, minimum=1):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


def check_load_options(*, tier: Any, buffer_device: Any, heap_bytes: Any) -> None:
    """A buffer ``load()``'s store options, checked as the constructor checks them, before the file
    is read: a bad one is the caller's TypeError / ValueError, not a damaged file's FormatError."""
    check_tier(tier)
    _device_options(buffer_device, heap_bytes, tier)


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


def make_frame_stores(space: Any, n_rows: int, n_envs: int, stacks_per_row: int, options: StoreOptions, *,
                 cache: Any = 0, host_keys: Any = (), raw_keys: Any = (), follow: bool = False) -> dict[Any, Any]:
    """A buffer's frame stores: one per observation key of ``space``, each taking ``options`` whole.

    They share ``cache`` (an :class:`~chunkstore.LRUChunkCache`, or 0: none) and, with
    ``options.device``, one device budget (:meth:`StoreOptions.budget`); the keys in
    ``host_keys`` keep their frames in host memory (HER's goals). The keys in ``raw_keys``
    are :class:`~sb3_integration.engine.raw.RawStore` objects instead (SB3's arrays; ``follow``:
    its ``optimize_memory_usage`` layout).
    """
    from stable_baselines3.common.preprocessing import get_obs_shape

    budget, on_host = options.budget(), options.replace(device=None, budget_bytes=None)
    return {
        key: RawStore(tuple(get_obs_shape(sub)), sub.dtype, n_rows, n_envs,  # type: ignore[arg-type]
                      stacks_per_row=stacks_per_row, follow=follow,
                      name="observations" if key is None else f"observations[{key}]")
        if key in raw_keys else
        FrameStore(tuple(get_obs_shape(sub)), sub.dtype, n_rows, n_envs,  # type: ignore[arg-type]
                        options=on_host if key in host_keys else options, stacks_per_row=stacks_per_row,
                        axis_order=stack_axis_order(sub), cache=cache, budget=None if key in host_keys else budget,
                        name="observations" if key is None else f"observations[{key}]")
        for key, sub in subspaces(space).items()
    }


def device_budget(options: StoreOptions) -> Any:
    """The :class:`~chunkstore.device.heap.DeviceBudget` a buffer's frame stores share (None: host frames).

    The name from before the one-name rename, kept for its imports: :meth:`StoreOptions.budget
    <sb3_integration.engine.options.StoreOptions.budget>`.
    """
    return options.budget()
