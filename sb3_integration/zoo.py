"""rl-zoo3 plugin: the buffer class names usable in hyperparameter files, like ``HerReplayBuffer``.

rl-zoo3 turns the strings ``replay_buffer_class`` and ``replay_buffer_kwargs`` of
a hyperparameter YAML into objects with ``eval`` in the namespace of
``rl_zoo3.exp_manager``, which knows ``HerReplayBuffer`` but not this package
(``sb3_integration.CompressedReplayBuffer`` fails with ``NameError``). Importing
this module adds the buffer classes to that namespace; rl-zoo3 imports it for
you with ``--gym-packages``::

    python -m rl_zoo3.train --algo dqn --env PongNoFrameskip-v4 \\
        --gym-packages sb3_integration.zoo -conf examples/rl_zoo3_dqn.yml

with, in the YAML, ``replay_buffer_class: CompressedReplayBuffer`` and
``replay_buffer_kwargs: "dict(compression_method='zstd3+dict')"``. Without the
plugin the same works as ``replay_buffer_class: "__import__('sb3_integration').CompressedReplayBuffer"``.

rl-zoo3 evaluates only ``policy_kwargs``, ``replay_buffer_class`` and
``replay_buffer_kwargs``: for ``rollout_buffer_class`` (PPO, A2C) use a Python
hyperparameter file (``-conf examples/rl_zoo3_ppo.py``), whose dict holds the
class itself. See ``docs/rl-zoo3.md``.
"""

from __future__ import annotations

from typing import Any

import sb3_integration

__all__ = ["NAMES", "register"]

#: the names made available to rl-zoo3's hyperparameter strings
NAMES = (
    "CompressedReplayBuffer",
    "CompressedDictReplayBuffer",
    "CompressedNStepReplayBuffer",
    "CompressedHerReplayBuffer",
    "CompressedPrioritizedReplayBuffer",
    "CompressedPrioritizedDictReplayBuffer",
    "CompressedPrioritizedNStepReplayBuffer",
    "CompressedRolloutBuffer",
    "CompressedDictRolloutBuffer",
    "GpuReplayBuffer",
    "GpuRolloutBuffer",
)


def register(namespace: Any = None) -> None:
    """Add :data:`NAMES` to ``namespace`` (default: the module ``rl_zoo3.exp_manager``).

    Raises
    ------
    ImportError
        rl-zoo3 is not installed (``pip install 'chunkstore[zoo]'``).
    ValueError
        The namespace already binds one of the names to something else.
    """
    if namespace is None:
        try:
            import rl_zoo3.exp_manager as namespace
        except ImportError as e:
            raise ImportError("sb3_integration.zoo is an rl-zoo3 plugin; pip install 'chunkstore[zoo]'") from e
    for name in NAMES:
        obj = getattr(sb3_integration, name)
        existing = getattr(namespace, name, obj)
        if existing is not obj:
            raise ValueError(f"{namespace.__name__}.{name} is already {existing!r}; not replacing it")
        setattr(namespace, name, obj)


register()
