"""The replay buffers' ``prefetch=k`` front: the worker that draws and reads batches ahead, and the
waits that keep a write (``add``, ``reset``, a state capture) from changing rows a drawn batch reads.

The draws and reads themselves are :mod:`sb3_integration.samplers.prefetch`'s; this class holds the
buffer's side: its ``prefetch`` setting, its generator and its :class:`~sb3_integration.samplers.Prefetcher`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stable_baselines3.common.vec_env import VecNormalize

from sb3_integration.samplers import Prefetcher, check_prefetch
from sb3_integration.samplers.prefetch import prefetch_generator

__all__ = ["PrefetchFront"]


class PrefetchFront:
    """``prefetch`` for a replay buffer (mixed in before its storage classes; see the module docstring)."""

    _lock: Any
    _prefetch_supported: bool
    _prefetch_rng: Any  # a numpy Generator once prefetch was on
    _prefetch_k: int
    _prefetch_seed: int | None

    _finish_draw: Callable[[Any, Any], Any]  # the buffer's: what sample() returns for a read draw

    @property
    def prefetch(self) -> int:
        """Batches drawn and read ahead on a worker thread (0: off); settable, see
        :mod:`sb3_integration.samplers.prefetch`."""
        return int(self.__dict__.get("_prefetch_k", 0))

    @prefetch.setter
    def prefetch(self, value: int | None) -> None:
        k = check_prefetch(value)
        if k and not self._prefetch_supported:
            raise ValueError(f"{type(self).__name__} does not take prefetch (it samples with SB3's own code)")
        with self._lock:
            self._stop_prefetch()
            if k and self.__dict__.get("_prefetch_rng") is None:
                self._prefetch_rng = prefetch_generator(self.__dict__.get("_prefetch_seed"))
            self._prefetch_k = k

    def _prefetched(self, batch_size: int, env: VecNormalize | None) -> Any:
        with self._lock:
            prefetcher = self.__dict__.get("_prefetcher")
            if prefetcher is None:
                prefetcher = self._prefetcher = Prefetcher(self._prefetch_k)
            job = prefetcher.take(self, batch_size, env, self._prefetch_rng)  # set with k
        try:
            samples = job.future.result()
        except BaseException:
            with self._lock:
                prefetcher.drop()
            raise
        assert job.draw is not None  # a job without a draw failed, and its result() raised
        return self._finish_draw(job.draw, samples)

    def _quiesce(self) -> None:
        """Wait until the batches drawn ahead are read (called holding the lock, before a write)."""
        prefetcher = self.__dict__.get("_prefetcher")
        if prefetcher is not None:
            prefetcher.quiesce()

    def _stop_prefetch(self) -> None:
        """Drop the batches drawn ahead and stop the worker thread (the next sample() starts one)."""
        prefetcher = self.__dict__.pop("_prefetcher", None)
        if prefetcher is not None:
            prefetcher.close()

    def state_dict(self) -> Any:
        with self._lock:
            self._quiesce()  # an n-step read marks a row truncated while it runs, as SB3's does
            return super().state_dict()  # type: ignore[misc]  # ReplayFiles', after this class in the MRO
