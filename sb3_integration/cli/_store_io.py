"""What the console tools share: exit codes and one-line errors, and reading saved replay buffers.

A saved replay buffer (``CompressedReplayBuffer.save``, attribute ``buffer_format``
``sb3_integration.replay_buffer``) keeps each observation key's distinct frames in
``<prefix>/frames`` (``observations`` or ``observations/<key>``) and, per stored
observation, where its newest frame is and how many leading frames are padding.
Whole observations are rebuilt by the buffer class itself (:func:`open_buffer`),
so the tools never restate the frame engine; :func:`buffer_summary` reads only
what every layout version keeps: the arguments, ``pos``, ``full``, each key's
shape, dtype and stack layout.
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
    "buffer_arguments",
    "buffer_keys",
    "buffer_summary",
    "guarded",
    "is_buffer",
    "one_line",
    "open_buffer",
    "written_items",
]

OK, CORRUPT, UNREADABLE = 0, 1, 2
BUFFER_FORMAT = "sb3_integration.replay_buffer"


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


def buffer_arguments(store: Any) -> dict[str, Any]:
    """The buffer's constructor arguments (flat in layout 1, under ``arguments`` since)."""
    a = store.attrs
    return dict(a["arguments"]) if isinstance(a.get("arguments"), dict) else dict(a)


def open_buffer(path: str, store: Any) -> Any:
    """The replay buffer saved in ``path`` (its own class's ``load``), for whole observations."""
    import sb3_integration

    name = store.attrs.get("buffer_class")
    cls = getattr(sb3_integration, str(name), None)
    if cls is None or not hasattr(cls, "load"):
        raise FormatError(f"{path} holds a {name!r}, which this sb3_integration cannot load")
    return cls.load(path, device="cpu")


@dataclass(frozen=True)
class BufferKey:
    """One observation key of a saved buffer: its frames array and stack layout."""

    key: str | None
    prefix: str
    obs_shape: tuple[int, ...]
    dtype: np.dtype
    axis: int | None  # None: each observation is one frame
    width: int
    depth: int

    @property
    def frames(self) -> str:
        return f"{self.prefix}/frames"


def buffer_keys(store: Any) -> list[BufferKey]:
    """Every observation key of a saved buffer (layout None: not split into frames yet)."""
    out = []
    for key, meta in store.attrs["stores"]:
        lay = meta.get("layout") or {"axis": None, "width": 0, "depth": 1}
        prefix = "observations" if key is None else f"observations/{key}"
        out.append(BufferKey(key, prefix, tuple(meta["obs_shape"]), np.dtype(meta["dtype"]),
                             lay["axis"], int(lay["width"]), int(lay["depth"])))
    return out


def buffer_summary(store: Any, file_bytes: int) -> dict[str, Any]:
    """Transitions, frames and bytes of a saved replay buffer, against SB3's ReplayBuffer."""
    a, args = store.attrs, buffer_arguments(store)
    size, n_envs, full, pos = int(args["buffer_size"]), int(args["n_envs"]), bool(a["full"]), int(a["pos"])
    live = (size if full else pos) * n_envs
    keys = buffer_keys(store)
    frames = [store.arrays[k.frames] for k in keys if k.frames in store.arrays]
    # what the buffer holds for observations: frames, the frame index, the kept last stacks
    stored = sum(int(arr.chunk_nbytes().sum()) for arr in frames) + sum(
        int(v.nbytes) for name, v in store.extras.items() if name.startswith("observations"))
    per_obs = sum(math.prod(k.obs_shape) * k.dtype.itemsize for k in keys)
    sb3 = per_obs * (1 if args.get("optimize_memory_usage") else 2)
    return {
        "buffer_class": a.get("buffer_class"),
        "layout_version": a.get("buffer_format_version"),
        "transitions_live": live,
        "transitions_capacity": size * n_envs,
        "buffer_size": size,
        "n_envs": n_envs,
        "full": full,
        "frames_stored": sum(int(written_items(arr).sum()) for arr in frames),
        "frame_slots": sum(arr.capacity for arr in frames),
        "stacks": [{"key": k.key, "obs_shape": list(k.obs_shape), "depth": k.depth,
                    "stack_axis": k.axis} for k in keys],
        "observation_bytes": stored,
        "bytes_per_transition": stored / live if live else None,
        "file_bytes_per_transition": file_bytes / live if live else None,
        "sb3_bytes_per_transition": sb3,
        "ratio_vs_sb3": sb3 * live / stored if live and stored else None,
    }
