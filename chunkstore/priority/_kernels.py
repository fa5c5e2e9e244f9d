"""The numba kernels of the priority index (:mod:`chunkstore.priority`).

The tree is ``F``-ary: level 0 holds one fp32 value per slot, level ``l >= 1`` holds for
each group of ``F`` nodes of level ``l - 1`` their fp64 sum (``sums``) and their smallest
positive value as fp32 (``mins``, ``inf`` where none is positive); the top level is a
single node, the root. The upper levels of both trees sit in one flat array each, level
``l`` starting at ``offsets[l]`` (``offsets[0]`` is unused).

A node is always recomputed from its children, in order, never adjusted by a difference:
the value a node holds is then exactly the running sum a descent computes over its
children, so a target below a node's sum always finds a child, and rounding never drifts.

Every kernel writes into arrays it is given and returns nothing it allocated: a kernel
that returns a fresh array can fail on the way back into Python under a KeyboardInterrupt.
A kernel runs to the end once called (numba does not check for signals), so each mutating
call is one step: the caller changes nothing else afterwards.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from chunkstore.native.guard import guard_module

__all__ = ["META_MAX", "META_SIZE", "assign", "rebuild", "sample"]

#: slots of the fp64 ``meta`` vector the kernels update with the tree
META_MAX = 0  # the largest value written so far (new slots get it)
META_SIZE = 1


@njit(nogil=True, cache=True, inline="always")
def _recompute(leaves, sums, mins, offsets, fanout, level, node):
    """Node ``node`` of ``level`` (>= 1) from its ``fanout`` children."""
    first = node * fanout
    total = 0.0
    low = np.inf
    if level == 1:
        for c in range(first, min(first + fanout, leaves.shape[0])):
            v = leaves[c]
            total += np.float64(v)
            if v > 0 and v < low:
                low = v
    else:
        base = offsets[level - 1]
        for c in range(base + first, min(base + first + fanout, offsets[level])):
            total += sums[c]
            m = mins[c]
            if m < low:
                low = m
    sums[offsets[level] + node] = total
    mins[offsets[level] + node] = low


@njit(nogil=True, cache=True)
def rebuild(leaves, sums, mins, offsets, fanout, nlevels):
    """Every upper node from the leaves (a load, or a fresh index)."""
    for level in range(1, nlevels + 1):
        for node in range(offsets[level + 1] - offsets[level]):
            _recompute(leaves, sums, mins, offsets, fanout, level, node)


@njit(nogil=True, cache=True)
def assign(leaves, sums, mins, offsets, fanout, nlevels, meta, gens, slots, values,
           use_max, bump, check, expect, applied):
    """Write ``values[i]`` (or the largest value so far, ``use_max``) into slot ``slots[i]``.

    ``bump``: the slot holds something new (its generation moves on). ``check``: write only
    where the slot's generation is still ``expect[i]``; ``applied[i]`` says which were written.
    Later entries for the same slot win. ``meta[META_MAX]`` grows with every value written.
    """
    for i in range(slots.shape[0]):
        s = slots[i]
        if check and gens[s] != expect[i]:
            applied[i] = False
            continue
        applied[i] = True
        v = meta[META_MAX] if use_max else values[i]
        leaves[s] = np.float32(v)
        if v > meta[META_MAX]:
            meta[META_MAX] = v
        if bump:
            gens[s] = gens[s] + 1  # wraps at the dtype's width
        node = s
        for level in range(1, nlevels + 1):
            node //= fanout
            _recompute(leaves, sums, mins, offsets, fanout, level, node)


@njit(nogil=True, cache=True, inline="always")
def _pick_child(values, base, first, stop, u):
    """The child in ``first..stop-1`` (its mass at ``values[base + child]``) whose running-sum
    interval holds ``u``, and ``u`` within it; a ``u`` that rounding carried past the last child
    with mass goes to the middle of that child. A child with no mass is never chosen."""
    cum = 0.0
    last = -1
    for c in range(first, stop):
        v = np.float64(values[base + c])
        if v > 0:
            if u < cum + v:
                return c, u - cum
            last = c
        cum += v
    return last, np.float64(values[base + last]) * 0.5


@njit(nogil=True, cache=True)
def sample(leaves, sums, offsets, fanout, nlevels, targets, out_slots, out_values):
    """For each target ``u`` in ``[0, total)``: the slot whose running-sum interval holds it.

    A child with no mass is never chosen: the interval test is strict, and a target that
    rounding carried past the last child goes to the last child with mass.
    """
    for i in range(targets.shape[0]):
        u = targets[i]
        node = 0
        for level in range(nlevels, 0, -1):
            first = node * fanout
            if level == 1:
                node, u = _pick_child(leaves, 0, first, min(first + fanout, leaves.shape[0]), u)
            else:
                base = offsets[level - 1]
                node, u = _pick_child(sums, base, first, min(first + fanout, offsets[level] - base), u)
        out_slots[i] = node
        out_values[i] = leaves[node]


guard_module(globals())  # kernels load with Ctrl-C held off (chunkstore.native.guard)
