"""A shard's priorities: one :class:`~chunkstore.priority.PriorityIndex` over its ring positions.

:class:`ShardPriorities` is a base of :class:`~sb3_integration.distributed.shard_store.ShardStore`.
When the store's spec has ``priority_alpha``, slot ``q`` of the index holds the mass
``(p + epsilon) ** alpha`` of the row at ring position ``q`` (the index has ``capacity``
slots; the ring grows up to it):

- a row written gets the mass of the priority its writer sent, or the largest mass the
  shard has seen (1.0 at first) when none was sent, and its slot's generation moves on;
- a row that leaves (eviction) gets mass 0 and its generation moves on, so an update sent
  for it afterwards is dropped; when the ring grows after rows left its front, rows move
  to new positions: the masses move with them and the generation of every position whose
  row changed moves on (updates in flight for them are dropped; a ring whose rows stay
  where they were keeps its generations);
- :meth:`sample_prioritized` draws ``n`` rows stratified in proportion to their masses and
  replies with each row's mass and generation and the shard's smallest positive mass;
- :meth:`update_priorities` sets ``(p + epsilon) ** alpha`` where the generation a learner
  read still matches.

A store (re)started gives every generation one random offset, so that the indices a
learner drew from an earlier life of the shard are (almost surely, 1 in 65536 not) dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.priority import GENERATION_DTYPE, PriorityIndex
from sb3_integration.distributed.wire import SampleReply
from sb3_integration.samplers.prioritized import priority_masses

__all__ = ["ShardPriorities", "masses_of"]


def masses_of(priorities: np.ndarray, alpha: float, epsilon: float, *, clamp: bool = False) -> np.ndarray:
    """``(p + epsilon) ** alpha`` in fp64 (NaN stays NaN); ValueError when one overflows float32
    or is positive below its smallest normal, or (``clamp``) the nearest mass the index holds in its
    place (float32's largest, or its smallest normal): the host buffers' formula,
    :func:`~sb3_integration.samplers.prioritized.priority_masses`."""
    return priority_masses(priorities, alpha, epsilon, clamp=clamp)


class ShardPriorities:
    """The priority methods of a shard store (which provides every attribute used here)."""

    spec: Any
    lock: Any
    capacity: int
    count: int
    name: str
    priorities: PriorityIndex | None

    def live_rows(self) -> np.ndarray:
        raise NotImplementedError

    def read(self, rows: np.ndarray, *, decode: bool) -> SampleReply:
        raise NotImplementedError

    @property
    def prioritized(self) -> bool:
        return self.priorities is not None

    def _init_priorities(self) -> None:
        self.priorities = None if self.spec.priority_alpha is None else PriorityIndex(self.capacity)
        self._shift_generations()

    def _shift_generations(self) -> None:
        """One random offset on every generation (a new life of the shard)."""
        if self.priorities is None:
            return
        st = self.priorities.state_dict()
        st["generations"] = st["generations"] + GENERATION_DTYPE(np.random.default_rng().integers(1, 65536))
        self.priorities.load_state_dict(st)

    def _masses(self, priorities: np.ndarray) -> np.ndarray:
        return masses_of(priorities, float(self.spec.priority_alpha), float(self.spec.priority_epsilon))

    # -- the ring's events -------------------------------------------------------------------
    def _prio_written(self, at: np.ndarray, given: np.ndarray) -> None:
        """Rows at ring positions ``at`` are new: the writers' priorities, or the largest mass."""
        index = self.priorities
        assert index is not None
        given = np.asarray(given, np.float64)
        if np.isnan(given).all():
            index.set(at)
            return
        # clamped, never refused: the rows are in the ring already (a writer's priority so large
        # that its mass overflows float32 is held as float32's largest, one so small that its
        # mass is below float32's smallest normal as that smallest normal)
        m = masses_of(given, float(self.spec.priority_alpha), float(self.spec.priority_epsilon), clamp=True)
        # a row without one gets the largest mass written before it (rows in their write order)
        before = np.maximum.accumulate(np.concatenate([[index.max], np.nan_to_num(m, nan=0.0)]))[:-1]
        index.set(at, np.where(np.isnan(m), before, m))

    def _prio_evicted(self, at: np.ndarray) -> None:
        assert self.priorities is not None
        self.priorities.set(at, np.zeros(len(at)))

    def _prio_moved(self, live: np.ndarray) -> None:
        """The ring grew: the rows at ``live`` moved to ``0 .. len(live) - 1``."""
        index = self.priorities
        assert index is not None
        st = index.state_dict()
        masses = np.zeros_like(st["masses"])
        masses[:len(live)] = st["masses"][live]
        # a position whose row stayed (a ring that never wrapped) keeps its generation; every
        # other position now holds another row or none: updates in flight for it are stale
        stayed = np.zeros(len(masses), np.bool_)
        stayed[:len(live)] = live == np.arange(len(live))
        st["masses"], st["generations"] = masses, st["generations"] + (~stayed).astype(GENERATION_DTYPE)
        index.load_state_dict(st)

    # -- learners ------------------------------------------------------------------------------
    def sample_prioritized(self, n: int, rng: np.random.Generator, *, decode: bool) -> SampleReply:
        """``n`` rows stratified in proportion to their masses, with masses, generations and the
        shard's smallest positive mass (``n = 0``: the weight and minimum alone)."""
        if self.priorities is None:
            raise ValueError(f"{self.name} is not prioritized (create the service with alpha=...)")
        with self.lock:
            index = self.priorities
            if n and not index.total > 0:
                raise IndexError(f"{self.name}: cannot sample from a shard without priority mass")
            if n:
                slots, masses, gens = index.sample(n, rng)
            else:
                slots, masses, gens = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, GENERATION_DTYPE)
            reply = self.read(slots, decode=decode)
            reply.masses, reply.generations, reply.min_mass = masses, gens, index.min
            return reply

    def update_priorities(self, slots: Any, generations: Any, priorities: Any) -> int:
        """``(p + epsilon) ** alpha`` for ``slots`` whose generation is still ``generations``;
        returns how many were applied (the others were overwritten or evicted since)."""
        if self.priorities is None:
            raise ValueError(f"{self.name} is not prioritized (create the service with alpha=...)")
        m = self._masses(np.asarray(priorities, np.float64))
        if m.size and not np.isfinite(m).all():
            raise ValueError("priorities must be finite and >= 0")
        with self.lock:
            return int(self.priorities.update(slots, m, generations).sum())

    def priority_masses(self) -> np.ndarray:
        """The mass of each held row, in :meth:`live_rows` order (fp64 of the fp32 held)."""
        with self.lock:
            if self.priorities is None:
                return np.ones(self.count)
            return self.priorities.get(self.live_rows())
