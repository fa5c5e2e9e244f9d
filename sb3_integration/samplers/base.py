"""The sampler protocol: a sampler draws (row, env) pairs; the buffer reads them.

A sampler holds no transitions and reads none. ``sample(buffer, batch_size, rng)``
looks at what the buffer stores (``pos``, ``full``, ``buffer_size``, ``n_envs``,
a prioritized buffer's priority index) and returns a :class:`Draw`. ``rng`` is
where the randomness comes from: None is numpy's global legacy generator, which
SB3 seeds and draws from (``sample()`` without ``prefetch``); a
``numpy.random.Generator`` is a prefetching buffer's own.

Samplers keep no state of their own between draws (the priorities are the
buffer's, and saved with it): ``state_dict()`` names the sampler, and
``load_state_dict()`` checks that a state is this sampler's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Draw", "Sampler", "randint"]


class Draw(NamedTuple):
    """One batch's draw: which transitions, and what a prioritized draw adds.

    ``rows`` and ``envs`` are int arrays of the batch's length (transition
    ``rows[i] * n_envs + envs[i]``); ``envs`` None leaves the envs to the read (SB3's
    ``_get_samples`` draws them); ``weights`` (float32 importance weights) and
    ``generations`` (of the slots when drawn, for stale-update checks) only from
    a prioritized sampler.
    """

    rows: np.ndarray
    envs: np.ndarray | None
    weights: np.ndarray | None = None
    generations: np.ndarray | None = None


def randint(rng: Any, low: int, high: int, size: Any) -> np.ndarray:
    """``low <= x < high`` from ``rng``: numpy's global legacy generator (None), a ``RandomState``
    (both ``randint``, as SB3 calls it) or a ``Generator`` (``integers``)."""
    if rng is None:
        return np.random.randint(low, high, size=size)  # noqa: NPY002 (SB3's own draw)
    if isinstance(rng, np.random.Generator):
        return rng.integers(low, high, size=size)
    return rng.randint(low, high, size=size)


class Sampler:
    """Base of the samplers (see the module docstring); a subclass sets :attr:`name` and ``sample``."""

    #: the sampler's name in its ``state_dict``
    name = "sampler"

    def sample(self, buffer: Any, batch_size: int, rng: Any = None) -> Draw:
        """``batch_size`` transitions of ``buffer`` (which stores at least one), drawn with ``rng``."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state: its name (draws depend on the buffer and ``rng`` only)."""
        return {"sampler": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that ``state`` is this sampler's (ValueError otherwise)."""
        if not isinstance(state, dict) or state.get("sampler") != self.name:
            raise ValueError(f"not a {self.name} sampler's state: {state!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
