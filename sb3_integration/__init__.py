"""Drop-in Stable-Baselines3 buffers on the chunk store.

Swap one argument: ``DQN(..., replay_buffer_class=CompressedReplayBuffer)``.
The buffers behave exactly like SB3's (same samples for the same seed, same
dtypes, ndarray-like ``observations``, pickling) and store each distinct frame
once, in compressed chunks.

Every buffer also takes sb3-extra-buffers' arguments and codec names
(:mod:`sb3_integration.interop.extra_buffers`), and its helper names live in
:mod:`sb3_integration.interop.compat`, so migrating from ``sb3_extra_buffers.compressed`` is
one import line; :mod:`sb3_integration.interop.convert` brings existing sb3-extra-buffers
pickles over. :class:`CompressedHerReplayBuffer` is SB3's ``HerReplayBuffer``, compressed.

Where each buffer lives: :mod:`sb3_integration.buffers.replay` (``CompressedReplayBuffer``,
``CompressedDictReplayBuffer``, ``CompressedNStepReplayBuffer``),
:mod:`sb3_integration.buffers.her`, :mod:`sb3_integration.buffers.rollout` (``CompressedRolloutBuffer``,
``CompressedDictRolloutBuffer``), :mod:`sb3_integration.interop.compat` (``GpuReplayBuffer``,
``GpuRolloutBuffer``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: where each name lives; names load on first use (PEP 562), so a process that needs only part
#: of the package (a replay service's shard or writer, sb3_integration.distributed) does not
#: import torch and SB3 for it
_EXPORTS = {
    "DEFAULT_CHUNK_LEN": "buffers.options", "DEFAULT_COMPRESSION": "buffers.options",
    "CompressedReplayBuffer": "replay", "CompressedDictReplayBuffer": "replay",
    "CompressedNStepReplayBuffer": "replay", "CompressedHerReplayBuffer": "her",
    "CompressedRolloutBuffer": "rollout", "CompressedDictRolloutBuffer": "rollout",
    "CodecFallbackWarning": "extra_buffers",
    **dict.fromkeys([
        "CompressedArray", "DummyCls", "GpuReplayBuffer", "GpuRolloutBuffer", "find_buffer_dtypes",
        "find_gpu_buffer_dtypes", "find_smallest_dtype", "has_igzip", "has_numba", "init_jit",
        "numpy_dtype_to_torch"], "compat"),
    "from_sb3_extra_buffers": "convert", "load_replay_buffer": "convert",
    "FrameStore": "frames", "StackLayout": "frames",
    **dict.fromkeys(["CompressedPrioritizedReplayBuffer", "CompressedPrioritizedDictReplayBuffer",
                     "CompressedPrioritizedNStepReplayBuffer", "PrioritizedReplayBufferSamples",
                     "PrioritizedDictReplayBufferSamples", "PrioritizedReplayMixin"], "prioritized"),
    "PrioritizedDQN": "per_dqn", "PrioritizedQRDQN": "per_qrdqn",
}

if TYPE_CHECKING:  # what the names are, for type checkers and readers
    from sb3_integration.algorithms.per_dqn import PrioritizedDQN
    from sb3_integration.algorithms.per_qrdqn import PrioritizedQRDQN
    from sb3_integration.buffers.her import CompressedHerReplayBuffer
    from sb3_integration.buffers.options import DEFAULT_CHUNK_LEN, DEFAULT_COMPRESSION
    from sb3_integration.buffers.prioritized import (
        CompressedPrioritizedDictReplayBuffer,
        CompressedPrioritizedNStepReplayBuffer,
        CompressedPrioritizedReplayBuffer,
        PrioritizedDictReplayBufferSamples,
        PrioritizedReplayBufferSamples,
        PrioritizedReplayMixin,
    )
    from sb3_integration.buffers.replay import (
        CompressedDictReplayBuffer,
        CompressedNStepReplayBuffer,
        CompressedReplayBuffer,
    )
    from sb3_integration.buffers.rollout import CompressedDictRolloutBuffer, CompressedRolloutBuffer
    from sb3_integration.engine.frames import FrameStore, StackLayout
    from sb3_integration.interop.compat import (
        CompressedArray,
        DummyCls,
        GpuReplayBuffer,
        GpuRolloutBuffer,
        find_buffer_dtypes,
        find_gpu_buffer_dtypes,
        find_smallest_dtype,
        has_igzip,
        has_numba,
        init_jit,
        numpy_dtype_to_torch,
    )
    from sb3_integration.interop.convert import from_sb3_extra_buffers, load_replay_buffer
    from sb3_integration.interop.extra_buffers import CodecFallbackWarning


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
    "CompressedPrioritizedDictReplayBuffer",
    "CompressedPrioritizedNStepReplayBuffer",
    "CompressedPrioritizedReplayBuffer",
    "CompressedReplayBuffer",
    "CompressedRolloutBuffer",
    "DummyCls",
    "FrameStore",
    "GpuReplayBuffer",
    "GpuRolloutBuffer",
    "PrioritizedDQN",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedQRDQN",
    "PrioritizedReplayBufferSamples",
    "PrioritizedReplayMixin",
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
