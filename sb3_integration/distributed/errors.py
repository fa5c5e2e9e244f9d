"""Every error and warning of the replay service, in one module, each family with its base class.

Errors derive from :class:`ReplayServiceError` (a :class:`chunkstore.ChunkstoreError`), and each
also from the built-in it refines, as chunkstore's do, so ``except TimeoutError`` keeps working for
:class:`RateLimiterTimeout` and ``except ValueError`` for :class:`MissingMessagesError`. Warnings
derive from :class:`ReplayServiceWarning` (a ``RuntimeWarning``). Calls to the actors raise these
to their callers as themselves, not as Ray's wrapper (:mod:`sb3_integration.distributed.remote`).
The modules that raise them re-export their names, as before.
"""

from __future__ import annotations

from chunkstore.errors import ChunkstoreError

__all__ = [
    "DataLossWarning",
    "LimiterClosed",
    "MissingMessagesError",
    "RateLimiterTimeout",
    "ReplayServiceError",
    "ReplayServiceWarning",
    "ServiceUnavailableError",
    "ShardLostError",
    "ShardUnavailableWarning",
]


class ReplayServiceError(ChunkstoreError):
    """Base class of every error of the replay service (:mod:`sb3_integration.distributed`)."""


class RateLimiterTimeout(ReplayServiceError, TimeoutError):
    """A blocking insert or sample waited longer than its timeout."""


class LimiterClosed(ReplayServiceError, RuntimeError):
    """The limiter (the replay service) was closed while a call waited or after."""


class ServiceUnavailableError(ReplayServiceError, RuntimeError):
    """An actor of the replay service did not answer (gone, or still restarting after ``retry_s``)."""


class ShardLostError(ReplayServiceError, RuntimeError):
    """A writer's shard did not come back within the writer's restart timeout."""


class MissingMessagesError(ReplayServiceError, ValueError):
    """A writer's message arrived before earlier ones (a shard restarted from an older checkpoint)."""


class ReplayServiceWarning(RuntimeWarning):
    """Base class of every warning of the replay service."""


class DataLossWarning(ReplayServiceWarning):
    """Transitions a writer had sent were lost (a shard restarted without them)."""


class ShardUnavailableWarning(ReplayServiceWarning):
    """A shard failed a sample call; batches come from the other shards until it is back."""
