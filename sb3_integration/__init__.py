"""Drop-in Stable-Baselines3 buffers on the chunk store.

Swap one argument: ``DQN(..., replay_buffer_class=CompressedReplayBuffer)``.
The buffers behave exactly like SB3's (same samples for the same seed, same
dtypes, ndarray-like ``observations``, pickling) and store each distinct frame
once, in compressed chunks.

The replay and rollout classes exported here also take sb3-extra-buffers'
arguments and codec names (:mod:`sb3_integration.compat`), so migrating from
``sb3_extra_buffers.compressed`` is one import line; :mod:`sb3_integration.convert`
brings existing sb3-extra-buffers pickles over. :class:`CompressedHerReplayBuffer`
is SB3's ``HerReplayBuffer``, compressed.
"""

from __future__ import annotations

import importlib
from typing import Any

# names load on first use (PEP 562): a process that needs only part of the package (a replay
# service's shard or writer, sb3_integration.distributed) does not import torch and SB3 for it
_EXPORTS = {
    "DEFAULT_CHUNK_LEN": "_common", "DEFAULT_COMPRESSION": "_common",
    **dict.fromkeys([
        "CodecFallbackWarning", "CompressedArray", "CompressedDictReplayBuffer",
        "CompressedDictRolloutBuffer", "CompressedReplayBuffer", "CompressedRolloutBuffer", "DummyCls",
        "GpuReplayBuffer", "GpuRolloutBuffer", "find_buffer_dtypes", "find_gpu_buffer_dtypes",
        "find_smallest_dtype", "has_igzip", "has_numba", "init_jit", "numpy_dtype_to_torch"], "compat"),
    "from_sb3_extra_buffers": "convert", "load_replay_buffer": "convert",
    "FrameStore": "frames", "StackLayout": "frames",
    "CompressedHerReplayBuffer": "her", "CompressedNStepReplayBuffer": "replay",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sb3_integration' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sb3_integration.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "CodecFallbackWarning",
    "CompressedArray",
    "CompressedDictReplayBuffer",
    "CompressedDictRolloutBuffer",
    "CompressedHerReplayBuffer",
    "CompressedNStepReplayBuffer",
    "CompressedReplayBuffer",
    "CompressedRolloutBuffer",
    "DummyCls",
    "FrameStore",
    "GpuReplayBuffer",
    "GpuRolloutBuffer",
    "StackLayout",
    "find_buffer_dtypes",
    "find_gpu_buffer_dtypes",
    "find_smallest_dtype",
    "from_sb3_extra_buffers",
    "has_igzip",
    "has_numba",
    "init_jit",
    "load_replay_buffer",
    "numpy_dtype_to_torch",
]
