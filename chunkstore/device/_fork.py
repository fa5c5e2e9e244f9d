"""A forked child of a process whose device store ran on the CPU can use torch.

torch runs its CPU operators on GNU OpenMP's threads (its intra-op pool). Those
threads are started by the first large operator of the process and do not survive
``fork()``: a child's next parallel region waits for them forever. A store on the
``cpu`` device runs large operators from its first uploads and decodes (a 1 MiB
segment upload, a batch's ``index_select``), so every ``os.fork`` child, fork
``multiprocessing.Process`` and fork ``Pool`` worker of a process that filled or
sampled such a buffer hung in its first large torch operator (plain torch hangs
the same way once the parent ran one). The child cannot restart OpenMP's threads;
it can leave them alone: once a CPU store exists in the parent, a forked child
runs torch's intra-op work on its own thread (``torch.set_num_threads(1)``, where
every operator runs inline and OpenMP is never entered). Inter-op threads and
CUDA are untouched (CUDA cannot be used in a forked child anyway).
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["note_cpu_store"]

_registered = False
_lock = threading.Lock()


def note_cpu_store(torch: Any) -> None:
    """A store on a CPU device exists in this process: forked children run torch on one thread."""
    global _registered
    if _registered:
        return
    with _lock:
        if not _registered:
            os.register_at_fork(after_in_child=lambda: _after_fork_in_child(torch))
            _registered = True


def _after_fork_in_child(torch: Any) -> None:
    if torch.get_num_threads() > 1:
        torch.set_num_threads(1)
