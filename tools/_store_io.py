"""What the tools share: exit codes and one-line errors, and reading saved replay buffers.

A saved replay buffer (``CompressedReplayBuffer.save``; ``buffer_format``
``sb3_integration.replay_buffer`` version 1) keeps each observation key's distinct
frames in ``<prefix>/frames``, a ring of ``ring_frames`` slots per env, and each
stored observation as the slot of its newest frame (``<prefix>/slots``) and how many
leading frames are zero padding (``<prefix>/pads``), per ``[which, row, env]``
(which: 0 observation, 1 next observation). :func:`rebuild_stacks` turns those back
into observations; :func:`buffer_summary` counts transitions and bytes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore.errors import CorruptChunkError, CorruptFileError, FormatError

__all__ = [
    "CORRUPT",
    "OK",
    "UNREADABLE",
    "BufferKey",
    "buffer_keys",
    "buffer_summary",
    "guarded",
    "is_buffer",
    "one_line",
    "rebuild_stacks",
    "written_items",
]

OK, CORRUPT, UNREADABLE = 0, 1, 2
BUFFER_FORMAT = "sb3_integration.replay_buffer"
#: layout 1: the pad of a stack never written
UNWRITTEN_PAD = 255


def one_line(error: BaseException | str) -> str:
    """An error message on one line (HDF5's messages span several)."""
    return " ".join(str(error).split())


def guarded(tool: str, body: Callable[[], int]) -> int:
    """Run a tool's body: exit 1 for a corrupt file, 2 for an unreadable one, one line each."""
    try:
        return body()
    except (CorruptChunkError, CorruptFileError) as e:
        print(f"{tool}: corrupt: {one_line(e)}", file=sys.stderr)
        return CORRUPT
    except (FormatError, OSError) as e:
        print(f"{tool}: cannot read: {one_line(e)}", file=sys.stderr)
        return UNREADABLE
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, but still one line for the user
        print(f"{tool}: unexpected {type(e).__name__}: {one_line(e)} (please report it)",
              file=sys.stderr)
        return UNREADABLE


def written_items(arr: Any) -> np.ndarray:
    """Whether each item of a ChunkedArray lies in a stored chunk (unwritten ones read as 0)."""
    stored = np.zeros(arr.nchunks_total, bool)
    stored[arr.stored_chunks()] = True
    return np.repeat(stored, arr.chunk_len)[: arr.capacity]


# -- saved replay buffers ------------------------------------------------------------------
def is_buffer(store: Any) -> bool:
    return store.attrs.get("buffer_format") == BUFFER_FORMAT


@dataclass(frozen=True)
class BufferKey:
    """One observation key of a saved buffer: where its frames are, how stacks are built."""

    key: str | None
    prefix: str
    obs_shape: tuple[int, ...]
    dtype: np.dtype
    axis: int | None  # None: each observation is one frame
    width: int
    depth: int
    ring: int  # frame slots per env

    @property
    def frames(self) -> str:
        return f"{self.prefix}/frames"

    @property
    def obs_nbytes(self) -> int:
        return math.prod(self.obs_shape) * self.dtype.itemsize


def buffer_keys(store: Any) -> list[BufferKey]:
    """The observation keys of a saved buffer whose frames were stored."""
    out = []
    for key, meta in store.attrs["stores"]:
        lay = meta.get("layout")
        prefix = "observations" if key is None else f"observations/{key}"
        if lay is None:  # nothing was stored as frames yet
            continue
        out.append(BufferKey(key, prefix, tuple(meta["obs_shape"]), np.dtype(meta["dtype"]),
                             lay["axis"], int(lay["width"]), int(lay["depth"]),
                             int(meta["ring_frames"])))
    return out


def rebuild_stacks(store: Any, bk: BufferKey, rows: np.ndarray, env: int, which: int = 0) -> np.ndarray:
    """Observations ``[which, rows, env]`` of key ``bk``, rebuilt from frames, slots and pads."""
    slots = store.extras[f"{bk.prefix}/slots"][which, rows, env].astype(np.int64)
    pads = store.extras[f"{bk.prefix}/pads"][which, rows, env].astype(np.int64)
    k, n = bk.depth, len(rows)
    ids = slots[:, None] + np.arange(1 - k, 1)
    ids = ids % bk.ring + env * bk.ring
    padded = np.arange(k) < pads[:, None]  # leading all-zero frames were never stored
    ids = np.where(padded, ids[:, -1:], ids)
    frames = store.arrays[bk.frames].take(ids.reshape(-1))
    frames = frames.reshape(n, k, *frames.shape[1:])
    frames[padded] = 0
    if bk.axis is None:
        return frames[:, 0]
    if bk.axis == 0:
        return frames.reshape(n, *bk.obs_shape)
    return np.moveaxis(frames, 1, -2).reshape(n, *bk.obs_shape)


def _live_frames(store: Any, bk: BufferKey) -> int:
    """Frames held for env streams: written and not yet released (whole chunks are released)."""
    heads, released = (store.extras.get(f"{bk.prefix}/{n}") for n in ("heads", "released"))
    if heads is None or released is None:
        return int(written_items(store.arrays[bk.frames]).sum())
    return int(np.minimum(heads - released, bk.ring).sum())


def buffer_summary(store: Any, file_bytes: int) -> dict[str, Any]:
    """Transitions, frames and bytes of a saved replay buffer, against SB3's ReplayBuffer."""
    a = store.attrs
    size, n_envs, full, pos = int(a["buffer_size"]), int(a["n_envs"]), bool(a["full"]), int(a["pos"])
    live = (size if full else pos) * n_envs
    keys = buffer_keys(store)
    frames_bytes = sum(int(store.arrays[k.frames].chunk_nbytes().sum()) for k in keys)
    index_bytes = sum(int(store.extras[f"{k.prefix}/{name}"].nbytes) for k in keys
                      for name in ("slots", "pads", "last") if f"{k.prefix}/{name}" in store.extras)
    stored = frames_bytes + index_bytes
    per_obs = sum(math.prod(meta["obs_shape"]) * np.dtype(meta["dtype"]).itemsize
                  for _, meta in a["stores"])
    sb3 = per_obs * (1 if a.get("optimize_memory_usage") else 2)
    return {
        "buffer_class": a.get("buffer_class"),
        "transitions_live": live,
        "transitions_capacity": size * n_envs,
        "buffer_size": size,
        "n_envs": n_envs,
        "full": full,
        "frames_written": sum(int(meta.get("frames_written", 0)) for _, meta in a["stores"]),
        "frames_stored": sum(_live_frames(store, k) for k in keys),
        "frame_ring_slots": sum(k.ring * n_envs for k in keys),
        "stacks": [{"key": k.key, "obs_shape": list(k.obs_shape), "depth": k.depth,
                    "stack_axis": k.axis} for k in keys],
        "observation_bytes": stored,
        "bytes_per_transition": stored / live if live else None,
        "file_bytes_per_transition": file_bytes / live if live else None,
        "sb3_bytes_per_transition": sb3,
        "ratio_vs_sb3": sb3 * live / stored if live and stored else None,
    }
