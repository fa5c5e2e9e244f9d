"""No Ctrl-C inside numba's compiler or cache loader: signals held off while a kernel loads.

numba compiles (or loads from its disk cache) a kernel for each new type signature
at the call that first needs it: the first ``add()`` of a buffer with a new key, a
first sample. That work runs Python code of numba and llvmlite holding their locks;
a KeyboardInterrupt landing in it left numba's own state half-built (every later
call failed in its typing registry), a lock held (a deadlock with a thread that
compiles too) or a double free in llvmlite (the process aborts).

:func:`guard_module` wraps ``_compile_for_args`` of every numba dispatcher of a
module (numba's C dispatcher calls that method, found on the instance, only when no
compiled version fits the arguments): while it runs, every signal with a Python
handler (SIGINT's ``default_int_handler``, a SIGALRM timer's) is recorded instead of
handled, and delivered to its own handler as soon as the load is done. Calls that
find their kernel compiled pay nothing. :func:`interrupts_deferred` is the same for
any block (the import of the native layer).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["guard", "guard_module", "interrupts_deferred"]


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold off signals with Python handlers for the block; deliver them after it (main thread only).

    Other threads never run Python signal handlers, so there the block just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}
    for valid in signal.valid_signals():  # first, with no side effect: what to restore
        try:
            handler = signal.getsignal(valid)
        except (OSError, ValueError):  # pragma: no cover - a signal Python cannot ask about
            continue
        if callable(handler):
            old[int(valid)] = handler
    pending: list[tuple[int, Any]] = []
    state = {"holding": True}

    def hold(signum: int, frame: Any) -> None:
        if state["holding"]:
            pending.append((signum, frame))
        else:  # the restore below was cut short: behave as the real handler
            old[signum](signum, frame)

    try:
        for sig in old:
            signal.signal(sig, hold)
        yield
    finally:
        state["holding"] = False  # from here a signal reaches its own handler (through hold if need be)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for signum, frame in pending:  # the first that raises ends the loop, as Ctrl-C would
            old[signum](signum, frame)


def guard(dispatcher: Any) -> Any:
    """Make ``dispatcher`` (a numba ``@njit`` function) compile and load with signals held off."""
    if getattr(dispatcher, "_chunkstore_guarded", False):
        return dispatcher
    compile_for_args = dispatcher._compile_for_args

    def guarded(*args: Any, **kws: Any) -> Any:
        with interrupts_deferred():
            return compile_for_args(*args, **kws)

    dispatcher._compile_for_args = guarded
    dispatcher._chunkstore_guarded = True
    return dispatcher


def guard_module(namespace: dict[str, Any]) -> None:
    """:func:`guard` every numba dispatcher in a module's ``globals()``."""
    from numba.core.dispatcher import Dispatcher

    for value in list(namespace.values()):
        if isinstance(value, Dispatcher):
            guard(value)
