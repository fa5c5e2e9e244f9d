"""A priority index for large buffers: sums, minimum and proportional sampling over slots.

:class:`PriorityIndex` keeps one non-negative value (a *mass*) per slot of a fixed
capacity and answers, in ``O(k log N)`` for a batch of ``k``:

- ``sample(k)``: ``k`` slots drawn with probability ``mass / total``, stratified (the total
  split into ``k`` equal segments, one uniform draw in each); a slot of mass 0 is never drawn;
- ``update(slots, masses, generations)``: new masses, dropping any for a slot that was
  overwritten (:meth:`~PriorityIndex.set`) since the caller read its generation;
- ``total``, ``min`` (the smallest positive mass) and ``max`` (the largest mass written so far,
  which :meth:`~PriorityIndex.set` gives new slots by default).

It knows nothing about RL: a prioritized replay buffer stores ``priority ** alpha`` here.

Small: a ``fanout``-ary tree (32 by default) with fp32 leaves, fp64 sums and fp32 minimums
above them, and a uint16 generation per slot: about 6.4 bytes per slot (measured:
``tools/bench_prioritized.py``). A mass is 0 or within fp32's normal range, ``[2**-126,
float32's max]`` (about ``[1.18e-38, 3.4e38]``), and is held as fp32 with relative rounding
below 6e-8; a positive mass below that range (which fp32 would hold with less precision, or as
0) is refused with a ValueError (:func:`check_masses`), as is one above it. The sums are fp64
and every node is recomputed from its children, so sampling follows the fp32 masses exactly.
The kernels are numba (``chunkstore.priority._kernels``), GIL-free.

Interrupts: every call validates first, then changes the index in one kernel call that
runs to its end, so a KeyboardInterrupt leaves it as it was before the call or after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore.priority import _kernels as _k
from chunkstore.validate import is_int

__all__ = ["DEFAULT_FANOUT", "F32_TINY", "GENERATION_DTYPE", "PriorityIndex", "check_masses"]

DEFAULT_FANOUT = 32
#: a slot's generation wraps after 65536 overwrites: an update older than that would apply
GENERATION_DTYPE = np.uint16
_F32_MAX = float(np.finfo(np.float32).max)
#: the smallest positive mass held: fp32's smallest normal (below it fp32 loses relative precision)
F32_TINY = float(np.finfo(np.float32).tiny)


def check_masses(masses: np.ndarray) -> None:
    """ValueError unless every mass (fp64) is 0 or in ``[F32_TINY, float32's max]``, which fp32
    holds with relative rounding below 6e-8: a mass of 1e-46 would be held as 0 (never drawn),
    1e-45 and 2e-45 as the same value. NaN and negative masses are refused too."""
    if not masses.size:
        return
    low, high = masses.min(), masses.max()
    if not (low >= 0 and high <= _F32_MAX):  # NaN fails both comparisons: min and max carry it
        raise ValueError("masses must be finite, >= 0 and within float32's range (a buffer's mass is "
                         "priority ** alpha)")
    if low == 0:  # the smallest positive one (the common case, all positive, needs no mask)
        low = masses[masses > 0].min(initial=np.inf)
    if low < F32_TINY:
        raise ValueError(f"a mass (priority ** alpha) of {low:g} is below float32's smallest normal "
                         f"({F32_TINY:g}), where float32 holds it imprecisely or as 0: use a priority of 0 "
                         f"(never drawn) or at least the smallest normal, or epsilon > 0")


def _level_sizes(capacity: int, fanout: int) -> list[int]:
    """Node counts of levels 1.. (the last is the root, 1)."""
    sizes, n = [], capacity
    while True:
        n = -(-n // fanout)
        sizes.append(n)
        if n == 1:
            return sizes


@dataclass(frozen=True)
class _Tree:
    """Everything an index holds, replaced whole (one assignment: all-or-nothing under Ctrl-C).

    The arrays' contents change in place (one kernel call each); the arrays themselves and
    the sizes change together, only by a new ``_Tree``."""

    capacity: int
    fanout: int
    leaves: np.ndarray  # fp32 mass per slot
    gens: np.ndarray  # generation per slot
    sums: np.ndarray  # fp64 sums of every level above the leaves
    mins: np.ndarray  # fp32 smallest positive mass of every node
    offsets: np.ndarray  # where each level starts in sums / mins
    nlevels: int
    meta: np.ndarray  # [largest mass written, ...] (see _kernels.META_*)


class PriorityIndex:
    """Masses of ``capacity`` slots (all 0 at first), sampled in proportion.

    Parameters
    ----------
    capacity
        Number of slots (>= 1).
    fanout
        Children per tree node (2..256): wider is fewer levels (faster, and fewer bytes of
        upper levels) but more work per level.
    """

    _tree: _Tree

    def __init__(self, capacity: int, fanout: int = DEFAULT_FANOUT) -> None:
        if not is_int(capacity, minimum=1):
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if not is_int(fanout, minimum=2, maximum=256):
            raise ValueError(f"fanout must be an int in 2..256, got {fanout!r}")
        self._install(int(capacity), int(fanout), np.zeros(int(capacity), np.float32),
                      np.zeros(int(capacity), GENERATION_DTYPE), 1.0)

    def _install(self, capacity: int, fanout: int, leaves: np.ndarray, gens: np.ndarray,
                 max_mass: float) -> None:
        """Build the upper levels for ``leaves`` and install everything in one step."""
        sizes = _level_sizes(capacity, fanout)
        offsets = np.zeros(len(sizes) + 2, np.int64)
        offsets[1:] = np.cumsum([0, *sizes])
        sums = np.zeros(int(offsets[-1]), np.float64)
        mins = np.full(int(offsets[-1]), np.inf, np.float32)
        _k.rebuild(leaves, sums, mins, offsets, fanout, len(sizes))
        meta = np.zeros(_k.META_SIZE, np.float64)
        meta[_k.META_MAX] = max_mass
        self._tree = _Tree(capacity, fanout, leaves, gens, sums, mins, offsets, len(sizes), meta)

    # -- reading ------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Number of slots."""
        return self._tree.capacity

    @property
    def fanout(self) -> int:
        """Children per tree node."""
        return self._tree.fanout

    @property
    def total(self) -> float:
        """Sum of every slot's mass (fp64 over the fp32 masses)."""
        t = self._tree
        return float(t.sums[t.offsets[t.nlevels]])

    @property
    def min(self) -> float:
        """The smallest positive mass (``inf`` when no slot has mass)."""
        t = self._tree
        return float(t.mins[t.offsets[t.nlevels]])

    @property
    def max(self) -> float:
        """The largest mass written so far (1.0 before any): what :meth:`set` gives by default."""
        return float(self._tree.meta[_k.META_MAX])

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays."""
        t = self._tree
        return sum(a.nbytes for a in (t.leaves, t.gens, t.sums, t.mins, t.offsets, t.meta))

    def get(self, slots: Any) -> np.ndarray:
        """The masses of ``slots`` (fp64 of the fp32 values held)."""
        return self._tree.leaves[self._slots(slots)].astype(np.float64)

    def generations(self, slots: Any) -> np.ndarray:
        """The generations of ``slots`` (they move on at each :meth:`set`)."""
        return self._tree.gens[self._slots(slots)].copy()

    def sample(self, k: int, rng: Any = None, *, stratified: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``k`` slots in proportion to their mass: ``(slots, masses, generations)``.

        Stratified (the default): the total is split into ``k`` equal segments and one slot is
        drawn in each, so the ``k`` slots come in index order; ``stratified=False``: ``k``
        independent draws. ``slots`` int64, ``masses`` fp64 (the values held), ``generations``
        (pass them to :meth:`update`). ``rng``: a numpy ``Generator`` or ``RandomState``
        (default: the global ``numpy.random``), which draws ``k`` uniforms in ``[0, 1)``.
        ValueError when no slot has mass.
        """
        if not is_int(k, minimum=1):
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        total = self.total
        if not total > 0:
            raise ValueError("sample() from a priority index with no mass: set some slots first")
        u = (np.random if rng is None else rng).random(int(k))
        targets = (np.arange(k, dtype=np.float64) + u) * (total / k) if stratified else u * total
        np.minimum(targets, np.nextafter(total, 0.0), out=targets)
        slots = np.empty(k, np.int64)
        masses = np.empty(k, np.float32)
        t = self._tree
        _k.sample(t.leaves, t.sums, t.offsets, t.fanout, t.nlevels, targets, slots, masses)
        return slots, masses.astype(np.float64), t.gens[slots]

    # -- writing ------------------------------------------------------------------------
    def set(self, slots: Any, masses: Any = None) -> None:
        """Slots that hold something new: ``masses`` (default: :attr:`max` for each), generation + 1."""
        s = self._slots(slots)
        v = self._masses(masses, len(s)) if masses is not None else np.zeros(len(s))
        self._assign(s, v, use_max=masses is None, bump=True, expect=None)

    def set_span(self, start: int, count: int) -> None:
        """Slots ``start .. start + count - 1`` hold something new, each with :attr:`max`: :meth:`set`
        for a run of slots, checked with two comparisons (a buffer's per-``add`` call)."""
        start, count = int(start), int(count)
        if not (start >= 0 and count > 0 and start + count <= self.capacity):
            raise ValueError(f"slots {start}..{start + count - 1} are not in [0, {self.capacity})")
        s = np.arange(start, start + count, dtype=np.int64)
        self._assign(s, np.zeros(count), use_max=True, bump=True, expect=None)

    def update(self, slots: Any, masses: Any, generations: Any = None) -> np.ndarray:
        """New masses for slots; with ``generations``, only where a slot's generation still matches.

        Returns which entries were written (bool). Later entries for the same slot win.
        """
        s = self._slots(slots)
        v = self._masses(masses, len(s))
        expect = None
        if generations is not None:
            expect = np.asarray(generations)
            if expect.shape != s.shape:
                raise ValueError(f"generations must have shape {s.shape}, got {expect.shape}")
            if expect.size and expect.dtype.kind not in "iu":
                raise ValueError(f"generations must be integers, got dtype {expect.dtype}")
            expect = expect.astype(GENERATION_DTYPE)
        return self._assign(s, v, use_max=False, bump=False, expect=expect)

    def _assign(self, s: np.ndarray, v: np.ndarray, *, use_max: bool, bump: bool,
                expect: np.ndarray | None) -> np.ndarray:
        applied = np.ones(len(s), np.bool_)
        check = expect is not None
        t = self._tree
        _k.assign(t.leaves, t.sums, t.mins, t.offsets, t.fanout, t.nlevels, t.meta, t.gens, s, v, use_max, bump, check,
                  expect if expect is not None else np.zeros(1, GENERATION_DTYPE), applied)
        return applied

    def _slots(self, slots: Any) -> np.ndarray:
        s = np.asarray(slots)
        if s.ndim == 0:
            s = s.reshape(1)
        if s.ndim != 1:
            raise ValueError(f"slots must be 1-D, got shape {s.shape}")
        if s.size and s.dtype.kind not in "iu":
            raise ValueError(f"slots must be integers, got dtype {s.dtype}")
        if s.size and (s.min() < 0 or s.max() >= self.capacity):  # before the cast: 2**63 stays 2**63
            raise ValueError(f"slots must be in [0, {self.capacity}), got {int(s.min())}..{int(s.max())}")
        s = s.astype(np.int64, copy=False)
        return np.ascontiguousarray(s)

    @staticmethod
    def _masses(masses: Any, n: int) -> np.ndarray:
        v = np.asarray(masses, dtype=np.float64)
        if v.ndim == 0:
            v = np.full(n, float(v))
        if v.shape != (n,):
            raise ValueError(f"masses must have shape ({n},), got {v.shape}")
        check_masses(v)
        return np.ascontiguousarray(v)

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain numpy arrays and numbers (the upper levels are rebuilt on load)."""
        t = self._tree
        return {"capacity": t.capacity, "fanout": t.fanout, "masses": t.leaves.copy(), "generations": t.gens.copy(),
                "max": self.max}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace this index's state with ``state`` (from :meth:`state_dict`), in one step."""
        try:
            capacity, fanout = int(state["capacity"]), int(state["fanout"])
            given = np.asarray(state["masses"])
            if given.dtype.kind not in "biuf":  # complex masses lost their imaginary part in a cast
                raise TypeError(f"masses must be real numbers, got dtype {given.dtype}")
            with np.errstate(over="ignore"):  # too large for fp32: inf, refused below
                masses = np.array(given, dtype=np.float32)
            gens = np.array(state["generations"], dtype=GENERATION_DTYPE)
            max_mass = float(state["max"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a PriorityIndex state: {e}") from None
        if capacity < 1 or not 2 <= fanout <= 256 or masses.shape != (capacity,) or gens.shape != (capacity,):
            raise ValueError("PriorityIndex state: capacity, fanout and array shapes disagree")
        if not (np.isfinite(masses).all() and (masses >= 0).all() and math.isfinite(max_mass)):
            raise ValueError("PriorityIndex state: masses must be finite and >= 0")
        # max starts at 1.0 and only grows with the masses written: one outside that range gives
        # new slots a mass of 0 (never drawn), a negative one (a broken tree) or inf (fp32 overflow)
        top = float(masses.max()) if capacity else 0.0
        if not (1.0 <= max_mass <= _F32_MAX and np.float32(max_mass) >= top):
            raise ValueError(f"PriorityIndex state: max must be in [1, float32's max] and at least the largest "
                             f"mass ({top:g}), got {max_mass:g}")
        self._install(capacity, fanout, masses, gens, max_mass)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PriorityIndex:
        index = cls.__new__(cls)
        index.load_state_dict(state)
        return index

    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state)

    def __repr__(self) -> str:
        return f"PriorityIndex(capacity={self.capacity}, fanout={self.fanout}, total={self.total:g})"
