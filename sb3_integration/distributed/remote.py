"""Calls to the service's actors: our errors as themselves, Ray's restart errors retried.

Ray wraps an exception raised inside an actor in a ``RayTaskError`` whose text is Ray's
header and the remote traceback. :func:`get` hands the caller the exception the actor
raised instead (its type and its one-line message) when it is one of the service's own
errors or a plain ``ValueError`` / ``TypeError`` / ``IndexError`` / ``KeyError``.

:func:`call` retries a call while its actor is being restarted by Ray
(``ActorUnavailableError``, or the call lost with the process that died) until
``retry_s`` has passed, then raises :class:`ServiceUnavailableError`; an actor that is
gone (Ray does not restart it) raises it at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sb3_integration.distributed.errors import (
    LimiterClosed,
    MissingMessagesError,
    RateLimiterTimeout,
    ServiceUnavailableError,
    ShardLostError,
)

__all__ = ["RETRY_S", "ServiceUnavailableError", "ShardLostError", "call", "get", "unwrap"]

#: seconds a service call is retried while its actor restarts
RETRY_S = 30.0


#: the exceptions an actor raises that its callers get as themselves
_PASSED_THROUGH = (RateLimiterTimeout, LimiterClosed, ServiceUnavailableError, ShardLostError, MissingMessagesError,
                   ValueError, TypeError, IndexError, KeyError)


def unwrap(e: BaseException) -> BaseException:
    """The exception an actor raised, if ``e`` is Ray's wrapper of one of ours; else ``e``."""
    import ray

    if isinstance(e, ray.exceptions.RayTaskError):
        cause = getattr(e, "cause", None)
        if isinstance(cause, _PASSED_THROUGH):
            return cause
    return e


def get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` that raises the actor's own exception (see the module docstring)."""
    import ray

    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayTaskError as e:
        cause = unwrap(e)
        if cause is e:
            raise
        raise cause from None


def call(submit: Callable[[], Any], what: str, *, restarts: bool, retry_s: float = RETRY_S) -> Any:
    """``get(submit())``, submitted again while the actor restarts (see the module docstring).

    ``restarts``: whether Ray restarts this actor (``max_restarts``); without, a dead actor
    raises at once.
    """
    import ray

    deadline = time.monotonic() + retry_s
    delay = 0.05
    while True:
        try:
            return get(submit())
        except ray.exceptions.RayActorError as e:
            restarting = isinstance(e, ray.exceptions.ActorUnavailableError) or restarts
            if not restarting or time.monotonic() > deadline:
                raise ServiceUnavailableError(f"{what}: the actor did not answer "
                                              f"({type(e).__name__}{'' if restarting else ', gone'})") from None
            time.sleep(delay)
            delay = min(1.0, 2 * delay)

