"""A replay buffer pickled as one moment of it, through its stores' and columns' state.

A pickled buffer loads into RAM: no tier (which may hold locks, open files or a lambda) goes into the
pickle, and a pickle made on a CUDA machine loads into host memory where CUDA is absent. Pickles of
every earlier release load (their stores' state, or 0.1.0's pickled store objects).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from chunkstore import LRUChunkCache
from chunkstore.validate import is_int
from sb3_integration.buffers.columns import SMALL_ARRAYS, Columns
from sb3_integration.engine.frames import FrameStore
from sb3_integration.engine.packing import pack_array, unpack_array
from sb3_integration.engine.raw import COMPRESSED, RAW, RawStore

__all__ = ["PickledBuffer"]

#: attributes set by sb3-extra-buffers' arguments that 0.1.0 pickles of n-step and HER buffers lack
_LEGACY_DEFAULTS = {"normalize_images": False, "output_dtype": None}


class PickledBuffer:
    """``__getstate__`` / ``__setstate__`` of the replay buffers (mixed in; see the module docstring)."""

    _lock: Any
    _columns: Any
    _stores: dict[Any, Any]
    _cache_bytes: int
    store_options: Any
    buffer_device: Any
    _plan: Any
    _memo: dict[Any, Any]
    _owned: dict[Any, Any]

    _quiesce: Callable[[], None]  # PrefetchFront's
    _make_views: Callable[[], None]  # the buffer's

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:  # the writer is held out while the moment is captured
            self._quiesce()
            state = self.__dict__.copy()
            for name in ("observations", "next_observations", "_plan", "_memo", "_owned", "_lock", "_add_signature",
                         "_prefetcher", "_batch_thread"):
                state.pop(name, None)
            # a pickled buffer loads into RAM: no tier, which may hold locks, open files or a
            # lambda, goes into the pickle
            state["store_options"] = self.store_options.replace(tier=None)
            state["_stores"] = {key: fs.__getstate__() for key, fs in self._stores.items()}
            if self._columns is not None:
                state["_columns"] = self._columns.__getstate__()
                for name in SMALL_ARRAYS:
                    state.pop(name, None)  # views: rebuilt from the columns
            else:
                for name in SMALL_ARRAYS:
                    state[name] = pack_array(state[name])
            for name, value in state.items():  # a subclass's arrays (HER's episode bookkeeping)
                if isinstance(value, np.ndarray):
                    state[name] = value.copy()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, default in _LEGACY_DEFAULTS.items():  # pickles of 0.1.0's internal classes lack them
            state.setdefault(name, default)
        _check_position(state)
        stores = state["_stores"]
        for key, saved in list(stores.items()):
            if isinstance(saved, dict):  # 0.1.0 pickled FrameStore objects, later ones their state
                kind = RawStore if saved.get("storage") == RAW else FrameStore
                stores[key] = kind.__new__(kind)
                stores[key].__setstate__(saved)
        columns = state.get("_columns")
        if isinstance(columns, dict):
            state["_columns"] = Columns.__new__(Columns)
            state["_columns"].__setstate__(columns)
        elif columns is None:
            for name in SMALL_ARRAYS:
                state[name] = unpack_array(state[name])
        state.setdefault("_storage", {k: RAW if isinstance(fs, RawStore) else COMPRESSED for k, fs in stores.items()})
        state.setdefault("_undecided", False)
        self.__dict__.update(state)
        self._lock = threading.RLock()
        if self._columns is not None:
            for name, view in self._columns.views().items():
                setattr(self, name, view)
        cache = LRUChunkCache(self._cache_bytes, name="replay") if self._cache_bytes else 0
        for store in self._stores.values():
            store.share_cache(cache)
        # where the frames are now (a pickle from a CUDA machine loads into host memory without CUDA)
        self.buffer_device = next((fs.device for fs in self._stores.values() if fs.device is not None), None)
        self.store_options = self.store_options.replace(device=self.buffer_device)
        self._plan, self._memo, self._owned = None, {}, {}
        self._make_views()

def _check_position(state: dict[str, Any]) -> None:
    """A pickled buffer's ``pos`` and ``full`` in range (ValueError), before anything is rebuilt."""
    size, pos, full = state.get("buffer_size"), state.get("pos"), state.get("full")
    if not is_int(size, minimum=1):
        raise ValueError(f"this pickled buffer is damaged: buffer_size is {size!r}")
    if not is_int(pos, minimum=0, maximum=size - 1):
        raise ValueError(f"this pickled buffer is damaged: pos is {pos!r}, outside 0..{size - 1}")
    if not isinstance(full, (bool, np.bool_)):
        raise ValueError(f"this pickled buffer is damaged: full is {full!r}, not True or False")
