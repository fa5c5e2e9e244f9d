"""ChunkedArray: a fixed-capacity array stored as compressed chunks (see :mod:`._core`).

One role per module: :mod:`._table` (where each chunk is), :mod:`._write` (open
chunks, sealing, renumbering), :mod:`._read` (batched reads, native and Python),
:mod:`._training` (codecs that learn from the data: the one rule, :func:`should_train` and
:func:`trained_codec`, which the Ray service's writers use too; :func:`settle_loaded`, a load's),
:mod:`.protocol` (:class:`ItemArray`, the interface ChunkedArray and DeviceArray share),
:mod:`.frontend` (their one write front-end), :mod:`._snapshot` (one moment of an array, for saves
that do not stop the writer), :mod:`._core` (the class, sizes, repair after interrupts, ownership, state).
"""

from chunkstore.array._core import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CHUNK_LEN,
    DEFAULT_CODEC,
    DEFAULT_THREADS,
    MAX_OPEN_CHUNKS,
    ChunkedArray,
)
from chunkstore.array._snapshot import ArraySnapshot
from chunkstore.array._table import ChunkTable
from chunkstore.array._training import (
    TRAIN_AFTER_BYTES,
    TRAIN_MAX_ITEMS,
    settle_loaded,
    should_train,
    trained_codec,
    wants_training,
)
from chunkstore.array.frontend import WriteFrontEnd
from chunkstore.array.protocol import ItemArray
from chunkstore.casting import lossless_cast

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_CODEC",
    "DEFAULT_THREADS",
    "MAX_OPEN_CHUNKS",
    "TRAIN_AFTER_BYTES",
    "TRAIN_MAX_ITEMS",
    "ArraySnapshot",
    "ChunkTable",
    "ChunkedArray",
    "ItemArray",
    "WriteFrontEnd",
    "lossless_cast",
    "settle_loaded",
    "should_train",
    "trained_codec",
    "wants_training",
]
