"""The rl-zoo3 plugin's documented path (``--gym-packages sb3_integration.zoo``,
``python -m sb3_integration.zoo train ...``): :mod:`sb3_integration.interop.zoo`, under its short name."""

from typing import Any

from sb3_integration.interop import zoo as _new
from sb3_integration.interop.zoo import *  # noqa: F403
from sb3_integration.interop.zoo import __all__ as __all__
from sb3_integration.interop.zoo import main


def __getattr__(name: str) -> Any:  # every other name the module had, as before
    return getattr(_new, name)


if __name__ == "__main__":  # python -m sb3_integration.zoo {train,enjoy} ...
    main()
