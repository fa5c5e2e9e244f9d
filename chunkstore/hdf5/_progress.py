"""The progress bar of ``save``, ``load`` and ``verify``: chunks done, shown by tqdm when asked."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

__all__ = ["STEP", "ChunkBar"]

#: chunks between bar updates: the loops it counts do one CRC and one copy per chunk, and a
#: tqdm update per chunk would cost about as much as that work
STEP = 512


class ChunkBar:
    """A context manager counting chunks; ``step(n)`` is cheap, tqdm hears of it every :data:`STEP`.

    ``show=False`` draws nothing (``True``: tqdm draws when the output is a terminal).
    """

    def __init__(self, total: int, desc: str, show: bool) -> None:
        self._bar = tqdm(total=total, unit="chunk", desc=desc, disable=None if show else True,
                         leave=False, unit_scale=True)
        self._pending = 0

    def step(self, n: int = 1) -> None:
        self._pending += n
        if self._pending >= STEP:
            self._bar.update(self._pending)
            self._pending = 0

    def __enter__(self) -> ChunkBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bar.update(self._pending)
        self._pending = 0
        self._bar.close()
