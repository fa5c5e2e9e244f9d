"""Which reference each item is encoded against, and when a new reference pays for itself.

A reference costs a whole raw item of device memory, so a new one must save more
than that over the items that will use it. Per sealed chunk:

1. Candidates: the reference of the item just before the chunk (the same writer's
   stream, in a ring of per-writer regions), the most recently used references,
   and the zero row. Each item takes the candidate that gives it the smallest
   record.
2. A *trial*: a chunk's first item is kept on the host as a candidate reference,
   and the next ``window`` items of the same stream (the chunks that follow it)
   are also costed against it. If, over the second half of the window, it saved
   enough bytes per item to pay for its own bytes within one window, it becomes a
   reference; otherwise a new trial starts. Only the second half counts because
   items right after the candidate always resemble it; whether the stream has
   really moved away from the old references shows later.
3. A chunk that costs more than a quarter of a raw item per item against every
   candidate, while its first item would halve the cost of the others, makes that
   item a reference at once (a new screen, a new game).

Measured on 20,000 real Atari frames per game (``tools/bench_device_encodings.py``,
records + references per frame): MsPacman 295 B against 365 with one fixed
reference (19 references made), Pong 164 against 195, Breakout 120 against 153; a
stream that switches games 230 (one fixed reference: 5,094; a keyframe every 256
frames: 553); four streams written interleaved 265 (319). A window of 128 items
beat 256 and 512 on all five.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from chunkstore.device.refs import ReferencePool
from chunkstore.device.runs import RunFormat, cost_matrix

__all__ = ["RECENT", "WINDOW", "ReferencePolicy"]

#: items a trial reference is costed on before it is kept or dropped
WINDOW = 128
#: most recently used references offered as candidates
RECENT = 8
#: trials kept at once (one per stream being written); the oldest goes first
_MAX_TRIALS = 256


@dataclass
class _Trial:
    item: np.ndarray  # the candidate reference (host only)
    seen: int = 0  # items costed against it
    late_saving: int = 0  # bytes it would have saved over the second half of the window


class ReferencePolicy:
    """Chooses references for the items of each sealed chunk; creates references in ``pool``.

    Parameters
    ----------
    fmt
        The run format (costs are record sizes).
    pool
        Where references live.
    window, recent
        See :data:`WINDOW` and :data:`RECENT`.

    Examples
    --------
    >>> import torch
    >>> fmt = RunFormat.for_item(64)
    >>> pool = ReferencePool(torch, torch.device("cpu"), 64)
    >>> policy = ReferencePolicy(fmt, pool)
    >>> items = np.full((4, 64), 7, np.uint8)
    >>> rows = policy.choose(0, 0, items)  # far from zeros: the first item becomes a reference
    >>> bool((pool.host[rows] == items).all())
    True
    """

    def __init__(self, fmt: RunFormat, pool: ReferencePool, *, window: int = WINDOW,
                 recent: int = RECENT) -> None:
        self.fmt, self.pool = fmt, pool
        self.window, self.recent_max = int(window), int(recent)
        self.recent: list[int] = []
        self.trials: OrderedDict[int, _Trial] = OrderedDict()
        self.created = 0  # references made so far

    def choose(self, chunk: int, before: int, items: np.ndarray) -> np.ndarray:
        """Reference rows for ``items`` (``(m, item_nbytes)`` uint8) of ``chunk``.

        ``before`` is the reference of the item just before the chunk (0 if none).
        """
        cands = self._candidates(before)
        costs = cost_matrix(items, self.pool.host[cands], self.fmt, bounded=True)
        best, rows = costs.min(1), cands[costs.argmin(1)]
        new = self._new_reference(chunk, items, best)
        if new is not None:
            row = self.pool.add(new)
            self.created += 1
            mine = cost_matrix(items, new[None], self.fmt)[:, 0]
            rows = np.where(mine < best, row, rows)
        self._used(rows)
        return rows

    def _candidates(self, before: int) -> np.ndarray:
        alive = self.pool.alive
        self.recent = [r for r in self.recent if alive(r)]
        seen = dict.fromkeys([before] if alive(before) else [])
        seen.update(dict.fromkeys(self.recent))
        seen[0] = None
        return np.fromiter(seen, np.int64, len(seen))

    def _used(self, rows: np.ndarray) -> None:
        values, counts = np.unique(rows, return_counts=True)
        top = int(values[np.argmax(counts)])
        if top:
            self.recent = [top, *[r for r in self.recent if r != top][:self.recent_max - 1]]

    def _new_reference(self, chunk: int, items: np.ndarray, best: np.ndarray) -> np.ndarray | None:
        """The item to make a reference of now, if any (and the stream's trial moves on)."""
        m, nbytes = items.shape
        trial = self.trials.pop(chunk - 1, None)
        if m > 1 and best.mean() > nbytes / 4:
            mine = cost_matrix(items[1:], items[:1], self.fmt)[:, 0]
            if 2 * int((best[1:] - mine).sum()) >= int(best[1:].sum()):
                return items[0].copy()
        if trial is None:
            self._start(chunk, items)
            return None
        mine = cost_matrix(items, trial.item[None], self.fmt)[:, 0]
        trial.seen += m
        if trial.seen > self.window // 2:
            trial.late_saving += int((best - mine).sum())
        if trial.seen < self.window:
            self._keep(chunk, trial)
            return None
        self._start(chunk, items)
        return trial.item if 2 * trial.late_saving >= nbytes else None

    def _start(self, chunk: int, items: np.ndarray) -> None:
        self._keep(chunk, _Trial(items[0].copy()))

    def _keep(self, chunk: int, trial: _Trial) -> None:
        self.trials[chunk] = trial
        if len(self.trials) > _MAX_TRIALS:
            self.trials.popitem(last=False)

    def reset(self) -> None:
        """Forget trials (chunk numbers changed: a remap, a clear)."""
        self.trials.clear()
