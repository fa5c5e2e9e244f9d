"""Training a learning codec (``zstd3+dict``) on the data: the one rule, for arrays and Ray writers.

When: :func:`should_train` -- once :data:`TRAIN_AFTER_BYTES` of raw items are sealed
(an array) or drained (a Ray writer's frames, :mod:`sb3_integration.distributed.writer`).
What: :func:`trained_codec` -- a dictionary trained on the even chunks (at most
:data:`TRAIN_MAX_ITEMS` items), kept only if it beats the plain codec on the odd ones
(held out); otherwise the plain codec: on some data (Breakout) a dictionary costs more
than it saves. The same chunks give the same codec (zstd's trainer is deterministic),
so a service's shared dictionary does not depend on timing, only on its first trainer's
frames.

An array then re-encodes what it stored with the trained codec (:func:`train`).
Decoded content is unchanged, so caches stay valid. A trained codec decodes what its
untrained form wrote (a zstd dictionary decoder reads plain zstd frames), so the codec
is switched first and the chunks are re-pointed one by one after: an interrupt
anywhere leaves every chunk readable. Changing the threshold changes only when a
dictionary is trained, never how a stored chunk decodes.

The threshold: ``tools/bench_dict_threshold.py`` (``results/bench_dict_threshold.json``)
trains on the first 1 to 16 MiB of real Atari frames and compresses the frames after
them; see the manual's Ray service page (docs/guide/ray.md) for the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from chunkstore.codecs import Codec, TrainableCodec
from chunkstore.tiers import ChunkRef

if TYPE_CHECKING:
    from chunkstore.array._fields import ArrayFields

__all__ = ["TRAIN_AFTER_BYTES", "TRAIN_LOADED_MAX_BYTES", "TRAIN_MAX_ITEMS", "settle_loaded", "should_train", "train",
           "trained_codec", "wants_training"]

#: a codec that learns from the data is trained once this many raw bytes are sealed
TRAIN_AFTER_BYTES = 8 << 20
#: at most this many items are handed to the trainer
TRAIN_MAX_ITEMS = 4096
#: a loaded array still due for training is trained only if it holds at most this many raw bytes
#: (training decodes every stored chunk); past it, it keeps the plain codec (:func:`settle_loaded`)
TRAIN_LOADED_MAX_BYTES = 4 * TRAIN_AFTER_BYTES


def wants_training(codec: Codec) -> bool:
    """Whether ``codec`` learns from the data and has not yet (an untrained ``zstd3+dict``)."""
    return isinstance(codec, TrainableCodec) and codec.wants_training


def should_train(codec: Codec, raw_bytes: int) -> bool:
    """Whether ``codec`` is trained now, ``raw_bytes`` of raw items having been stored (or sent)."""
    return raw_bytes >= TRAIN_AFTER_BYTES and wants_training(codec)


def trained_codec(codec: Codec, chunks: Mapping[int, np.ndarray]) -> Codec:
    """The codec to use from now on, trained on ``chunks`` (chunk number -> its raw items).

    A dictionary trained on the items of the even-numbered chunks (at most
    :data:`TRAIN_MAX_ITEMS`; all chunks when none is even), if it encodes the odd ones
    (all when none is odd) smaller than the plain codec does; else the plain codec
    (``codec.untrained_equivalent()``, which reads what ``codec`` wrote untrained).
    ``codec`` itself when it does not learn or ``chunks`` is empty.
    """
    if not isinstance(codec, TrainableCodec) or not chunks:
        return codec
    numbers = sorted(chunks)
    held_out = [c for c in numbers if c % 2 == 1] or numbers
    samples = [item for c in ([c for c in numbers if c % 2 == 0] or numbers) for item in chunks[c]]
    new = codec.trained(samples[:TRAIN_MAX_ITEMS])
    plain = codec.untrained_equivalent()
    if wants_training(new) or new == plain:
        return plain
    with_dict = sum(len(new.encode(chunks[c])) for c in held_out)
    without = sum(len(plain.encode(chunks[c])) for c in held_out)
    return new if with_dict < without else plain


def settle_loaded(arr: ArrayFields) -> None:
    """After a load installed every chunk of ``arr`` untrained (``train=False``): train now if due.

    A file saved before its dictionary was trained holds little (:data:`TRAIN_AFTER_BYTES` and
    the chunks open then), and is trained as the live array would have been. One that declares
    more, past :data:`TRAIN_LOADED_MAX_BYTES` (huge chunks, say), keeps the plain codec, which
    reads what it holds: training would decode and re-encode every chunk it holds, so a small
    file of very compressible chunks could ask for any amount of memory.
    """
    with arr._lock:
        if not should_train(arr.codec, arr._raw_sealed):
            return
        if arr._raw_sealed > TRAIN_LOADED_MAX_BYTES:
            arr.codec = arr.codec.untrained_equivalent()  # type: ignore[attr-defined]
        else:
            train(arr)


def train(arr: ArrayFields) -> None:
    """Train ``arr``'s codec on its stored chunks and re-encode them (the caller holds its lock)."""
    codec = arr.codec
    if not isinstance(codec, TrainableCodec):
        return
    stored = arr._table.stored().tolist()
    blocks = {c: arr._decoded_copy(c) for c in stored}
    new = trained_codec(codec, blocks)
    if new == codec:
        return
    if not isinstance(new, TrainableCodec):
        arr.codec = new  # the plain codec: what the untrained one wrote is plain zstd, nothing to re-encode
        return
    table = arr._table
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
