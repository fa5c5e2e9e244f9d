"""dopamine's replay checkpoints (the DQN Replay Dataset's files) and its sampling rules.

A checkpoint is what ``OutOfGraphReplayBuffer.save(dir, N)`` writes: one gzip'd file per
element, named ``{name}_ckpt.{N}.gz``. The four stored arrays carry the prefix
``$store$_`` (``$store$_observation``, ``$store$_action``, ``$store$_reward``,
``$store$_terminal``: one row per position of the circular buffer, the observation a
single frame), ``add_count`` and ``invalid_range`` are ``np.save``'d arrays, and
``episode_end_indices`` (newer dopamine only; the DQN Replay Dataset has none) a pickled
set. Position ``p`` of a checkpoint is what dopamine calls an index.

The rules below are dopamine's (``is_valid_transition``, ``sample_index_batch``,
``sample_transition_batch``), done on whole arrays instead of one index at a time:

* a stack at ``p`` is the frames at ``p - stack_size + 1 .. p``, modulo the capacity
  (``get_range``); episodes are not masked: dopamine stores ``stack_size - 1`` zero
  frames before each episode and refuses a stack with a terminal before its last frame;
* valid positions: not full: ``stack_size - 1 <= p < cursor - update_horizon``; always:
  ``p`` not in the saved ``invalid_range``, no terminal among the stack's earlier
  frames, no ``episode_end_indices`` entry without a terminal among ``p .. p + n - 1``;
  full: also not among the positions ``sample_index_batch`` never draws
  (``cursor - n .. cursor + stack_size - 2``);
* the n-step window stops after the first terminal; reward: the float32 sum of
  ``gamma**k * reward`` over it; next state: the stack at ``p + length``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sb3_integration.offline._npy_stream import (
    CheckpointError,
    NpyStream,
    read_pickled_int_set,
    read_small_npy,
)

__all__ = [
    "STORE_PREFIX",
    "Checkpoint",
    "CheckpointError",
    "checkpoint_path",
    "find_checkpoints",
    "n_step_returns",
    "valid_positions",
]

STORE_PREFIX = "$store$_"
#: the stored arrays of a checkpoint, in the order an import reads them
STORE_NAMES = ("observation", "action", "reward", "terminal")
#: most rows of a checkpoint: dopamine hands out positions as int32
MAX_CAPACITY = 2**31 - 1
#: most additions a checkpoint may count (dopamine's ``add_count`` is an int64 array)
MAX_ADD_COUNT = 2**63 - 1
_SUFFIX = re.compile(r"^\$store\$_observation_ckpt\.(\d+)\.gz$")


def checkpoint_path(directory: str | os.PathLike[str], name: str, suffix: int) -> str:
    """dopamine's ``_generate_filename``: ``{dir}/{name}_ckpt.{suffix}.gz``."""
    return os.path.join(os.fspath(directory), f"{name}_ckpt.{suffix}.gz")


def _replay_dir(directory: str | os.PathLike[str]) -> Path:
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"src: {d} is not a directory")
    if (d / "replay_logs").is_dir():  # the dataset's <game>/<run>/replay_logs layout
        d = d / "replay_logs"
    return d


def find_checkpoints(directory: str | os.PathLike[str]) -> list[int]:
    """The checkpoint suffixes in ``directory`` (or its ``replay_logs``), ascending."""
    d = _replay_dir(directory)
    found = sorted(int(m.group(1)) for m in map(_SUFFIX.match, os.listdir(d)) if m)
    if not found:
        raise ValueError(f"src: no dopamine checkpoint ($store$_observation_ckpt.N.gz) in {d}")
    return found


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint's metadata (its arrays' shapes, add_count, invalid_range, episode ends)."""

    directory: str
    suffix: int
    capacity: int
    add_count: int
    invalid_range: np.ndarray
    episode_ends: np.ndarray
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    dtypes: dict[str, np.dtype]

    @classmethod
    def open(cls, directory: str | os.PathLike[str], suffix: int) -> Checkpoint:
        """Read the small files and the stored arrays' headers; every file must be there."""
        d = str(_replay_dir(directory))
        paths = {n: checkpoint_path(d, STORE_PREFIX + n, suffix) for n in STORE_NAMES}
        for extra in ("add_count", "invalid_range"):
            paths[extra] = checkpoint_path(d, extra, suffix)
        for path in paths.values():  # dopamine's load: every file first, then any contents
            if not os.path.exists(path):
                raise CheckpointError(path, "missing checkpoint file")
        shapes, dtypes = {}, {}
        for n in STORE_NAMES:
            with NpyStream(paths[n]) as s:
                shapes[n], dtypes[n] = s.shape, s.dtype
        capacity = shapes["observation"][0] if shapes["observation"] else 0
        for n in STORE_NAMES:
            if not shapes[n] or shapes[n][0] != capacity:
                raise CheckpointError(paths[n], f"holds shape {shapes[n]}, the observations "
                                                f"{capacity} rows")
        if capacity < 1:
            raise CheckpointError(paths["observation"], "holds no rows")
        if capacity > MAX_CAPACITY:
            raise CheckpointError(paths["observation"], f"shape: {capacity:,} rows; dopamine's positions are "
                                                        f"int32, at most {MAX_CAPACITY:,}")
        for n in ("action", "reward", "terminal"):
            if len(shapes[n]) != 1:
                raise CheckpointError(paths[n], f"holds shape {shapes[n]}; scalar {n}s expected")
        add_count = read_small_npy(paths["add_count"], "add_count", ndim=0, max_items=1, kinds="iu")
        count = int(add_count)  # a Python int: uint64's largest is no OverflowError
        if not 0 <= count <= MAX_ADD_COUNT:
            raise CheckpointError(paths["add_count"], f"add_count: {count} is not a count of additions "
                                                      f"(0..{MAX_ADD_COUNT}, dopamine's int64)")
        # dopamine's invalid range is stack_size + update_horizon positions, and its buffer refuses
        # a capacity below that: more entries than positions is not a checkpoint's
        inv = read_small_npy(paths["invalid_range"], "invalid_range", ndim=1, max_items=capacity,
                             kinds="iuf")
        if not np.all(np.isfinite(inv)):
            raise CheckpointError(paths["invalid_range"], f"invalid_range: not a list of indices: {inv!r}")
        if count == 0:
            raise CheckpointError(paths["add_count"], "add_count is 0: the checkpoint holds no transitions")
        ends_path = checkpoint_path(d, "episode_end_indices", suffix)
        ends = (read_pickled_int_set(ends_path, capacity) if os.path.exists(ends_path)
                else np.zeros(0, np.int64))
        return cls(d, int(suffix), int(capacity), count, _positions(inv, capacity), ends,
                   shapes["observation"][1:], dtypes["observation"], dtypes)

    @property
    def is_full(self) -> bool:
        return self.add_count >= self.capacity

    @property
    def cursor(self) -> int:
        return self.add_count % self.capacity

    @property
    def rows(self) -> int:
        """Positions holding data: all of them once full, else the first ``add_count``."""
        return self.capacity if self.is_full else self.add_count

    def path(self, name: str) -> str:
        prefix = STORE_PREFIX if name in STORE_NAMES else ""
        return checkpoint_path(self.directory, prefix + name, self.suffix)


