"""A tier pickles and copies as its settings: an empty tier of the same kind, never its chunks.

SB3's ``model.save()`` pickles ``replay_buffer_kwargs``; a buffer built on a tier instance
(``replay_buffer_kwargs={"tier": HybridTier(...)}``) must survive that, and ``Algo.load``
builds its new, empty buffer on the unpickled tier.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from chunkstore import DiskTier, HybridTier, MemoryTier
from chunkstore.tiers import DeviceTier

TIERS = {
    "memory-adaptive": lambda d: MemoryTier(),
    "memory": lambda d: MemoryTier(segment_bytes=1 << 16, max_bytes=1 << 22),
    "disk": lambda d: DiskTier(d, segment_bytes=1 << 15, max_bytes=1 << 22, max_mapped_bytes=1 << 20),
    "disk-keep": lambda d: DiskTier(d, segment_bytes=1 << 15, keep_files=True),
    "hybrid": lambda d: HybridTier(1 << 16, d, segment_bytes=1 << 14, max_mapped_bytes=1 << 20),
    "device-cpu": lambda d: DeviceTier("cpu", segment_bytes=1 << 16, max_bytes=1 << 22),
}


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
@pytest.mark.parametrize("kind", list(TIERS))
def test_a_tier_pickles_as_an_empty_tier_with_its_settings(kind, how, tmp_path):
    tier = TIERS[kind](tmp_path)
    refs = [tier.put(bytes([i]) * 5000) for i in range(40)]  # spills past the hybrid's RAM budget
    clone = {"pickle": lambda t: pickle.loads(pickle.dumps(t)), "deepcopy": copy.deepcopy,
             "copy": copy.copy}[how](tier)
    try:
        assert type(clone) is type(tier) and clone is not tier
        assert clone._settings() == tier._settings()
        for name in ("segment_bytes", "max_bytes", "adaptive", "ram_budget_bytes", "keep_files"):
            assert getattr(clone, name, None) == getattr(tier, name, None), name
        assert clone.nbytes == 0 and clone.nchunks == 0  # empty: the chunks stay with the original
        if hasattr(tier, "path"):  # its own private directory, in the same parent directory
            assert clone.path != tier.path and clone.path.parent == tier.path.parent
        ref = clone.put(b"new")
        assert bytes(clone.get(ref)) == b"new"
        assert [bytes(tier.get(r)[:1]) for r in refs] == [bytes([i]) for i in range(40)]  # untouched
    finally:
        clone.close()
        tier.close()


@pytest.mark.parametrize("kind", ["disk", "hybrid"])
def test_a_tier_whose_directory_cannot_be_made_unpickles_to_a_runtime_error(kind, tmp_path):
    """SB3's Algo.load turns a RuntimeError into a warning (an OSError would stop the load)."""
    tier = TIERS[kind](tmp_path / "spill")
    blob = pickle.dumps(tier)
    tier.close()
    (tmp_path / "spill").rmdir()
    (tmp_path / "spill").write_text("a file where the directory was")
    with pytest.raises(RuntimeError, match=f"cannot rebuild a pickled {type(tier).__name__} here"):
        pickle.loads(blob)


class _PickledCudaTier:
    """Pickles as DeviceTier("cuda", ...) pickles on a CUDA machine."""

    def __reduce__(self):
        from chunkstore.tiers._base import rebuild_tier

        return rebuild_tier, (DeviceTier, ("cuda",), {"segment_bytes": 1 << 16, "max_bytes": None})


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the machine without CUDA")
def test_a_cuda_device_tier_unpickled_without_cuda_is_a_runtime_error():
    blob = pickle.dumps(_PickledCudaTier())
    with pytest.raises(RuntimeError, match=r"cannot rebuild a pickled DeviceTier here: .*CUDA is not available"):
        pickle.loads(blob)
