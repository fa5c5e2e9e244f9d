"""A raw observation key in a saved buffer's file (:mod:`sb3_integration.engine.raw`).

``observations[/<key>]/raw`` holds SB3's arrays as they are: ``raw[0]`` the observations
``(buffer_size, n_envs, *obs_shape)``, ``raw[1]`` the next observations (one array only in SB3's
``optimize_memory_usage`` layout, ``follow``); the store's attributes say ``"storage": "raw"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sb3_integration.engine.raw import RawStoreState

__all__ = ["raw_note", "raw_state"]


def raw_note(p: str, fs: RawStoreState) -> str:
    """How a plain HDF5 reader reads a raw key's observations."""
    if fs.follow:
        return (f"Observations '{p}' are stored raw as SB3's optimize_memory_usage layout: {p}/raw[0, r, e] is "
                f"the observation of row r, env e; its next observation is {p}/raw[0, (r + 1) mod rows, e].")
    return (f"Observations '{p}' are stored raw: {p}/raw[0, r, e] is the observation of row r, env e, "
            f"{p}/raw[1, r, e] its next observation.")


def raw_state(data: np.ndarray, prefix: str, meta: Mapping[str, Any]) -> RawStoreState:
    """A raw key's state from its ``<prefix>/raw`` extra ``data`` (checked against the declared geometry)."""
    state = RawStoreState(obs_shape=tuple(int(d) for d in meta["obs_shape"]), dtype=np.dtype(meta["dtype"]),
                          n_rows=int(meta["n_rows"]), n_envs=int(meta["n_envs"]),
                          stacks_per_row=int(meta["stacks_per_row"]), follow=bool(meta["follow"]),
                          arrays=list(data))
    state.check(prefix)
    return state
