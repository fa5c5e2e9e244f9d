"""``sb3_integration.per_dqn``, the module's path before 0.2: now :mod:`sb3_integration.algorithms.per_dqn`.

Kept so that imports and pickles naming the old path go on working; new code imports the new one.
"""

from typing import Any

from sb3_integration.algorithms import per_dqn as _new
from sb3_integration.algorithms.per_dqn import *  # noqa: F403
from sb3_integration.algorithms.per_dqn import __all__ as __all__


def __getattr__(name: str) -> Any:  # every other name the module had, as before
    return getattr(_new, name)
