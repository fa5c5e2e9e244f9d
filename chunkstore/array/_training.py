"""Training a learning codec (``zstd3+dict``) on an array's own items.

A codec that learns from the data is trained once :data:`TRAIN_AFTER_BYTES` of
raw items are sealed; what was stored before is then re-encoded with the trained
codec. The dictionary is trained on the even stored chunks and kept only if it
beats the plain codec on the odd ones (held out): on some data (Breakout) a
dictionary costs more than it saves. Decoded content is unchanged, so caches
stay valid.

A trained codec decodes what its untrained form wrote (a zstd dictionary decoder
reads plain zstd frames), so the codec is switched first and the chunks are
re-pointed one by one after: an interrupt anywhere leaves every chunk readable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chunkstore.codecs import Codec, TrainableCodec
from chunkstore.tiers import ChunkRef

if TYPE_CHECKING:
    from chunkstore.array._fields import ArrayFields

__all__ = ["TRAIN_AFTER_BYTES", "TRAIN_MAX_ITEMS", "train", "wants_training"]

#: a codec that learns from the data is trained once this many raw bytes are sealed
TRAIN_AFTER_BYTES = 8 << 20
#: at most this many items are handed to the trainer
TRAIN_MAX_ITEMS = 4096


def wants_training(codec: Codec) -> bool:
    return isinstance(codec, TrainableCodec) and codec.wants_training


def train(arr: ArrayFields) -> None:
    """Train ``arr``'s codec on its stored chunks and re-encode them (the caller holds its lock)."""
    codec = arr.codec
    if not isinstance(codec, TrainableCodec):
        return
    table = arr._table
    stored = table.stored().tolist()
    blocks = {c: arr._decoded_copy(c) for c in stored}
    held_out = [c for c in stored if c % 2 == 1] or stored
    samples = [item for c in ([c for c in stored if c % 2 == 0] or stored) for item in blocks[c]]
    new = codec.trained(samples[:TRAIN_MAX_ITEMS]) if samples else codec
    if wants_training(new) or new == codec:
        return
    plain = codec.untrained_equivalent()
    with_dict = sum(len(new.encode(blocks[c])) for c in held_out)
    without = sum(len(plain.encode(blocks[c])) for c in held_out)
    if with_dict >= without:
        arr.codec = plain  # what the untrained codec wrote is plain zstd: nothing to re-encode
        return
    refs: list[ChunkRef] = []
    try:  # every chunk re-encoded before any is replaced: a failed put changes nothing
        for c in stored:
            refs.append(arr.tier.put(new.encode(blocks[c])))
    except BaseException:
        for ref in refs:
            arr.tier.release(ref)
        raise
    arr._max_len = max(arr._max_len, *(r.nbytes for r in refs))
    arr.codec = new  # it reads the old chunks too
    for c, ref in zip(stored, refs, strict=True):
        old = table.ref(c)
        table.store(c, ref)
        arr._cbytes_sealed += ref.nbytes - old.nbytes
        arr.tier.release(old)
