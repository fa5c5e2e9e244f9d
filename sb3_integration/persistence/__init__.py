"""Save a compressed replay buffer to one HDF5 file and load it back, bit-exactly.

``files``: the file format (:class:`ReplayState` written and read; the buffers' ``save`` / ``load`` /
``state_dict`` / ``from_state_dict`` over it are :mod:`sb3_integration.buffers.files`, a layer up);
``priorities``: a prioritized buffer's saved priorities checked and rebuilt; ``spaces``: gymnasium spaces
as plain data for a file; ``_load_checks``: what a loaded file must satisfy. The names of ``files``
are re-exported here (``sb3_integration.persistence`` was one module before 0.2).
"""

from typing import Any

from sb3_integration.persistence import files
from sb3_integration.persistence.files import *  # noqa: F403
from sb3_integration.persistence.files import __all__ as __all__


def __getattr__(name: str) -> Any:  # every other name the module had, as before
    return getattr(files, name)
