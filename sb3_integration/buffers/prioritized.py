"""Prioritized experience replay (Schaul et al. 2016) over the compressed replay buffers.

:class:`CompressedPrioritizedReplayBuffer`, :class:`CompressedPrioritizedDictReplayBuffer`
and :class:`CompressedPrioritizedNStepReplayBuffer` are the compressed replay, dict replay and
n-step buffers with one mixin (:class:`PrioritizedReplayMixin`) that keeps a priority per
stored transition in a :class:`chunkstore.priority.PriorityIndex`.

Semantics. The index of a stored transition is ``pos * n_envs + env`` (SB3's position-major
layout). ``update_priorities(indices, priorities)`` sets ``p_i = priority + epsilon``; a
transition is drawn with ``P(i) = p_i^alpha / sum_j p_j^alpha`` over the transitions SB3 could
sample (with ``optimize_memory_usage`` the row being overwritten has no mass); a new transition
gets the largest ``p`` seen so far (1.0 at first); sampling is stratified (the total split into
``batch_size`` equal segments, one draw each, with the global ``numpy.random`` that SB3 seeds);
``w_i = (N P(i))^-beta / max_j (N P(j))^-beta``, the max over every stored transition (from the
smallest priority), which is ``(p_i^alpha / min_j p_j^alpha)^-beta``. With ``alpha=0`` sampling is
uniform and every weight is exactly 1.0. A sample's fields other than ``weights`` and ``indices``
are what SB3's ``_get_samples`` computes for the drawn rows and envs.

Stale updates. Each slot has a generation that moves on when the slot is overwritten; each
sample records the generations of what it drew (:mod:`sb3_integration.buffers._pending`), and
``update_priorities`` drops the entries whose slot was overwritten since *that* sample drew
it, even when a later sample returned the same index values. Given the ``indices`` object the
sample returned (as SB3-style learners pass ``samples.indices``), it finds that sample's own
record for as long as the object lives. Given a copy (a list, a tensor of them, a pickle: the
same values in the same order) it finds the last :data:`PENDING_SAMPLES` samples with those
values, and an entry applies only where every one of them drew the slot's current generation
(where they disagree the update might be the older one's: dropped). Indices that match no
sample (a slice, a reordering, a copy of a sample older than the last :data:`PENDING_SAMPLES`)
update the transitions stored now.

Threads. ``add()`` and ``sample()`` take the buffer's lock, so with one writer thread and
sampling threads every sample is whole: drawn and read between two adds.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore.priority import PriorityIndex
from sb3_integration.buffers._pending import PendingSamples
from sb3_integration.buffers.replay import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)
from sb3_integration.persistence.priorities import check_masses_stored, saved_priorities
from sb3_integration.samplers import Draw, PrioritizedSampler, Sampler, priority_masses

__all__ = [
    "PENDING_SAMPLES",
    "CompressedPrioritizedDictReplayBuffer",
    "CompressedPrioritizedNStepReplayBuffer",
    "CompressedPrioritizedReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedReplayBufferSamples",
    "PrioritizedReplayMixin",
    "check_masses_stored",
    "checked_update",
    "importance_weights",
    "saved_priorities",
]

#: recent samples whose generations update_priorities finds by the indices' values (copies of them)
PENDING_SAMPLES = 256
_PRIORITY_ARRAYS = ("priority_masses", "priority_generations", "priority_max")


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, then ``weights`` and ``indices``."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    indices: Any  # numpy int64, or an int64 tensor on buffer_device


class PrioritizedDictReplayBufferSamples(NamedTuple):
    """SB3's ``DictReplayBufferSamples`` fields, then ``weights`` and ``indices``."""

    observations: dict[str, th.Tensor]
    actions: th.Tensor
    next_observations: dict[str, th.Tensor]
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    indices: Any


def _nonneg(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _vector(x: Any, name: str) -> np.ndarray:
    """``x`` (numpy, torch or a sequence) as a 1-D numpy array."""
    if isinstance(x, th.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} are on torch's meta device, which holds no values (a meta buffer's "
                             f"samples have shapes only): give {name} on a device with data")
        if x.is_floating_point() and x.dtype not in (th.float16, th.float32, th.float64):
            x = x.float()  # bfloat16, float8: numpy has no such dtype; exact in float32
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x)
    except Exception as e:
        raise ValueError(f"{name} must be a 1-D array, got {type(x).__name__}: {e}") from None
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    return a


