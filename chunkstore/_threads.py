"""The thread pools that share one read, safe under Ctrl-C and fork.

Two rules every multi-threaded read follows:

* :func:`submit` and :func:`wait_all` in a ``finally``: a caller interrupted while
  its workers run (a KeyboardInterrupt from a signal handler lands in the waiting
  thread) still waits for them, cancelling those not started, before its output
  can be freed. A task's future exists before the task does, so none escapes the
  wait. No worker ever writes into memory its caller no longer holds.
* :func:`pool` hands out pools that a forked child does not inherit: after
  ``fork()`` the parent's worker threads do not exist in the child, and a pool
  that believes it has idle workers would never run a task. The child starts
  with no pools and no held locks (``os.register_at_fork``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

__all__ = ["pool", "submit", "wait_all"]

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}
_sizes: dict[str, int] = {}


def pool(name: str, workers: int | None = None) -> ThreadPoolExecutor:
    """The process's pool called ``name``, with at least ``workers`` threads (default: cores, min 2)."""
    want = max(2, os.cpu_count() or 1) if workers is None else max(1, int(workers))
    with _lock:
        p = _pools.get(name)
        if p is None or _sizes[name] < want:
            if p is not None:
                p.shutdown(wait=False)  # running tasks finish; new ones go to the larger pool
            p = _pools[name] = ThreadPoolExecutor(max_workers=want, thread_name_prefix=name)
            _sizes[name] = want
        return p


def submit(pool: ThreadPoolExecutor, futures: list[Future], fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``pool``; its future is appended to ``futures`` *before* the work exists.

    The caller waits for (or cancels) every future in ``futures`` with :func:`wait_all`, so
    whatever interrupts this call, no work runs that the caller does not wait for: a future
    the pool's own ``submit`` returned could be lost between its return and the append.
    """
    future: Future = Future()
    try:
        futures.append(future)
        pool.submit(_run, future, fn, args)
    except BaseException:
        # interrupted before the pool queued the work, or after: a cancelled future is done for
        # wait_all either way, and a queued task whose future is cancelled never runs
        future.cancel()
        raise


def _run(future: Future, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if not future.set_running_or_notify_cancel():
        return  # cancelled by an interrupted caller before it started
    try:
        future.set_result(fn(*args))
    except BaseException as exc:
        future.set_exception(exc)


def wait_all(futures: Iterable[Future]) -> None:
    """Return once every future is done or cancelled, whatever interrupts the wait.

    An exception raised while waiting (KeyboardInterrupt) cancels the futures not
    started yet, keeps waiting for the running ones, and is raised again after.
    (A signal can still land before this function's first line; the workers'
    memory stays safe then because each task holds what it writes and reads:
    see :func:`chunkstore.native.gather`.)
    """
    futures = list(futures)
    interrupted: BaseException | None = None
    while True:
        try:
            if interrupted is not None:
                for f in futures:
                    f.cancel()
            pending = [f for f in futures if not f.done()]
            if not pending:
                break
            # one future at a time: concurrent.futures.wait() acquires every future's lock in a
            # loop, and an interrupt inside that loop leaves some held, so the worker finishing
            # that future blocks forever (a Ctrl-C in sample() hung the process that way)
            with contextlib.suppress(CancelledError):
                pending[0].exception()
        except BaseException as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _pools.clear()  # their threads stayed in the parent
    _sizes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
