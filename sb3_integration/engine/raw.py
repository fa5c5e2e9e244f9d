"""Raw observation storage: a key kept as SB3 keeps it, one preallocated numpy array per kind of stack.

Compression pays for items that are large and shrink (Atari stacks, camera frames); it
does not for small ones (a 17-float HalfCheetah observation, a 7x7x3 grid) or for ones
that do not shrink (noisy float images): there the chunks, the frame engine and the
native read cost more per sample than they save. Such a key is a :class:`RawStore`:
``np.zeros((n_rows, n_envs, *obs_shape))`` per kind of stack, written and read as SB3
writes and reads its arrays (the buffer hands SB3's code the arrays themselves, so a
sample indexes them with numpy, as SB3 does).

Which keys are raw (:func:`choose_storage`), per key, ``observation_storage``:

``"auto"`` (the default)
    raw when one observation is at most :data:`RAW_ITEM_BYTES` bytes; a larger one is
    measured on the buffer's first ``add()`` (its observations and next observations
    compressed with zstd level 1, :data:`PROBE_CODEC`) and stored raw when they shrink
    less than :data:`RAW_BELOW_RATIO` times, compressed otherwise. With ``buffer_device``
    every key stays compressed (its frames live on the device).
``"raw"``
    always raw (in host memory, also with ``buffer_device``: a sample copies it to
    ``device`` as SB3 copies its arrays).
``"compressed"``
    always a :class:`~sb3_integration.engine.frames.FrameStore`.

``follow=True`` is SB3's ``optimize_memory_usage`` layout: one array, the next observation of
row ``r`` written into row ``r + 1`` (what SB3's ``sample`` reads), so the buffer holds what
SB3's holds.

A raw store implements :class:`~sb3_integration.engine.api.FrameStoreAPI`; its state
(:class:`RawStoreState`) is the arrays themselves, saved in files as
``observations[/<key>]/raw`` and in pickles as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import get_codec
from sb3_integration.engine.api import OBS

__all__ = ["AUTO", "COMPRESSED", "PROBE_CODEC", "RAW", "RAW_BELOW_RATIO", "RAW_ITEM_BYTES", "STORAGE_MODES",
           "RawStore", "RawStoreState", "choose_after_probe", "choose_storage", "parse_storage", "probe_ratio"]

RAW, COMPRESSED, AUTO = "raw", "compressed", "auto"
STORAGE_MODES = (AUTO, RAW, COMPRESSED)
#: ``"auto"`` keeps observations of at most this many bytes raw (every MuJoCo vector observation,
#: Humanoid's 348 float32 are 1,392 B; small grids and tiny images): a compressed read of one
#: costs a chunk decode and the frame engine's bookkeeping for a few hundred bytes saved
RAW_ITEM_BYTES = 4096
#: ... and larger ones whose first add's items compress less than this (zstd1), such as noisy float images
RAW_BELOW_RATIO = 1.3
#: the codec that measures a key's compression ratio on its first items
PROBE_CODEC = "zstd1"


def parse_storage(value: Any, keys: Sequence[Any]) -> dict[Any, str]:
    """``observation_storage`` as one mode per observation key (``keys``: None for a non-Dict space).

    A string applies to every key; a mapping names some keys (the others are ``"auto"``).
    Raises ValueError for an unknown mode or key, TypeError for another type.
    """
    if isinstance(value, str):
        modes = dict.fromkeys(keys, value)
    elif isinstance(value, Mapping):
        if None in keys:
            raise TypeError(f"observation_storage={dict(value)!r}: a mapping names Dict keys; this buffer's "
                            f"observations are one array: pass 'auto', 'raw' or 'compressed'")
        unknown = [k for k in value if k not in keys]
        if unknown:
            raise ValueError(f"observation_storage names key {unknown[0]!r}, which is not in the observation "
                             f"space (its keys: {list(keys)})")
        modes = {k: value.get(k, AUTO) for k in keys}
    else:
        raise TypeError(f"observation_storage must be 'auto', 'raw', 'compressed' or a dict of them by "
                        f"observation key, got {value!r}")
    for key, mode in modes.items():
        if mode not in STORAGE_MODES:
            where = "" if key is None else f"[{key!r}]"
            raise ValueError(f"observation_storage{where} must be 'auto', 'raw' or 'compressed', got {mode!r}")
    return modes


def choose_storage(mode: str, obs_shape: tuple[int, ...], dtype: Any, *, device: Any = None) -> str | None:
    """``mode`` resolved before any data: ``"raw"``, ``"compressed"``, or None (``"auto"``, measure
    on the first add with :func:`probe_ratio`)."""
    if mode != AUTO:
        return mode
    if device is not None:
        return COMPRESSED
    item = int(np.prod(obs_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return RAW if item <= RAW_ITEM_BYTES else None


def choose_after_probe(items: Sequence[np.ndarray]) -> str:
    """``"auto"``'s choice for a large key on its first add's ``items``: raw unless they shrink
    :data:`RAW_BELOW_RATIO` times or more."""
    return RAW if probe_ratio(items) < RAW_BELOW_RATIO else COMPRESSED


def probe_ratio(items: Sequence[np.ndarray]) -> float:
    """How much ``items`` (a first add's observations, ``(n_envs, *obs_shape)`` each) shrink with
    :data:`PROBE_CODEC`: raw bytes over encoded bytes, each observation encoded on its own (an
    observation equal to the one before would otherwise count as free)."""
    codec = get_codec(PROBE_CODEC)
    obs = [np.ascontiguousarray(o) for x in items for o in np.asarray(x)]
    raw = sum(o.nbytes for o in obs)
    if not raw:
        return 1.0
    return raw / max(sum(len(codec.encode(o)) for o in obs), 1)


@dataclass
class RawStoreState:
    """What a :class:`RawStore` is: its geometry and its arrays (one per kind of stack, or one with ``follow``)."""

    obs_shape: tuple[int, ...]
    dtype: np.dtype
    n_rows: int
    n_envs: int
    stacks_per_row: int
    follow: bool
    arrays: list[np.ndarray]

    def scalars(self) -> dict[str, Any]:
        """The JSON-able part (a file's store attributes; ``storage`` tells it from a frame store's)."""
        return {"storage": RAW, "obs_shape": list(self.obs_shape), "dtype": np.dtype(self.dtype).str,
                "n_rows": self.n_rows, "n_envs": self.n_envs, "stacks_per_row": self.stacks_per_row,
                "follow": self.follow}

    def check(self, name: str) -> None:
        """ValueError unless the arrays fit the declared geometry."""
        want = (self.n_rows, self.n_envs, *self.obs_shape)
        count = 1 if self.follow else self.stacks_per_row
        if len(self.arrays) != count:
            raise ValueError(f"{name}: a raw state of {count} arrays holds {len(self.arrays)}")
        for a in self.arrays:
            if not isinstance(a, np.ndarray) or a.shape != want or a.dtype != np.dtype(self.dtype):
                got = (getattr(a, "shape", None), getattr(a, "dtype", None))
                raise ValueError(f"{name}: a raw array is {got}; this store needs {(want, np.dtype(self.dtype))}")

    def close(self) -> None:
        """Nothing to release (the arrays are copies)."""

    def __enter__(self) -> RawStoreState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RawStore:
    """Observations of one key as SB3 stores them: ``arrays[which]`` of shape ``(n_rows, n_envs, *obs_shape)``.

    Parameters
    ----------
    obs_shape, dtype, n_rows, n_envs, stacks_per_row, name
        As :class:`~sb3_integration.engine.frames.FrameStore`'s.
    follow
        SB3's ``optimize_memory_usage`` layout: one array; a row's next observation is
        written into (and read from) the following row.

    Examples
    --------
    >>> from sb3_integration.engine.api import NEXT
    >>> rs = RawStore((3,), np.float32, n_rows=4, n_envs=1)
    >>> rs.put_row(0, (np.ones((1, 3), np.float32), np.full((1, 3), 2, np.float32)))
    >>> rs.gather([(NEXT, np.array([0]))], np.array([0]))[0].tolist()
    [[2.0, 2.0, 2.0]]
    """

    device = None  # host memory, always

    def __init__(self, obs_shape: tuple[int, ...], dtype: Any, n_rows: int, n_envs: int = 1, *,
                 stacks_per_row: int = 2, follow: bool = False, name: str = "observations") -> None:
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.dtype = np.dtype(dtype)
        self.n_rows, self.n_envs, self.stacks_per_row = int(n_rows), int(n_envs), int(stacks_per_row)
        if min(self.n_rows, self.n_envs, self.stacks_per_row) < 1:
            raise ValueError(f"{name}: n_rows, n_envs and stacks_per_row must be >= 1")
        self.follow = bool(follow) and self.stacks_per_row > 1
        self.name = name
        self.cache: Any = 0
        self._lock = threading.RLock()
        self._closed = False
        # np.zeros, as SB3: the pages come from the OS when first written
        shape = (self.n_rows, self.n_envs, *self.obs_shape)
        self.arrays = [np.zeros(shape, self.dtype) for _ in range(1 if self.follow else self.stacks_per_row)]

    # -- writing -----------------------------------------------------------------------
    def put(self, which: int, row: int, x: np.ndarray, attempt: Any = None) -> None:
        """Store the stacks ``[which, row, :]`` (``x``: ``(n_envs, *obs_shape)``)."""
        if self.follow and which != OBS:
            self.arrays[0][(row + 1) % self.n_rows] = x
        else:
            self.arrays[which][row] = x

    def put_row(self, row: int, stacks: Sequence[np.ndarray], attempt: Any = None) -> None:
        """Every kind of stack of ``row``, in order (an interrupted call leaves only this row torn;
        with ``follow``, the next row's observation too, as in SB3)."""
        for which, x in enumerate(stacks):
            self.put(which, row, x)

    def abandon(self, attempt: Any) -> None:
        """Nothing to undo: a retried row is simply written again."""

    def release_before(self, row: int) -> None:
        """Nothing to free: rows are overwritten in place."""

    def share_cache(self, cache: Any) -> None:
        """No decoded chunks to cache."""
        self.cache = cache

    def clear(self) -> None:
        """Nothing to do: as SB3's ``reset``, the rows stay until overwritten (the buffer's ``pos`` hides them)."""

    # -- reading -----------------------------------------------------------------------
    def gather(self, requests: Sequence[tuple[Any, np.ndarray]], envs: np.ndarray) -> list[np.ndarray]:
        """``arrays[which][rows, envs]`` per request (``which`` an int or an int array like ``rows``)."""
        self._check_open()
        envs = np.asarray(envs, np.int64)
        return [self._take(which, np.asarray(rows, np.int64), envs) for which, rows in requests]

    def _take(self, which: Any, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        if self.follow:  # a next observation is the following row's observation
            nxt = np.asarray(which) != OBS
            return self.arrays[0][np.where(nxt, (rows + 1) % self.n_rows, rows), envs]
        if np.ndim(which) == 0:
            return self.arrays[int(which)][rows, envs]
        which = np.asarray(which)
        out = self.arrays[OBS][rows, envs]
        for w in range(1, len(self.arrays)):
            hit = which == w
            if hit.any():
                out[hit] = self.arrays[w][rows[hit], envs[hit]]
        return out

    def view(self, which: int) -> np.ndarray | None:
        """The array SB3's code indexes for ``which`` (None: read through ``gather``, ``follow``'s next
        observations)."""
        if self._closed or (self.follow and which != OBS):
            return None
        return self.arrays[which]

    # -- sizes -------------------------------------------------------------------------
    @property
    def nbytes_stored(self) -> int:
        """The arrays' bytes (all of them, written or not, as SB3 counts its own)."""
        return sum(a.nbytes for a in self.arrays)

    nbytes_held = nbytes_stored
    device_nbytes = 0

    def held_info(self) -> dict[str, int]:
        """Every byte held, by kind (:attr:`nbytes_held`): the arrays."""
        return {"raw_arrays": self.nbytes_stored}

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "storage": RAW, "obs_shape": self.obs_shape, "dtype": str(self.dtype),
                "layout": "raw", "follow": self.follow, "nbytes_stored": self.nbytes_stored,
                "nbytes_held": self.nbytes_held, "held": self.held_info(), "codec": None, "device": None}

    # -- ownership, state --------------------------------------------------------------
    def close(self) -> None:
        """Drop the arrays (the buffer cannot be used afterwards)."""
        with self._lock:
            self._closed = True
            self.arrays = []

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name}: the store is closed")

    def state_dict(self) -> RawStoreState:
        """This store at this moment (copies of its arrays)."""
        with self._lock:
            self._check_open()
            return RawStoreState(self.obs_shape, self.dtype, self.n_rows, self.n_envs, self.stacks_per_row,
                                 self.follow, [a.copy() for a in self.arrays])

    def load_state_dict(self, state: Any) -> None:
        """Become ``state`` (a :class:`RawStoreState` of this geometry; ValueError otherwise, nothing changed)."""
        if not isinstance(state, RawStoreState):
            raise ValueError(f"{self.name}: a raw store loads a raw state, got {type(state).__name__}")
        state.check(self.name)
        if ((tuple(state.obs_shape), np.dtype(state.dtype), state.n_rows, state.n_envs, state.follow)
                != (self.obs_shape, self.dtype, self.n_rows, self.n_envs, self.follow)):
            raise ValueError(f"{self.name}: the state's geometry {state.scalars()} does not fit this store's")
        with self._lock:
            for mine, theirs in zip(self.arrays, state.arrays, strict=True):
                np.copyto(mine, theirs)  # into the arrays the buffer's views already hold

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"storage": RAW, "name": self.name, **self.state_dict().__dict__}

    def __setstate__(self, data: dict[str, Any]) -> None:
        data = dict(data)
        data.pop("storage", None)
        name = data.pop("name", "observations")
        state = RawStoreState(**data)
        state.check(name)
        # the pickle's arrays are adopted, not copied into fresh zeros (no second copy while loading)
        self.__dict__.update(obs_shape=tuple(state.obs_shape), dtype=np.dtype(state.dtype), n_rows=state.n_rows,
                             n_envs=state.n_envs, stacks_per_row=state.stacks_per_row, follow=state.follow,
                             name=name, cache=0, _lock=threading.RLock(), _closed=False, arrays=list(state.arrays))
