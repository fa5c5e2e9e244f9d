"""``peek`` takes only a ref of one of the tier's chunks, as ``get`` does.

Before, a segmented tier's ``peek`` checked the ref's offset but not its length: ``ChunkRef(seg, 0, -1)``
returned the whole segment but its last byte (the neighbouring chunks and the segment's unused
bytes), and a length longer or shorter than the chunk returned a neighbour's bytes or a cut
chunk. Released chunks a pin holds stay readable with their own ref.
"""

from __future__ import annotations

import pytest

from chunkstore import DiskTier, HybridTier, MemoryTier
from chunkstore.errors import UnknownRefError
from chunkstore.tiers import ChunkRef

TIERS = {"memory": lambda tmp: MemoryTier(), "disk": lambda tmp: DiskTier(tmp / "d"),
         "hybrid": lambda tmp: HybridTier(1 << 20, tmp / "h")}


@pytest.mark.parametrize("kind", TIERS)
@pytest.mark.parametrize("delta", [-7, -1, +1, +4, +10**9])
def test_a_ref_of_another_length_is_refused_by_peek_as_by_get(kind, delta, tmp_path):
    tier = TIERS[kind](tmp_path)
    ref = tier.put(b"abcdef")
    tier.put(b"ghij")
    bad = ChunkRef(ref.segment, ref.offset, ref.nbytes + delta if delta != -7 else -1)
    for op in (tier.get, tier.peek):
        with pytest.raises(UnknownRefError):
            op(bad)
    assert bytes(tier.peek(ref)) == bytes(tier.get(ref)) == b"abcdef"
    tier.close()


@pytest.mark.parametrize("kind", TIERS)
def test_a_pinned_released_chunk_is_peeked_by_its_own_ref_only(kind, tmp_path):
    tier = TIERS[kind](tmp_path)
    ref = tier.put(b"abcdef")
    keep = tier.put(b"ghij")
    unpin = tier.pin()
    assert unpin is not None
    tier.release(ref)
    assert bytes(tier.peek(ref)) == b"abcdef"  # released, held by the pin
    with pytest.raises(UnknownRefError):
        tier.peek(ChunkRef(ref.segment, ref.offset, -1))
    with pytest.raises(UnknownRefError):
        tier.get(ref)
    unpin()
    assert bytes(tier.get(keep)) == b"ghij"
    tier.close()


@pytest.mark.parametrize("kind", TIERS)
@pytest.mark.parametrize("bad", [5, None, "0:0:6", (0, 0), (0.0, 0, 6), [0, 0, 6]])
def test_what_is_not_a_chunk_reference_is_a_typeerror_naming_it(kind, bad, tmp_path):
    """``tier.get(5)`` said "cannot unpack non-iterable int object"; get, peek and release now name
    what they got. A plain tuple of three ints is a reference, as a ChunkRef is."""
    tier = TIERS[kind](tmp_path)
    ref = tier.put(b"abcdef")
    for op in (tier.get, tier.peek, tier.release):
        with pytest.raises(TypeError, match="a chunk reference is a ChunkRef"):
            op(bad)
    assert bytes(tier.get(tuple(ref))) == bytes(tier.peek(tuple(ref))) == b"abcdef"
    tier.release(tuple(ref))
    with pytest.raises(UnknownRefError):
        tier.get(ref)
    tier.close()
