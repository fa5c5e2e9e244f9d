"""``prefetch=k``: the next ``k`` batches drawn now and read on a worker thread.

A buffer with ``prefetch=k`` (TorchRL's name and meaning) answers ``sample(n)`` with
a batch it drew ``k`` calls earlier and read on one worker thread while the learner
computed; at the same call it draws the batch ``k`` calls ahead and hands its read
to the worker. The first call (and one whose ``batch_size`` or ``env`` differs from
the batches queued, which are dropped) draws ``k + 1`` batches at once.

Semantics (the buffer side: :class:`~sb3_integration.buffers.replay.CompressedReplayBuffer`):

- **What a batch holds.** Each batch holds the transitions present when it was
  drawn (scheduled). Draws happen on the calling thread under the buffer's writer
  lock, and every write (``add``, ``reset``) waits, under that lock, until every
  batch already drawn has been read, so no slot a queued batch reads is overwritten
  before its read. The overlap ``prefetch`` buys is with what the learner does
  between its ``sample()`` and its next ``add()`` (the gradient step).
- **Randomness.** Draws come from the buffer's own ``numpy.random.Generator``
  (seeded by ``prefetch_seed``, or by one draw from numpy's global generator when
  the buffer is built, which SB3 seeds first), never from the global generator
  afterwards: runs are reproducible, but the indices are not the ones SB3's buffer
  draws (prefetch off keeps SB3's exact sequence).
- **Outputs.** A batch's tensors belong to the caller: the output blocks a read
  fills are reused only once nothing refers to them
  (:mod:`sb3_integration.engine._outputs`), so a queued batch and one the caller
  holds never share memory.
- **Errors.** An error of a read (or of a draw made ahead) is raised by the next
  ``sample()`` call, with its traceback; the queued batches are dropped and the
  call after it starts afresh.
- **Lifetime.** ``close()`` stops the worker; so does garbage collection of the
  buffer (the worker holds no reference to it between reads). Pickling and
  ``save()`` wait for the queued reads and leave the worker and its queue out: a
  loaded or unpickled buffer keeps ``prefetch`` and its generator, and starts a new
  worker at its first ``sample()``.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any

import numpy as np

from sb3_integration.samplers.base import Draw

__all__ = ["Prefetcher", "check_prefetch", "prefetch_generator"]


def check_prefetch(prefetch: Any) -> int:
    """``prefetch`` as the number of batches drawn ahead (None or 0: off); TypeError or ValueError otherwise."""
    if prefetch is None:
        return 0
    if isinstance(prefetch, (bool, np.bool_)) or not isinstance(prefetch, (int, np.integer)):
        raise TypeError(f"prefetch must be an int >= 0 (batches drawn ahead) or None, got {prefetch!r}")
    if prefetch < 0:
        raise ValueError(f"prefetch must be >= 0 (batches drawn ahead), got {prefetch}")
    return int(prefetch)


def prefetch_generator(seed: Any) -> np.random.Generator:
    """The generator a prefetching buffer draws from: ``seed`` (an int >= 0), or None for one
    draw from numpy's global generator (seeded by SB3's ``set_random_seed``)."""
    if seed is None:
        seed = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))  # noqa: NPY002 (one draw, then never again)
    elif isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"prefetch_seed must be an int >= 0 or None, got {seed!r}")
    return np.random.default_rng(int(seed))


@dataclass
class _Job:
    batch_size: int
    env: Any
    draw: Draw | None
    future: cf.Future[Any]


class Prefetcher:
    """The queue of batches drawn ahead and their worker thread (see the module docstring).

    The buffer calls :meth:`take` holding its writer lock, and the methods it names:
    ``buffer._sampler.sample(buffer, n, rng)`` (the draw, here) and
    ``buffer._read_draw(draw, env)`` (the read, on the worker).
    """

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"a Prefetcher draws k >= 1 batches ahead, got {k}")
        self.k = k
        self._jobs: collections.deque[_Job] = collections.deque()
        self._pool: cf.ThreadPoolExecutor | None = None

    def take(self, buffer: Any, batch_size: int, env: Any, rng: np.random.Generator) -> _Job:
        """This call's batch (its read may still run: ``job.future.result()``), with ``k`` more scheduled.

        Raises the error of any queued batch known to have failed (the queue is dropped).
        """
        self._raise_failed()
        if self._jobs and (self._jobs[0].batch_size != batch_size or self._jobs[0].env is not env):
            self.drop()
        if not self._jobs:
            self._jobs.append(self._schedule(buffer, batch_size, env, rng, ahead=False))
        job = self._jobs.popleft()
        while len(self._jobs) < self.k:
            self._jobs.append(self._schedule(buffer, batch_size, env, rng, ahead=True))
        return job

    def _schedule(self, buffer: Any, batch_size: int, env: Any, rng: np.random.Generator, *, ahead: bool) -> _Job:
        try:
            draw = buffer._sampler.sample(buffer, batch_size, rng)
        except Exception as e:
            if not ahead:
                raise
            failed: cf.Future[Any] = cf.Future()  # raised at the next call, which would have drawn it
            failed.set_exception(e)
            return _Job(batch_size, env, None, failed)
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-prefetch")
        return _Job(batch_size, env, draw, self._pool.submit(buffer._read_draw, draw, env))

    def _raise_failed(self) -> None:
        for job in self._jobs:
            if job.future.done() and not job.future.cancelled() and job.future.exception() is not None:
                self.drop()
                raise job.future.exception()  # type: ignore[misc]

    @property
    def pending(self) -> int:
        """Batches drawn ahead and not yet taken."""
        return len(self._jobs)

    def quiesce(self) -> None:
        """Wait until every queued batch is read (its error, if any, stays for the next take)."""
        if self._jobs:
            cf.wait([job.future for job in self._jobs])

    def drop(self) -> None:
        """Forget the queued batches (waits for the read running now)."""
        jobs, self._jobs = list(self._jobs), collections.deque()
        for job in jobs:
            job.future.cancel()
        cf.wait([job.future for job in jobs])

    def close(self) -> None:
        """Drop the queue and stop the worker thread (a later :meth:`take` starts a new one)."""
        self.drop()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a Prefetcher (a worker thread and its queue) is not pickled; the buffer leaves it out")
