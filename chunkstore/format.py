"""Deprecated: the former name of :mod:`chunkstore.hdf5` (a module named after a builtin).

``from chunkstore import format as fmt`` still gives :mod:`chunkstore.hdf5`'s functions
(``save``, ``load``, ``verify``, ...) and :func:`~chunkstore.hdf5.read_observations`, with
a DeprecationWarning; import :mod:`chunkstore.hdf5` instead. It will be removed in 0.3.
"""

from __future__ import annotations

import warnings

from chunkstore.hdf5 import (
    FORMAT_NAME,
    FORMAT_VERSION,
    PRIVATE_FILTER_ID,
    Problem,
    Store,
    VerifyReport,
    load,
    read_observations,
    save,
    verify,
    verify_report,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PRIVATE_FILTER_ID",
    "Problem",
    "Store",
    "VerifyReport",
    "load",
    "read_observations",
    "save",
    "verify",
    "verify_report",
]

warnings.warn("chunkstore.format is deprecated: import chunkstore.hdf5 (the same functions) instead",
              DeprecationWarning, stacklevel=2)
