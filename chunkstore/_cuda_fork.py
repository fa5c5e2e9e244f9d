"""Stores whose data is on CUDA, in a process forked from the one that made them.

CUDA does not survive ``fork()``: in the child every CUDA call fails. torch turns the
calls it makes from Python into a ``RuntimeError``, but a CUDA object made in the
parent and released or waited on in the child (an event's destructor or
``synchronize``, a pinned buffer's, device memory's) fails inside C++ code that
cannot raise, and the child *aborts* (SIGABRT): on its first ``sample()`` of a
``buffer_device="cuda"`` buffer, or simply when it exits normally, finalizers run.

So a store on CUDA registers itself here (:func:`note_cuda_store`). In a forked
child every registered store is kept alive for good (one reference that is never
released: its CUDA objects are never destroyed there, so nothing calls into CUDA
at exit), and the store refuses its operations with a clear error
(:func:`check_process`; closing it only marks it closed). The parent is untouched.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any

__all__ = ["check_process", "forked_from", "note_cuda_store"]

_stores: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False


def note_cuda_store(store: Any) -> int:
    """``store`` holds CUDA objects: keep it alive in forked children. Returns this process's id,
    for :func:`check_process`."""
    global _registered
    with _lock:
        if not _registered:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _registered = True
        _stores.add(store)
    return os.getpid()


def forked_from(pid: int | None) -> bool:
    """Whether this process is not ``pid`` (a store made there is one a fork child inherited)."""
    return pid is not None and pid != os.getpid()


def check_process(name: str, device: Any, pid: int | None) -> None:
    """Raise where a store of ``device`` made in process ``pid`` cannot be used: a forked child."""
    if forked_from(pid):
        raise RuntimeError(
            f"{name}: its data is on {device}, which this process cannot use: it was forked from the "
            f"process that made it (pid {pid}), and CUDA does not survive fork(). Start child processes "
            f"with the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn')), or use the "
            f"buffer in the parent")


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork: that thread is gone here
    for store in list(_stores):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(store))  # never released: no CUDA call at exit
