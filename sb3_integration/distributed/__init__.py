"""A compressed replay service on Ray: sharded, rate-limited, checkpointed.

Writers (env runners in other processes or nodes) deduplicate frames and compress
chunks locally and ship sealed chunks with small index records; shards store the bytes
as they are; learners sample uniformly over all shards through an SB3 buffer class.

* :mod:`~sb3_integration.distributed.rate_limiter` -- Reverb's MinSize / SampleToInsertRatio (no Ray)
* :mod:`~sb3_integration.distributed.wire` -- what travels between processes
* :mod:`~sb3_integration.distributed.shard_store` -- one shard's store (no Ray); its state in and out
  (``state_dict`` / ``load_state_dict``, the frame store's protocol) and checkpoint files in
  :mod:`~sb3_integration.distributed.shard_checkpoint`
* :mod:`~sb3_integration.distributed.writer` -- :class:`ChunkWriter` (no Ray), :class:`ReplayWriter`
* :mod:`~sb3_integration.distributed.actors` -- the coordinator's and the shards' actor bodies
* :mod:`~sb3_integration.distributed.service` -- :class:`ReplayService`: create, connect, close
* :mod:`~sb3_integration.distributed.sampler` -- :class:`GlobalSampler`, :class:`DistributedReplayBuffer`
* :mod:`~sb3_integration.distributed.prioritized` -- :class:`PrioritizedDistributedReplayBuffer` (a shard's
  priorities: :mod:`~sb3_integration.distributed.shard_priority`)
* :mod:`~sb3_integration.distributed.local` -- Ray on the loopback interface
* :mod:`~sb3_integration.distributed.remote` -- calls to the actors: our errors as themselves, restarts retried
* :mod:`~sb3_integration.distributed.options` -- options checked at the call
* :mod:`~sb3_integration.distributed.errors` -- every error (base :class:`ReplayServiceError`) and
  warning (base :class:`ReplayServiceWarning`) of the service

Ray is imported only by the modules that need it (``pip install 'chunkstore-rl[distributed]'``).
"""

from __future__ import annotations

from sb3_integration.distributed.errors import (
    DataLossWarning,
    LimiterClosed,
    MissingMessagesError,
    RateLimiterTimeout,
    ReplayServiceError,
    ReplayServiceWarning,
    ServiceUnavailableError,
    ShardLostError,
    ShardUnavailableWarning,
)
from sb3_integration.distributed.rate_limiter import RateLimiter
from sb3_integration.distributed.shard_store import ShardStore, ShardStoreState, StoreSpec
from sb3_integration.distributed.writer import ChunkWriter, ReplayWriter

__all__ = [
    "ChunkWriter",
    "DataLossWarning",
    "DistributedReplayBuffer",
    "GlobalSampler",
    "LimiterClosed",
    "MissingMessagesError",
    "PrioritizedDistributedReplayBuffer",
    "RateLimiter",
    "RateLimiterTimeout",
    "ReplayService",
    "ReplayServiceError",
    "ReplayServiceWarning",
    "ReplayWriter",
    "ServiceUnavailableError",
    "ShardLostError",
    "ShardStore",
    "ShardStoreState",
    "ShardUnavailableWarning",
    "StoreSpec",
    "start_local_ray",
]


def __getattr__(name: str):  # the Ray-backed classes load on first use
    if name in ("DistributedReplayBuffer", "GlobalSampler"):
        from sb3_integration.distributed import sampler

        return getattr(sampler, name)
    if name == "PrioritizedDistributedReplayBuffer":
        from sb3_integration.distributed.prioritized import PrioritizedDistributedReplayBuffer

        return PrioritizedDistributedReplayBuffer
    if name == "ReplayService":
        from sb3_integration.distributed.service import ReplayService

        return ReplayService
    if name == "start_local_ray":
        from sb3_integration.distributed.local import start_local_ray

        return start_local_ray
    raise AttributeError(name)
