"""Drop-in Stable-Baselines3 buffers on the chunk store.

Swap one argument: ``DQN(..., replay_buffer_class=CompressedReplayBuffer)``.
The buffers behave exactly like SB3's (same samples for the same seed, same
dtypes, ndarray-like ``observations``, pickling) and store each distinct frame
once, in compressed chunks.
"""

from sb3_integration._common import DEFAULT_CHUNK_LEN, DEFAULT_COMPRESSION
from sb3_integration.frames import FrameStore, StackLayout
from sb3_integration.replay import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)
from sb3_integration.rollout import CompressedDictRolloutBuffer, CompressedRolloutBuffer

__all__ = [
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "CompressedDictReplayBuffer",
    "CompressedDictRolloutBuffer",
    "CompressedNStepReplayBuffer",
    "CompressedReplayBuffer",
    "CompressedRolloutBuffer",
    "FrameStore",
    "StackLayout",
]
