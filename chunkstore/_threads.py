"""The thread pools that share one read, safe under Ctrl-C and fork.

Two rules every multi-threaded read follows:

* :func:`wait_all` in a ``finally``: a caller interrupted while its workers run
  (a KeyboardInterrupt from a signal handler lands in the waiting thread) still
  waits for them, cancelling those not started, before its output can be freed.
  No worker ever writes into memory its caller no longer holds.
* :func:`pool` hands out pools that a forked child does not inherit: after
  ``fork()`` the parent's worker threads do not exist in the child, and a pool
  that believes it has idle workers would never run a task. The child starts
  with no pools and no held locks (``os.register_at_fork``).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["pool", "wait_all"]

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


def wait_all(futures: Iterable[Future]) -> None:
    """Return once every future is done or cancelled, whatever interrupts the wait.

    An exception raised while waiting (KeyboardInterrupt) cancels the futures not
    started yet, keeps waiting for the running ones, and is raised again after.
    """
    pending = [f for f in futures if not f.done()]
    interrupted: BaseException | None = None
    while pending:
        try:
            concurrent.futures.wait(pending)
        except BaseException as exc:
            if interrupted is None:
                interrupted = exc
            for f in pending:
                f.cancel()
        pending = [f for f in pending if not f.done()]
    if interrupted is not None:
        raise interrupted


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _pools.clear()  # their threads stayed in the parent
    _sizes.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
