"""What a buffer asks of a frame store: the seam a second implementation plugs into.

:class:`FrameStoreAPI` is everything the buffers call on a frame store
(:class:`~sb3_integration.engine.frames.FrameStore` implements it); :data:`OBS` and
:data:`NEXT` are the kinds of stack a row holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from sb3_integration.engine.frame_state import FrameStoreState

__all__ = ["NEXT", "OBS", "FrameStoreAPI"]

#: kinds of stack a row can hold: the observation and the next observation
OBS, NEXT = 0, 1


class FrameStoreAPI(Protocol):
    """What a buffer asks of a frame store (the seam a second implementation plugs into)."""

    obs_shape: tuple[int, ...]
    dtype: np.dtype
    name: str
    device: Any  # the torch device the frames live on (None: host memory)
    cache: Any  # the decoded-chunk cache it holds (what share_cache set; 0: none)

    def put(self, which: int, row: int, x: np.ndarray, attempt: Any = None) -> None: ...

    def put_row(self, row: int, stacks: Sequence[np.ndarray], attempt: Any = None) -> None: ...

    def abandon(self, attempt: Any) -> None: ...

    def share_cache(self, cache: Any) -> None: ...

    def release_before(self, row: int) -> None: ...

    def gather(self, requests: Sequence[tuple[Any, np.ndarray]], envs: np.ndarray) -> list[Any]: ...

    def view(self, which: int) -> np.ndarray | None:
        """The numpy array ``(n_rows, n_envs, *obs_shape)`` the buffer hands SB3's code for ``which``
        (a raw store's own), or None: reads go through :meth:`gather`."""
        ...

    def clear(self) -> None: ...

    def state_dict(self) -> FrameStoreState: ...

    def load_state_dict(self, state: FrameStoreState) -> None: ...

    def close(self) -> None: ...

    def info(self) -> dict[str, Any]: ...

    @property
    def nbytes_stored(self) -> int: ...

    @property
    def nbytes_held(self) -> int: ...

    @property
    def device_nbytes(self) -> int: ...
