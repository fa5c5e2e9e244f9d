"""``none``: the raw bytes, copied."""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.codecs._base import Codec
from chunkstore.codecs._util import as_bytes, buffer_view, deliver

__all__ = ["NoneCodec"]


class NoneCodec(Codec):
    """Stores the raw bytes unchanged (a baseline, and for incompressible data).

    Examples
    --------
    >>> import numpy as np
    >>> c = NoneCodec()
    >>> a = np.arange(6, dtype=np.int16)
    >>> c.decode(c.encode(a)).view(np.int16).tolist()
    [0, 1, 2, 3, 4, 5]
    """

    codec_id = "none"
    hdf5_filter = "none"

    @property
    def name(self) -> str:
        return "none"

    def encode(self, arr: np.ndarray) -> bytes:
        # A copy, never a view: the caller may overwrite its chunk right after.
        return as_bytes(arr).tobytes()

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        return deliver(self.name, buffer_view(buf), out)

    def _make_native_spec(self) -> Any:
        from chunkstore import native

        return native.raw_spec()
