"""A prioritized buffer's saved priorities, checked as a load installs them (and ``verify`` reads them).

Below the buffers, so the persistence layer's ``verify`` checks a file's priorities without
importing the buffer classes (:mod:`sb3_integration.buffers.prioritized` re-exports both names).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.priority import DEFAULT_FANOUT, PriorityIndex

__all__ = ["check_masses_stored", "saved_priorities"]


def check_masses_stored(index: PriorityIndex, *, n_envs: int, pos: int, full: bool) -> None:
    """ValueError when ``index`` gives mass to a slot that holds no transition (sample() would
    return an unwritten row: zeros). The row at ``pos`` may have mass: an interrupted add
    leaves it so, and sample() takes it away before drawing."""
    if full:
        return
    masses = index.get(np.arange(min((pos + 1) * n_envs, index.capacity), index.capacity))
    if masses.any():
        first = (pos + 1) * n_envs + int(np.flatnonzero(masses)[0])
        raise ValueError(f"priority masses on slots that hold no transition: slot {first} has mass "
                         f"{masses[masses > 0][0]:g}, but {pos * n_envs} slots are stored (pos {pos})")


def saved_priorities(arrays: Any, *, rows: int, n_envs: int, pos: int, full: bool,
                     fanout: int = DEFAULT_FANOUT) -> PriorityIndex:
    """The priority index of saved ``arrays`` (``priority_masses``, ``priority_generations``,
    ``priority_max``) for a buffer of ``rows`` x ``n_envs`` slots at ``pos``/``full``;
    ValueError when it does not fit (see :class:`PriorityIndex` and :func:`check_masses_stored`)."""
    max_ = np.asarray(arrays["priority_max"]).reshape(-1)
    if max_.shape != (1,):
        raise ValueError(f"priority_max must hold one value, got shape {max_.shape}")
    index = PriorityIndex.from_state_dict({
        "capacity": rows * n_envs, "fanout": fanout, "masses": arrays["priority_masses"],
        "generations": arrays["priority_generations"], "max": float(max_[0])})
    check_masses_stored(index, n_envs=n_envs, pos=pos, full=full)
    return index
