"""Rate limiting with Reverb's semantics, without Ray: who may insert or sample now.

A limiter counts ``inserts`` and ``samples`` and keeps the difference
``D = inserts * samples_per_insert - samples`` inside ``[min_diff, max_diff]``:

* sampling ``m`` items is allowed when at least ``min_size`` items were inserted and
  ``D - m >= min_diff``;
* inserting ``n`` items is allowed while the table is still below ``min_size`` (with
  them), or when ``D + n * samples_per_insert <= max_diff``.

:meth:`RateLimiter.min_size` only waits for ``min_size`` items (the band is infinite);
:meth:`RateLimiter.sample_to_insert_ratio` centres a band of ``2 * error_buffer`` on
``samples_per_insert * min_size``. Blocking calls (:meth:`RateLimiter.acquire_insert`,
:meth:`RateLimiter.acquire_sample`) wait on a condition variable with a timeout and
are woken with :class:`LimiterClosed` by :meth:`RateLimiter.close`.

Deadlock. When both kinds of call are blocked, ``D > max_diff - n * spi`` and
``D < min_diff + m``, which is possible only if ``max_diff - min_diff < n * spi + m``.
Reverb refuses bands narrower than ``2 * max(1, spi)`` (one insert and one sample);
batched calls need room for a whole batch, so a limiter is built for the largest
insert and sample batches it will see (``max_insert_batch``, ``max_sample_batch``)
and refuses a band that could deadlock them, and a larger batch at the call. Before
``min_size`` no sample is allowed, so an insert batch that starts just below
``min_size`` must fit under ``max_diff`` too: ``(min_size - 1 + n) * spi <= max_diff``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from sb3_integration.distributed.errors import LimiterClosed, RateLimiterTimeout

__all__ = ["LimiterClosed", "RateLimiter", "RateLimiterTimeout"]


@dataclass
class RateLimiter:
    """Reverb-style rate limiter (see the module docstring).

    Parameters
    ----------
    samples_per_insert
        Target ratio of sampled to inserted items (> 0).
    min_size
        Items inserted before any sample is allowed (>= 1).
    min_diff, max_diff
        Bounds of ``inserts * samples_per_insert - samples``.
    max_insert_batch, max_sample_batch
        The largest batches callers ask for at once: the band must hold both.

    Examples
    --------
    >>> lim = RateLimiter.sample_to_insert_ratio(2.0, min_size=10, error_buffer=600,
    ...                                          max_insert_batch=256, max_sample_batch=32)
    >>> lim.can_sample(1), lim.can_insert(10)
    (False, True)
    >>> lim.acquire_insert(10, timeout=0); lim.can_sample(32)
    True
    """

    samples_per_insert: float = 1.0
    min_size: int = 1
    min_diff: float = -math.inf
    max_diff: float = math.inf
    max_insert_batch: int = 1
    max_sample_batch: int = 1

    def __post_init__(self) -> None:
        if not self.samples_per_insert > 0:
            raise ValueError(f"samples_per_insert must be > 0, got {self.samples_per_insert}")
        if int(self.min_size) < 1:
            raise ValueError(f"min_size must be >= 1, got {self.min_size}")
        if min(int(self.max_insert_batch), int(self.max_sample_batch)) < 1:
            raise ValueError("max_insert_batch and max_sample_batch must be >= 1")
        if self.min_diff > self.max_diff:
            raise ValueError(f"min_diff {self.min_diff} > max_diff {self.max_diff}")
        band = self.max_diff - self.min_diff
        reverb = 2 * max(1.0, self.samples_per_insert)
        batched = self.max_insert_batch * self.samples_per_insert + self.max_sample_batch
        if band < max(reverb, batched):
            raise ValueError(
                f"the error band [{self.min_diff}, {self.max_diff}] (width {band}) can deadlock: it "
                f"must be at least 2 * max(1, samples_per_insert) = {reverb} and hold one insert "
                f"batch and one sample batch ({self.max_insert_batch} * {self.samples_per_insert} + "
                f"{self.max_sample_batch} = {batched}); widen the band or use smaller batches")
        start = (self.min_size - 1 + self.max_insert_batch) * self.samples_per_insert
        if start > self.max_diff:
            raise ValueError(
                f"max_diff {self.max_diff} can deadlock the start: an insert batch of "
                f"{self.max_insert_batch} begun just below min_size {self.min_size} needs "
                f"max_diff >= {start} (error_buffer >= (max_insert_batch - 1) * samples_per_insert)")
        self.inserts = 0
        self.samples = 0
        self.closed = False
        self._cond = threading.Condition()

    # -- constructors with Reverb's names ---------------------------------------------
    @classmethod
    def min_size_limiter(cls, min_size: int, *, max_insert_batch: int = 1,
                         max_sample_batch: int = 1) -> RateLimiter:
        """Sampling waits for ``min_size`` inserted items; nothing else is limited."""
        return cls(1.0, int(min_size), -math.inf, math.inf, max_insert_batch, max_sample_batch)

    @classmethod
    def sample_to_insert_ratio(cls, samples_per_insert: float, min_size: int, error_buffer: float, *,
                               max_insert_batch: int = 1, max_sample_batch: int = 1) -> RateLimiter:
        """Keep ``samples / inserts`` near ``samples_per_insert``, within ``error_buffer`` samples."""
        offset = samples_per_insert * min_size
        return cls(samples_per_insert, int(min_size), offset - error_buffer, offset + error_buffer,
                   max_insert_batch, max_sample_batch)

    # -- the rules ---------------------------------------------------------------------
    @property
    def diff(self) -> float:
        return self.inserts * self.samples_per_insert - self.samples

    def can_insert(self, n: int) -> bool:
        if self.inserts + n <= self.min_size:
            return True
        return (self.inserts + n) * self.samples_per_insert - self.samples <= self.max_diff

    def can_sample(self, m: int) -> bool:
        return self.inserts >= self.min_size and self.diff - m >= self.min_diff

    # -- blocking calls ----------------------------------------------------------------
    def acquire_insert(self, n: int, timeout: float | None = None) -> None:
        """Wait until ``n`` items may be inserted and count them; ``timeout`` None waits forever."""
        self._acquire(int(n), timeout, insert=True)

    def acquire_sample(self, m: int, timeout: float | None = None) -> None:
        """Wait until ``m`` items may be sampled and count them."""
        self._acquire(int(m), timeout, insert=False)

    def _acquire(self, n: int, timeout: float | None, *, insert: bool) -> None:
        limit = self.max_insert_batch if insert else self.max_sample_batch
        if n < 0 or n > limit:
            raise ValueError(f"a batch of {n} {'inserts' if insert else 'samples'} is outside "
                             f"0..{limit}, the largest this limiter was built for")
        allowed = self.can_insert if insert else self.can_sample
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not allowed(n):
                if self.closed:
                    raise LimiterClosed("the rate limiter was closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    kind = "insert" if insert else "sample"
                    raise RateLimiterTimeout(
                        f"{kind} of {n} items timed out after {timeout} s (inserts {self.inserts}, "
                        f"samples {self.samples}, min_size {self.min_size}, band "
                        f"[{self.min_diff}, {self.max_diff}], diff {self.diff})")
                self._cond.wait(left)
            if self.closed:
                raise LimiterClosed("the rate limiter was closed")
            if insert:
                self.inserts += n
            else:
                self.samples += n
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting call with :class:`LimiterClosed`; later calls raise it too."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def state(self) -> dict[str, float]:
        with self._cond:
            return {"inserts": self.inserts, "samples": self.samples, "diff": self.diff,
                    "min_size": self.min_size, "min_diff": self.min_diff, "max_diff": self.max_diff,
                    "samples_per_insert": self.samples_per_insert}
