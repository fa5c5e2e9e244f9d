"""Drop-in Stable-Baselines3 buffers on the chunk store.

Swap one argument: ``DQN(..., replay_buffer_class=CompressedReplayBuffer)``.
The buffers behave exactly like SB3's (same samples for the same seed, same
dtypes, ndarray-like ``observations``, pickling) and store each distinct frame
once, in compressed chunks.

Every buffer also takes sb3-extra-buffers' arguments and codec names
(:mod:`sb3_integration.buffers.extra_buffers`), and its helper names live in
:mod:`sb3_integration.interop.compat`, so migrating from ``sb3_extra_buffers.compressed`` is
one import line; :mod:`sb3_integration.interop.convert` brings existing sb3-extra-buffers
pickles over. :class:`CompressedHerReplayBuffer` is SB3's ``HerReplayBuffer``, compressed.

Where each buffer lives: :mod:`sb3_integration.buffers.replay` (``CompressedReplayBuffer``,
``CompressedDictReplayBuffer``, ``CompressedNStepReplayBuffer``),
:mod:`sb3_integration.buffers.her`, :mod:`sb3_integration.buffers.rollout` (``CompressedRolloutBuffer``,
``CompressedDictRolloutBuffer``), :mod:`sb3_integration.interop.compat` (``GpuReplayBuffer``,
``GpuRolloutBuffer``). The module paths before 0.2 (``sb3_integration.replay``, ...) still import,
with a ``DeprecationWarning`` naming the new one, until 0.4.0 (:mod:`sb3_integration._legacy`).
"""

from __future__ import annotations

import importlib
from typing import Any

from sb3_integration import _legacy

#: where each public name lives, each name once; names load on first use (PEP 562), so a process
#: that needs only part of the package (a replay service's shard or writer,
#: sb3_integration.distributed) does not import torch and SB3 for it
_EXPORTS: dict[str, tuple[str, ...]] = {
    "buffers.options": ("DEFAULT_CHUNK_LEN", "DEFAULT_COMPRESSION"),
    "buffers.replay": ("CompressedReplayBuffer", "CompressedDictReplayBuffer", "CompressedNStepReplayBuffer"),
    "buffers.her": ("CompressedHerReplayBuffer",),
    "buffers.rollout": ("CompressedRolloutBuffer", "CompressedDictRolloutBuffer"),
    "buffers.prioritized": (
        "CompressedPrioritizedReplayBuffer", "CompressedPrioritizedDictReplayBuffer",
        "CompressedPrioritizedNStepReplayBuffer", "PrioritizedReplayBufferSamples",
        "PrioritizedDictReplayBufferSamples", "PrioritizedReplayMixin"),
    "engine.frames": ("FrameStore", "StackLayout"),
    "buffers.extra_buffers": ("CodecFallbackWarning",),
    "interop.compat": (
        "CompressedArray", "DummyCls", "GpuReplayBuffer", "GpuRolloutBuffer", "find_buffer_dtypes",
        "find_gpu_buffer_dtypes", "find_smallest_dtype", "has_igzip", "has_numba", "init_jit",
        "numpy_dtype_to_torch"),
    "interop.convert": ("from_sb3_extra_buffers", "load_replay_buffer"),
    "algorithms.per_dqn": ("PrioritizedDQN",),
    "algorithms.per_qrdqn": ("PrioritizedQRDQN",),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_HOME)

_legacy.install()  # the module paths before 0.2 (sb3_integration.replay, ...): see _legacy


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'sb3_integration' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sb3_integration.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
