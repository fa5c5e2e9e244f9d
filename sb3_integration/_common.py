"""``sb3_integration._common``, split by idea in 0.2; kept because 0.1 pickles name its ``StoreOptions``.

Its names now live in :mod:`sb3_integration.buffers.options` (the store options),
:mod:`sb3_integration.buffers.views` (``ObservationView``), :mod:`sb3_integration.buffers.observations`
(what ``add()`` accepts) and :mod:`sb3_integration.engine.packing` (small arrays in pickles).
"""

from sb3_integration.buffers.observations import (
    coerce_obs,
    lossless_obs,
    sb3_obs,
    stack_axis_order,
    subspaces,
)
from sb3_integration.buffers.options import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_LEN,
    DEFAULT_COMPRESSION,
    PRESETS,
    STORE_OPTIONS,
    StoreOptions,
    check_frame_dedup,
    check_positive_or_none,
    device_budget,
)
from sb3_integration.buffers.views import ObservationView, same_rows
from sb3_integration.engine.packing import pack_array, unpack_array

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_COMPRESSION",
    "PRESETS",
    "STORE_OPTIONS",
    "ObservationView",
    "StoreOptions",
    "check_frame_dedup",
    "check_positive_or_none",
    "coerce_obs",
    "device_budget",
    "lossless_obs",
    "pack_array",
    "same_rows",
    "sb3_obs",
    "stack_axis_order",
    "subspaces",
    "unpack_array",
]
