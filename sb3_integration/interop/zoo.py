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

The plugin also adds two algorithms to rl-zoo3's ``ALGOS`` (:data:`ALGOS`: ``per_dqn`` is
:class:`~sb3_integration.PrioritizedDQN`, ``per_qrdqn`` :class:`~sb3_integration.PrioritizedQRDQN`).
rl-zoo3's ``train`` fixes the choices of ``--algo`` before it imports ``--gym-packages``, so
these run through this module, which registers everything and then hands the command line to
rl-zoo3's own ``train`` (or ``enjoy``)::

    python -m sb3_integration.zoo train --algo per_dqn --env PongNoFrameskip-v4 \\
        -conf examples/rl_zoo3_per_dqn.yml

(rl-zoo3 ships no hyperparameter file for these names, so ``-conf`` is needed.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from sb3_integration.algorithms.per_dqn import PrioritizedDQN
from sb3_integration.algorithms.per_qrdqn import PrioritizedQRDQN
from sb3_integration.buffers.her import CompressedHerReplayBuffer
from sb3_integration.buffers.prioritized import (
    CompressedPrioritizedDictReplayBuffer,
    CompressedPrioritizedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
)
from sb3_integration.buffers.replay import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)
from sb3_integration.buffers.rollout import CompressedDictRolloutBuffer, CompressedRolloutBuffer
from sb3_integration.interop.compat import GpuReplayBuffer, GpuRolloutBuffer

__all__ = ["ALGOS", "NAMES", "SEARCH_AS", "main", "register"]

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

#: the algorithms added to ``rl_zoo3.utils.ALGOS`` (key: the ``--algo`` name)
ALGOS = {"per_dqn": "PrioritizedDQN", "per_qrdqn": "PrioritizedQRDQN"}
#: each class of NAMES and ALGOS, by name (imported from its home, not through the package's front door)
_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    CompressedReplayBuffer, CompressedDictReplayBuffer, CompressedNStepReplayBuffer, CompressedHerReplayBuffer,
    CompressedPrioritizedReplayBuffer, CompressedPrioritizedDictReplayBuffer,
    CompressedPrioritizedNStepReplayBuffer, CompressedRolloutBuffer, CompressedDictRolloutBuffer,
    GpuReplayBuffer, GpuRolloutBuffer, PrioritizedDQN, PrioritizedQRDQN)}
#: the rl-zoo3 algorithm whose hyperparameter search (``-optimize``) each one reuses
SEARCH_AS = {"per_dqn": "dqn", "per_qrdqn": "qrdqn"}


def register(namespace: Any = None, algos: Any = None) -> None:
    """Add :data:`NAMES` to ``namespace`` (default: the module ``rl_zoo3.exp_manager``) and
    :data:`ALGOS` to the dict ``algos`` (default: ``rl_zoo3.utils.ALGOS``, and then rl-zoo3's
    hyperparameter samplers and converters of :data:`SEARCH_AS` under the new keys too).

    Raises
    ------
    ImportError
        rl-zoo3 is not installed (``pip install 'chunkstore-rl[zoo]'``).
    ValueError
        The namespace already binds one of the names, or ``algos`` one of the keys, to something else.
    """
    if namespace is None:
        try:
            import rl_zoo3.exp_manager as namespace
        except ImportError as e:
            raise ImportError("sb3_integration.zoo is an rl-zoo3 plugin; pip install 'chunkstore-rl[zoo]'") from e
    for name in NAMES:
        obj = _CLASSES[name]
        existing = getattr(namespace, name, obj)
        if existing is not obj:
            raise ValueError(f"{namespace.__name__}.{name} is already {existing!r}; not replacing it")
        setattr(namespace, name, obj)
    default_algos = algos is None
    if algos is None:
        import rl_zoo3.utils

        algos = rl_zoo3.utils.ALGOS
    for key, name in ALGOS.items():
        cls = _CLASSES[name]
        existing = algos.get(key, cls)
        if existing is not cls:
            raise ValueError(f"rl-zoo3's ALGOS[{key!r}] is already {existing!r}; not replacing it")
        algos[key] = cls
    if default_algos:  # -optimize: the samplers and converters of the uniform algorithms
        from rl_zoo3.hyperparams_opt import HYPERPARAMS_CONVERTER, HYPERPARAMS_SAMPLER

        tables: tuple[dict[str, Any], ...] = (HYPERPARAMS_SAMPLER, HYPERPARAMS_CONVERTER)
        for table in tables:
            for key, base in SEARCH_AS.items():
                if base in table:
                    table.setdefault(key, table[base])


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m sb3_integration.zoo {train,enjoy} ARGS``: rl-zoo3's ``train`` / ``enjoy``
    with :data:`NAMES` and :data:`ALGOS` registered first (``ARGS`` are rl-zoo3's own)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("train", "enjoy"):
        raise SystemExit("usage: python -m sb3_integration.zoo {train,enjoy} [rl-zoo3 arguments]")
    register()
    command = args.pop(0)
    sys.argv = [f"rl_zoo3.{command}", *args]
    if command == "train":
        from rl_zoo3.train import train

        train()
    else:
        from rl_zoo3.enjoy import enjoy

        enjoy()


register()

if __name__ == "__main__":
    main()