def _positions(entries: np.ndarray, capacity: int) -> np.ndarray:
    """The entries of a saved ``invalid_range`` that name a position (whole numbers in
    ``0 .. capacity - 1``), as int64: dopamine tests ``index in set(invalid_range)``, which
    any other entry (``-1``, ``1e12``, ``1e300``, ``2.5``) never matches."""
    if entries.dtype.kind == "f":
        keep = (entries >= 0) & (entries < capacity) & (entries == np.floor(entries))
    else:  # compared as the integers they are (uint64 included), never wrapped
        keep = (entries >= 0) & (entries < capacity)
    return entries[keep].astype(np.int64)


def valid_positions(terminals: np.ndarray, ckpt: Checkpoint, stack_size: int,
                    update_horizon: int) -> np.ndarray:
    """Bool per position ``0 .. rows - 1``: would dopamine sample it (see the module text)?

    Works on ``rows`` positions only (a checkpoint that is not full may declare a capacity
    far beyond what was added): before the wrap, no valid position's stack or n-step window
    reaches past ``rows``, and positions past it hold no terminal.
    """
    cap, n, k = ckpt.capacity, int(update_horizon), int(stack_size)
    rows, full, cursor = ckpt.rows, ckpt.is_full, ckpt.cursor
    term = np.asarray(terminals[:rows]) != 0
    valid = np.ones(rows, bool)
    if full:  # rows == cap: positions wrap around
        never_drawn = (cursor - n + np.arange(n + k - 1)) % cap
        valid[never_drawn] = False
    else:  # stack_size - 1 <= p < cursor - update_horizon
        valid[:min(rows, k - 1)] = False
        valid[max(0, cursor - n):] = False
    inv = ckpt.invalid_range
    valid[inv[inv < rows]] = False  # ``index in set(invalid_range)``: positions only (Checkpoint.open)
    for j in range(1, k):  # a terminal before the stack's last frame: term[p - j]
        valid &= ~_shifted(term, j, full)
    if len(ckpt.episode_ends):
        ends = ckpt.episode_ends
        end_without_terminal = np.zeros(rows, bool)
        end_without_terminal[ends[ends < rows]] = True
        end_without_terminal &= ~term
        for i in range(n):  # an episode end without a terminal in p .. p + n - 1
            valid &= ~_shifted(end_without_terminal, -i, full)
    return valid


def _shifted(a: np.ndarray, j: int, wrap: bool) -> np.ndarray:
    """``a[p - j]`` for every position ``p``: modulo ``len(a)`` when ``wrap``, else False where
    ``p - j`` falls outside (only positions that are invalid anyway look there)."""
    if wrap:
        return np.roll(a, j)
    out = np.zeros_like(a)
    if abs(j) >= len(a):
        return out
    if j >= 0:
        out[j:] = a[:len(a) - j]
    else:
        out[:j] = a[-j:]
    return out


def discount_vector(gamma: float, update_horizon: int) -> np.ndarray:
    """dopamine's ``_cumulative_discount_vector``: float32 ``gamma**k`` computed with ``math.pow``."""
    return np.array([math.pow(gamma, k) for k in range(update_horizon)], dtype=np.float32)


def n_step_returns(terminals: np.ndarray, rewards: np.ndarray, gamma: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For windows ``(B, n)`` of terminals and rewards: (length, is_terminal, discounted reward).

    Bit for bit dopamine's ``np.sum(discount[:length] * rewards[:length])``, which is the
    float32 sum of the window's first ``length`` products in order.
    """
    b, n = terminals.shape
    term = terminals != 0
    is_terminal = term.any(axis=1)
    length = np.where(is_terminal, np.argmax(term, axis=1) + 1, n)
    products = discount_vector(gamma, n)[None, :] * rewards.astype(np.float32, copy=False)
    out = np.empty(b, np.float32)
    for m in np.unique(length):  # one numpy sum per distinct length: dopamine's reduction exactly
        rows = np.flatnonzero(length == m)
        out[rows] = np.sum(np.ascontiguousarray(products[rows, :m]), axis=1)
    return length, is_terminal, out
