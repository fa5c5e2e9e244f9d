"""The worker threads that share one read, safe under Ctrl-C and fork.

A KeyboardInterrupt from a signal handler can land in the calling thread after any call
returns, including inside the standard library's synchronisation written in Python:
``threading.Condition.__enter__`` returns after acquiring its lock, and an interrupt on
that return leaves the lock held for good. ``ThreadPoolExecutor.submit`` and
``concurrent.futures.wait`` go through such conditions (the pool's idle semaphore, every
future's condition), and real signals hung ``sample()`` in both. So the caller's side here
makes only single C calls: ``SimpleQueue.put`` to hand a task over, the raw lock of a
task (released by its worker) to wait. The rules every multi-threaded read follows:

* :func:`submit`, and :func:`wait_all` in a ``finally``: a caller interrupted while its
  workers run still waits for every task it handed over, cancelling those not started,
  before its output can be freed. Each task also holds what it reads and writes, so even a
  task handed over in the instant before an interrupt (not yet known to be queued, so not
  waited for) touches only memory that is still allocated; it sees the cancellation and
  does nothing unless it had already started.
* :func:`pool` hands out pools that a forked child does not inherit: after ``fork()`` the
  parent's worker threads do not exist in the child, and a pool that believed it had
  workers would never run a task. The child starts with no pools (``os.register_at_fork``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from queue import SimpleQueue
from typing import Any

__all__ = ["Pool", "Task", "pool", "submit", "wait_all"]

_lock = threading.Lock()
_pools: dict[str, Pool] = {}


class Task:
    """One function call handed to a :class:`Pool`; its worker sets ``finished`` then releases ``wake``."""

    __slots__ = ("args", "cancel_requested", "error", "finished", "fn", "queued", "skipped", "value", "wake")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn: Callable[..., Any] | None = fn
        self.args: tuple[Any, ...] | None = args
        self.value: Any = None
        self.error: BaseException | None = None
        self.queued = self.finished = self.skipped = self.cancel_requested = False
        self.wake = threading.Lock()
        self.wake.acquire()  # released once, by the worker, when the task is finished

    def cancel(self) -> None:
        """Ask the worker not to start it (a running task finishes)."""
        self.cancel_requested = True

    def cancelled(self) -> bool:
        """True if it never ran: skipped by its worker, or never handed over."""
        return self.skipped or not self.queued

    def done(self) -> bool:
        return self.finished or not self.queued

    def result(self) -> Any:
        """Its return value (after :func:`wait_all`); raises what it raised."""
        if self.error is not None:
            raise self.error
        return self.value

    def run(self) -> None:  # in a worker thread: no KeyboardInterrupt lands here
        try:
            if self.cancel_requested:
                self.skipped = True
            elif self.fn is not None and self.args is not None:
                self.value = self.fn(*self.args)
        except BaseException as exc:
            self.error = exc
        finally:
            self.fn = self.args = None  # what it held goes now, not when the caller drops the task
            self.finished = True
            self.wake.release()


class Pool:
    """``workers`` daemon threads taking :class:`Task` objects from one queue."""

    def __init__(self, name: str, workers: int) -> None:
        self.name, self.workers = name, workers
        self.queue: SimpleQueue[Task | None] = SimpleQueue()
        for i in range(workers):
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True).start()

    def _work(self) -> None:
        while (task := self.queue.get()) is not None:
            task.run()

    def shutdown(self) -> None:
        """Let the workers end once the tasks already queued are done."""
        for _ in range(self.workers):
            self.queue.put(None)


def pool(name: str, workers: int | None = None) -> Pool:
    """The process's pool called ``name``, with at least ``workers`` threads (default: cores, min 2)."""
    want = max(2, os.cpu_count() or 1) if workers is None else max(1, int(workers))
    with _lock:
        p = _pools.get(name)
        if p is None or p.workers < want:
            if p is not None:
                p.shutdown()  # queued tasks finish; new ones go to the larger pool
            p = _pools[name] = Pool(name, want)
        return p


def submit(pool: Pool, tasks: list[Task], fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``pool``; the task is appended to ``tasks`` before it is handed over.

    The caller waits for every task in ``tasks`` with :func:`wait_all`. The hand-over is one
    C call; ``queued`` is set right after it, so an interrupt between the two leaves a task
    that :func:`wait_all` does not wait for and cancels (see the module docstring).
    """
    task = Task(fn, args)
    tasks.append(task)
    pool.queue.put(task)
    task.queued = True


def wait_all(tasks: Iterable[Task]) -> None:
    """Return once every handed-over task is finished, whatever interrupts the wait.

    An exception raised while waiting (KeyboardInterrupt) cancels the tasks not started,
    keeps waiting for the running ones, and is raised again after. The caller reads
    results with :meth:`Task.result` afterwards.
    """
    tasks = list(tasks)
    interrupted: BaseException | None = None
    while True:
        try:
            if interrupted is not None:
                for t in tasks:
                    t.cancel_requested = True
            pending = [t for t in tasks if t.queued and not t.finished]
            if not pending:
                break
            pending[0].wake.acquire(timeout=0.1)  # one C call; its release means finished
        except BaseException as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _pools.clear()  # their threads stayed in the parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