def importance_weights(masses: np.ndarray, min_mass: float, beta: float) -> np.ndarray:
    """``(m_i / m_min) ** -beta`` as float32 (exactly 1.0 with ``beta = 0`` or equal masses): the
    paper's ``(N P(i))^-beta / max_j (N P(j))^-beta`` with the max over every stored transition."""
    masses = np.asarray(masses, np.float64)
    if not beta or not len(masses):
        return np.ones(len(masses), np.float32)
    return np.power(masses / min_mass, -beta).astype(np.float32)


def checked_update(indices: Any, priorities: Any, alpha: float,
                   epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An ``update_priorities`` call's arguments checked: ``(indices int64, priorities fp64, masses)``
    with ``masses = (priorities + epsilon) ** alpha``; ValueError naming what is wrong otherwise
    (not 1-D, different lengths, non-integer indices, on torch's meta device, priorities
    negative, NaN, infinite, or whose masses fp32 cannot hold: see
    :func:`chunkstore.priority.check_masses`). Tensors of any float dtype are read (bfloat16 as
    float32). Where the indices may point is the caller's to check."""
    idx, pri = _vector(indices, "indices"), _vector(priorities, "priorities")
    if idx.size and idx.dtype.kind not in "iu":
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
    if pri.size and pri.dtype.kind not in "iuf":
        raise ValueError(f"priorities must be numbers, got dtype {pri.dtype}")
    if idx.shape != pri.shape:
        raise ValueError(f"indices and priorities must have the same length, got {len(idx)} and {len(pri)}")
    pri = pri.astype(np.float64)
    if pri.size and not (np.isfinite(pri).all() and pri.min() >= 0):
        raise ValueError("priorities must be finite and >= 0")
    if idx.size and idx.dtype.kind == "u" and int(idx.max()) > np.iinfo(np.int64).max:  # a cast would wrap it
        raise ValueError(f"indices must be stored transitions; got {int(idx.max())}")
    return idx.astype(np.int64), pri, priority_masses(pri, alpha, epsilon)  # refuses what the index cannot hold


class PrioritizedReplayMixin:
    """Priorities over a compressed replay buffer (put before the buffer class).

    ``sample()`` draws with :class:`~sb3_integration.samplers.prioritized.PrioritizedSampler`
    (over :meth:`_draw_slots`); with ``prefetch``, a batch drawn ahead holds the priorities,
    weights and generations of its draw (``update_priorities`` of the batches before it
    does not change it).
    """

    _sampler: Sampler = PrioritizedSampler()

    buffer_size: int
    n_envs: int
    pos: int
    full: bool
    optimize_memory_usage: bool
    device: th.device
    buffer_device: Any
    _lock: Any

    def __init__(self, buffer_size: int, observation_space: Any, action_space: Any, device: Any = "auto",
                 n_envs: int = 1, optimize_memory_usage: bool = False, handle_timeout_termination: bool = True,
                 *, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6, **options: Any) -> None:
        alpha, beta, epsilon = _nonneg(alpha, "alpha"), _nonneg(beta, "beta"), _nonneg(epsilon, "epsilon")
        super().__init__(buffer_size, observation_space, action_space, device, n_envs,  # type: ignore[call-arg]
                         optimize_memory_usage, handle_timeout_termination, **options)
        self._alpha, self._beta, self._epsilon = alpha, beta, epsilon
        self._priorities = PriorityIndex(self.buffer_size * self.n_envs)
        self._pending = PendingSamples(PENDING_SAMPLES)

    # -- the options ----------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """How much prioritization is used (0: uniform)."""
        return self._alpha

    @property
    def epsilon(self) -> float:
        """Added to every priority given to :meth:`update_priorities`."""
        return self._epsilon

    @property
    def beta(self) -> float:
        """Importance-sampling exponent of the weights (0: all 1; 1: full correction); settable."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = _nonneg(value, "beta")

    @property
    def priority_index(self) -> PriorityIndex:
        """The index of ``p^alpha`` per slot ``pos * n_envs + env``."""
        return self._priorities

    def priorities(self) -> np.ndarray:
        """``p_i`` of every slot (fp64; 0 where nothing can be sampled), from the stored ``p^alpha``."""
        m = self._priorities.get(np.arange(self._priorities.capacity))
        if self._alpha == 0:
            return (m > 0).astype(np.float64)
        return m ** (1.0 / self._alpha)

    @property
    def nbytes_held(self) -> int:
        """The buffer's storage (see the uniform buffer's) and the priority index's arrays."""
        return super().nbytes_held + self._priorities.nbytes  # type: ignore[misc]

    # -- writing ----------------------------------------------------------------------------
    def _advance(self, pos: int) -> None:
        """Row ``pos`` is written: its transitions get the largest priority (one index step), then pos moves."""
        n = self.n_envs
        if self.optimize_memory_usage and self.buffer_size > 1:  # the next row is being overwritten: no mass
            nxt = (pos + 1) % self.buffer_size
            slots = np.r_[pos * n + np.arange(n), nxt * n + np.arange(n)]
            self._priorities.set(slots, np.r_[np.full(n, self._priorities.max), np.zeros(n)])
        else:
            self._priorities.set_span(pos * n, n)
        # an interrupt from here to the commit leaves row pos with mass before pos moves: the
        # retried add sets it again, and sample() never returns a slot beyond what is stored
        super()._advance(pos)  # type: ignore[misc]

    def reset(self) -> None:
        with self._lock:
            state = self._priorities.state_dict()
            state.update(masses=np.zeros_like(state["masses"]), generations=state["generations"] + 1, max=1.0)
            self._priorities.load_state_dict(state)  # an interrupt from here on leaves data without mass only
            super().reset()  # type: ignore[misc]

    # -- sampling -----------------------------------------------------------------------------
    def sample(self, batch_size: int, env: VecNormalize | None = None) -> Any:
        """A prioritized, stratified sample: SB3's fields, ``weights`` and ``indices``.

        ``batch_size``: an int >= 0 (numpy's too); TypeError for a float, a bool or a tensor
        (SB3's uniform buffers raise TypeError for those), ValueError for a negative one.
        """
        if isinstance(batch_size, (bool, np.bool_)) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {batch_size!r} ({type(batch_size).__name__})")
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        if batch_size == 0 and self.size():  # type: ignore[attr-defined]  # SB3's empty fields (nothing drawn)
            none = np.zeros(0, np.int64)
            with self._lock:  # read here, not on a prefetch worker: none of its reads may run meanwhile
                self._quiesce()  # type: ignore[attr-defined]
                samples = self._read_draw(Draw(none, none), env)  # type: ignore[attr-defined]
            return self._prioritized(samples, none, np.zeros(0, np.float32))
        # the replay buffer's sample(): SB3's error when empty, else this class's sampler and _finish_draw,
        # drawn ahead with prefetch, or drawn and read under the writer's lock
        return super().sample(batch_size, env=env)  # type: ignore[misc]

    def _draw_slots(self, batch_size: int, rng: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``batch_size`` slots stratified by mass (``rng``: None for numpy's global generator), their
        importance weights and generations: the draw :class:`PrioritizedSampler` makes."""
        with self._lock:
            if self._priorities.total <= 0:
                raise ValueError("every stored transition has priority 0 (epsilon=0 and priorities of 0): "
                                 "nothing can be sampled")
            slots, masses, gens = self._priorities.sample(batch_size, rng)
            stored = self.pos * self.n_envs
            if not self.full and slots[-1] >= stored:  # slots come in order: only after an interrupted add
                self._priorities.update(np.arange(stored, stored + self.n_envs), 0.0)  # its row: no mass
                slots, masses, gens = self._priorities.sample(batch_size, rng)
            low = self._priorities.min
        return slots, importance_weights(masses, low, self._beta), gens

    def _finish_draw(self, draw: Draw, samples: Any) -> Any:
        """The read ``samples`` with weights and indices; the draw's generations kept for ``update_priorities``
        as this sample's own record (see :mod:`~sb3_integration.buffers._pending`)."""
        assert draw.envs is not None and draw.generations is not None and draw.weights is not None  # prioritized draws
        slots = draw.rows * self.n_envs + draw.envs
        with self._lock:
            out = self._prioritized(samples, slots, draw.weights)
            self._pending.record(out.indices, slots, draw.generations)
        return out

    def _prioritized(self, samples: Any, slots: np.ndarray, weights: np.ndarray) -> Any:
        """SB3's ``samples`` with ``weights`` (on ``device``) and ``indices`` (on ``buffer_device`` if set)."""
        indices: Any = slots if self.buffer_device is None else th.as_tensor(slots, device=self.buffer_device)
        cls = PrioritizedDictReplayBufferSamples if isinstance(samples.observations, dict) \
            else PrioritizedReplayBufferSamples
        return cls(**samples._asdict(), weights=th.as_tensor(weights, device=self.device), indices=indices)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """``p_i = priorities + epsilon`` for the transitions at ``indices`` (e.g. ``|TD error|``).

        ``indices``: a sample's ``indices`` (its stale entries are dropped) or any 1-D integer array
        of stored transitions; ``priorities``: 1-D, finite, >= 0, as long (numpy or torch). ValueError
        otherwise, and nothing changes.
        """
        idx, _, masses = checked_update(indices, priorities, self._alpha, self._epsilon)
        with self._lock:
            stored = (self.buffer_size if self.full else self.pos) * self.n_envs
            if idx.size and (idx.min() < 0 or idx.max() >= stored):
                raise ValueError(f"indices must be stored transitions, in [0, {stored}); got {idx.min()}..{idx.max()}")
            gens = self._pending.expected(indices, idx, self._priorities.generations(idx))
            keep = np.ones(len(idx), bool)
            if self.optimize_memory_usage and self.full:  # the row being overwritten keeps no mass
                keep = idx // self.n_envs != self.pos
            if keep.all():
                self._priorities.update(idx, masses, gens)
            else:
                self._priorities.update(idx[keep], masses[keep], None if gens is None else gens[keep])

    # -- state ---------------------------------------------------------------------------------
    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        kwargs, arrays = super()._extra_file_state()  # type: ignore[misc]
        st = self._priorities.state_dict()
        kwargs.update(alpha=self._alpha, beta=self._beta, epsilon=self._epsilon)
        arrays.update(priority_masses=st["masses"], priority_generations=st["generations"],
                      priority_max=np.array([st["max"]]))
        return kwargs, arrays

    def _restore_extra_file_state(self, arrays: dict[str, np.ndarray]) -> None:
        super()._restore_extra_file_state(arrays)  # type: ignore[misc]
        if not all(name in arrays for name in _PRIORITY_ARRAYS):  # no priorities saved: as if just added
            stored = (self.buffer_size if self.full else self.pos) * self.n_envs
            masses = np.zeros(self._priorities.capacity, np.float32)
            masses[:stored] = 1.0
            if self.optimize_memory_usage and self.full:
                masses[self.pos * self.n_envs:(self.pos + 1) * self.n_envs] = 0.0
            arrays = dict(priority_masses=masses, priority_generations=np.zeros(len(masses), np.uint16),
                          priority_max=np.array([1.0]))
        self._priorities = saved_priorities(arrays, rows=self.buffer_size, n_envs=self.n_envs, pos=self.pos,
                                            full=self.full, fanout=self._priorities.fanout)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = super().__getstate__()  # type: ignore[misc]
            state["_priorities"] = self._priorities.state_dict()
            state.pop("_pending", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        index = PriorityIndex.from_state_dict(state.pop("_priorities"))
        super().__setstate__(state)  # type: ignore[misc]
        check_masses_stored(index, n_envs=self.n_envs, pos=self.pos, full=self.full)
        self._priorities = index
        self._pending = PendingSamples(PENDING_SAMPLES)


class CompressedPrioritizedReplayBuffer(PrioritizedReplayMixin, CompressedReplayBuffer):
    """:class:`~sb3_integration.buffers.replay.CompressedReplayBuffer` with prioritized sampling.

    Arguments as the uniform buffer's (SB3's, then every store option as a keyword), plus
    keyword-only ``alpha`` (0.6), ``beta`` (0.4) and ``epsilon`` (1e-6); see the module docstring.
    """


class CompressedPrioritizedDictReplayBuffer(PrioritizedReplayMixin, CompressedDictReplayBuffer):
    """:class:`~sb3_integration.buffers.replay.CompressedDictReplayBuffer` with prioritized sampling."""


class CompressedPrioritizedNStepReplayBuffer(PrioritizedReplayMixin, CompressedNStepReplayBuffer):
    """:class:`~sb3_integration.buffers.replay.CompressedNStepReplayBuffer` with prioritized sampling.

    ``n_steps`` and ``gamma`` keyword-only, as in SB3; the priority belongs to the n-step
    transition that starts at the index.
    """

