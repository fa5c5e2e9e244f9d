"""Checks of a saved replay buffer's state, before a buffer is built from it.

Everything the file declares is checked against what it holds before anything is
allocated: SB3 would allocate ``buffer_size * n_envs`` rows for each of its arrays
(a crafted ``buffer_size`` asked for 112 GiB), and an out-of-range ``pos`` or
frame index would only fail later, or read wrong rows. Every refusal is a
:class:`~chunkstore.errors.FormatError` naming the file and the value.

Buffer layouts: version 1 keeps the constructor arguments flat in the attributes
and frame slots as positions in the ring, ``(stacks per row, buffer_size, n_envs)``;
version 2 keeps the arguments under ``arguments``, the first stack's slot as a
global frame number ``(buffer_size, n_envs)`` and the others' as ``deltas``. Both
keep ``pos``, ``full`` and ``pads`` ``(stacks per row, buffer_size, n_envs)``, which
bound every size the buffer would allocate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from chunkstore.errors import FormatError
from chunkstore.validate import is_int
from sb3_integration.engine.options import MAX_CHUNK_BYTES, max_chunk_len

__all__ = ["check_saved_buffer"]

#: layout 1's SB3 arrays, saved as extras of shape (buffer_size, n_envs, ...)
SB3_ARRAYS = ("actions", "rewards", "dones", "timeouts")
#: the pad of a stack never written (more padding than any stack has frames)
UNWRITTEN_PAD = 255
#: chunks a frame store keeps open, at most: one per env plus one, for any sane n_envs
MAX_OPEN = 1 << 16


def check_saved_buffer(attrs: Mapping[str, Any], store: Any) -> None:
    """Refuse a saved buffer whose sizes or state are out of range (``store``: a loaded Store)."""
    path = store.path
    version = attrs.get("buffer_format_version")
    args = attrs if version == 1 else attrs.get("arguments")
    if not isinstance(args, Mapping):
        raise FormatError(f"{path}: the buffer's arguments are missing")
    size = _int(args, "buffer_size", path, lo=1)
    n_envs = _int(args, "n_envs", path, lo=1)
    _int(attrs, "pos", path, lo=0, hi=size - 1)
    if not isinstance(attrs.get("full"), bool):
        raise FormatError(f"{path}: 'full' is {attrs.get('full')!r}, not true or false")
    _int(args, "chunk_len", path, lo=1)
    _int(args, "cache_bytes", path, lo=0)
    _check_nstep(attrs.get("nstep") if version == 1 else args, path, size)
    sb3_arrays = SB3_ARRAYS if version == 1 else attrs.get("arrays", [])
    for name in sb3_arrays:
        if name.startswith("extra/"):  # a subclass's own arrays (HER): checked by it when restored
            continue
        value = store.extras.get(name)
        if value is None or value.shape[:2] != (size, n_envs):
            got = None if value is None else value.shape
            raise FormatError(f"{path}: {name!r} has shape {got}, but the buffer declares "
                              f"buffer_size {size} and n_envs {n_envs}")
    for name in ([] if version == 1 else attrs.get("chunked", [])):  # small arrays kept compressed
        arr = store.arrays.get(name)
        if arr is None or arr.shape[:1] != (size,):
            raise FormatError(f"{path}: {name!r} has shape {None if arr is None else arr.shape}, but the "
                              f"buffer declares buffer_size {size}")
    stores = attrs.get("stores")
    if not isinstance(stores, list) or not all(isinstance(s, list) and len(s) == 2 for s in stores):
        raise FormatError(f"{path}: 'stores' is not a list of [key, state] pairs")
    for key, meta in stores:
        prefix = "observations" if key is None else f"observations/{key}"
        _check_frame_store(meta, store, prefix, size, n_envs, version)


def _check_nstep(source: Any, path: str, size: int) -> None:
    """n-step arguments, where present: ``{n_steps, gamma}`` (layout 1) or among the arguments."""
    if source is None or (isinstance(source, Mapping) and "n_steps" not in source):
        return
    if not isinstance(source, Mapping) or "gamma" not in source:
        raise FormatError(f"{path}: n-step arguments {source!r} are not {{n_steps, gamma}}")
    _int(source, "n_steps", path, lo=1, hi=size)
    gamma = source["gamma"]
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
        raise FormatError(f"{path}: n-step gamma {gamma!r} is not in [0, 1]")


def _check_frame_store(meta: Any, store: Any, prefix: str, size: int, n_envs: int,
                       version: Any) -> None:
    path = store.path
    if not isinstance(meta, dict):
        raise FormatError(f"{path}: the state of {prefix} is not an object")
    if meta.get("storage") == "raw":
        _check_raw_store(meta, store, prefix, size, n_envs)
        return
    used = meta.get("used")
    if not isinstance(used, list) or not used or not all(isinstance(u, bool) for u in used):
        raise FormatError(f"{path}: {prefix} 'used' is {used!r}, not a list of booleans")
    _int(meta, "pending", path, lo=0, hi=len(used) * size)
    for name in ("n_rows", "n_envs"):
        if name in meta and meta[name] != (size if name == "n_rows" else n_envs):
            raise FormatError(f"{path}: {prefix} {name} {meta[name]!r} differs from the buffer's")
    shapes: dict[str, tuple[int, ...]] = {"slots": (len(used), size, n_envs), "pads": (len(used), size, n_envs)}
    if version != 1:  # slots of the first stack, deltas of the others (layout 2)
        shapes.update(slots=(size, n_envs), deltas=(len(used) - 1, size, n_envs))
    for name, shape in shapes.items():
        value = store.extras.get(f"{prefix}/{name}")
        if value is None or value.shape != shape:
            raise FormatError(f"{path}: {prefix}/{name} is missing or not of shape {shape}")
    frames = store.arrays.get(f"{prefix}/frames")
    if frames is not None and frames.chunk_len > max_chunk_len(frames.dtype.itemsize * int(np.prod(frames.item_shape))):
        raise FormatError(f"{path}: {prefix}/frames declares chunks of {frames.chunk_len:,} frames of "
                          f"{frames.item_shape}, more than the {MAX_CHUNK_BYTES >> 20} MiB a chunk of frames "
                          "may hold; refusing to load it")
    layout = meta.get("layout")
    if layout is None:
        return
    if not isinstance(layout, dict):
        raise FormatError(f"{path}: {prefix} layout {layout!r} is not an object")
    depth = _int(layout, "depth", path, lo=1, hi=UNWRITTEN_PAD - 1)
    pads = store.extras[f"{prefix}/pads"]
    bad = (pads > depth) & (pads != UNWRITTEN_PAD)
    if bad.any():
        raise FormatError(f"{path}: {prefix}/pads holds padding {int(pads[bad][0])} for stacks of "
                          f"{depth} frames")
    if version == 1:
        _check_ring_v1(meta, store, prefix, n_envs)


def _check_raw_store(meta: Mapping[str, Any], store: Any, prefix: str, size: int, n_envs: int) -> None:
    """A raw key (layout 3): its array ``(1 or 2, buffer_size, n_envs, *obs_shape)`` as declared."""
    path = store.path
    for name, want in (("n_rows", size), ("n_envs", n_envs)):
        if meta.get(name) != want:
            raise FormatError(f"{path}: {prefix} {name} {meta.get(name)!r} differs from the buffer's")
    spr = _int(meta, "stacks_per_row", path, lo=1, hi=2)
    shape = meta.get("obs_shape")
    if not isinstance(shape, list) or not all(is_int(d, 0) for d in shape):
        raise FormatError(f"{path}: {prefix} obs_shape {shape!r} is not a list of sizes")
    follow = meta.get("follow")
    if not isinstance(follow, bool):
        raise FormatError(f"{path}: {prefix} 'follow' is {follow!r}, not true or false")
    try:
        dtype = np.dtype(meta.get("dtype"))
    except (TypeError, ValueError):
        raise FormatError(f"{path}: {prefix} dtype {meta.get('dtype')!r} is not a numpy dtype") from None
    expected = (1 if follow else spr, size, n_envs, *shape)
    value = store.extras.get(f"{prefix}/raw")
    if value is None or value.shape != expected or value.dtype != dtype:
        got = None if value is None else (value.shape, value.dtype)
        raise FormatError(f"{path}: {prefix}/raw is {got}, the buffer declares {(expected, dtype)}")


def _check_ring_v1(meta: Mapping[str, Any], store: Any, prefix: str, n_envs: int) -> None:
    """Layout 1: slots are positions in a ring of ``ring_frames`` per env."""
    path = store.path
    ring = _int(meta, "ring_frames", path, lo=1)
    _int(meta, "max_open", path, lo=1, hi=MAX_OPEN)
    _int(meta, "frames_written", path, lo=0)
    slots = store.extras[f"{prefix}/slots"]
    if slots.size and int(slots.max()) >= ring:
        raise FormatError(f"{path}: {prefix}/slots holds frame {int(slots.max())}, beyond the "
                          f"ring of {ring} frames")
    for name in ("heads", "released"):
        value = store.extras.get(f"{prefix}/{name}")
        if value is None or value.shape != (n_envs,) or (value < 0).any():
            raise FormatError(f"{path}: {prefix}/{name} is missing, negative or not one per env")
    if (store.extras[f"{prefix}/released"] > store.extras[f"{prefix}/heads"]).any():
        raise FormatError(f"{path}: {prefix} released frames beyond its stream heads")


def _int(mapping: Mapping[str, Any], key: str, path: str, *, lo: int, hi: int | None = None) -> int:
    """``mapping[key]``, an int within ``lo..hi``, else FormatError naming it."""
    value = mapping.get(key)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < lo or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise FormatError(f"{path}: {key!r} is {value!r}, outside {span}")
    return int(value)
