"""``sb3_integration.prioritized``, the module's path before 0.2: now :mod:`sb3_integration.buffers.prioritized`.

Kept so that imports and pickles naming the old path go on working; new code imports the new one.
"""

from typing import Any

from sb3_integration.buffers import prioritized as _new
from sb3_integration.buffers.prioritized import *  # noqa: F403
from sb3_integration.buffers.prioritized import __all__ as __all__


def __getattr__(name: str) -> Any:  # every other name the module had, as before
    return getattr(_new, name)
