"""Every tier runs the contract shipped in :mod:`chunkstore.testing.tiers`, plus its own behaviour.

The contract (zarr's ``StoreTests`` pattern) is one subclass per tier here, FileTier
included; the Hypothesis machine drives each tier beside a plain dict. Disk and
hybrid tests check RSS, files and spills.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import numpy as np
import psutil
import pytest
import torch

from chunkstore.errors import CorruptChunkError, TierFullError, UnknownRefError
from chunkstore.hdf5.filetier import FileChunk, FileTier, MappedFile
from chunkstore.testing.tiers import SEG, SegmentedTierTests, TierTests, tier_machine
from chunkstore.tiers import DeviceTier, DiskTier, HybridTier, MemoryTier

MiB = 1 << 20


def _memory(directory, **kw):
    return MemoryTier(**kw)


def _disk(directory, **kw):
    return DiskTier(directory, max_mapped_bytes=kw.pop("max_mapped_bytes", 256 << 10), **kw)


def _device_cpu(directory, **kw):
    return DeviceTier("cpu", **kw)


def _device_cuda(directory, **kw):
    return DeviceTier("cuda", **kw)


def _hybrid(directory, **kw):
    seg = kw.get("segment_bytes", SEG)
    return HybridTier(2 * seg, directory, max_mapped_bytes=256 << 10, **kw)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

FACTORIES = {
    "memory": _memory,
    "disk": _disk,
    "device-cpu": _device_cpu,
    "hybrid": _hybrid,
}
LIMITED = ["memory", "disk", "device-cpu"]  # tiers with max_bytes


def _bytes(rng: np.random.Generator, n: int) -> bytes:
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _file(directory, **kw):
    """A FileTier of a (here empty) saved file: new chunks go to its writable MemoryTier."""
    path = os.path.join(directory, "empty.bin")
    with open(path, "wb"):
        pass
    return FileTier(MappedFile(path), writable=MemoryTier(**kw), own_writable=True)


class TestMemoryTierContract(SegmentedTierTests):
    factory = staticmethod(_memory)


class TestDiskTierContract(SegmentedTierTests):
    factory = staticmethod(_disk)


class TestDeviceCpuTierContract(SegmentedTierTests):
    factory = staticmethod(_device_cpu)


class TestHybridTierContract(SegmentedTierTests):
    factory = staticmethod(_hybrid)


class TestFileTierContract(TierTests):
    factory = staticmethod(_file)


@needs_cuda
class TestDeviceCudaTierContract(SegmentedTierTests):
    factory = staticmethod(_device_cuda)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.mark.parametrize("name", LIMITED)
class TestMaxBytes:
    def test_full_raises_then_recovers(self, name, tmp_path):
        tier = FACTORIES[name](tmp_path, segment_bytes=SEG, max_bytes=2 * SEG)
        with tier:
            refs = [tier.put(b"x" * (SEG // 2)) for _ in range(4)]
            with pytest.raises(TierFullError, match="max_bytes"):
                tier.put(b"y" * (SEG // 2))
            with pytest.raises(MemoryError):  # also a MemoryError
                tier.put(b"y")
            assert tier.nbytes <= 2 * SEG
            for ref in refs[:2]:
                tier.release(ref)
            assert bytes(tier.get(tier.put(b"z" * 100))) == b"z" * 100

    def test_chunk_larger_than_limit(self, name, tmp_path):
        with FACTORIES[name](tmp_path, segment_bytes=SEG, max_bytes=2 * SEG) as tier:
            with pytest.raises(TierFullError):
                tier.put(bytes(2 * SEG + 1))
            assert tier.used_nbytes == 0

    def test_free_segments_make_room(self, name, tmp_path):
        with FACTORIES[name](tmp_path, segment_bytes=SEG, max_bytes=3 * SEG) as tier:
            small = [tier.put(bytes(SEG)) for _ in range(3)]
            for ref in small:
                tier.release(ref)
            big = tier.put(bytes(3 * SEG))  # needs the free small segments dropped
            assert tier.get(big).nbytes == 3 * SEG


# -- Hypothesis: each tier beside a dict ------------------------------------------------


def _tiny_hybrid(directory, **kw):
    return HybridTier(kw["segment_bytes"], directory, max_mapped_bytes=0, **kw)


def _tiny_disk(directory, **kw):
    return DiskTier(directory, max_mapped_bytes=0, **kw)  # drop mapped pages on every get


TestMemoryMachine = tier_machine(_memory)
TestDiskMachine = tier_machine(_tiny_disk)
TestDeviceCpuMachine = tier_machine(_device_cpu)
TestHybridMachine = tier_machine(_tiny_hybrid)
TestFileMachine = tier_machine(_file)


# -- DiskTier ---------------------------------------------------------------------------


class TestDiskTier:
    def test_files_live_in_a_private_subdirectory(self, tmp_path):
        a = DiskTier(tmp_path / "new", segment_bytes=SEG)
        b = DiskTier(tmp_path / "new", segment_bytes=SEG)
        assert a.path != b.path and a.path.parent == b.path.parent == tmp_path / "new"
        for _ in range(3):
            a.put(bytes(SEG))
        assert len(os.listdir(a.path)) == 3
        assert a.supports_persistence
        a.close()
        assert not a.path.exists()
        assert b.path.exists()
        b.close()
        assert os.listdir(tmp_path / "new") == []

    def test_keep_files(self, tmp_path):
        tier = DiskTier(tmp_path, segment_bytes=SEG, keep_files=True)
        ref = tier.put(b"persist me")
        tier.flush()
        tier.close()
        path = tier.path / f"seg-{ref.segment:06d}.bin"
        with open(path, "rb") as f:
            f.seek(ref.offset)
            assert f.read(ref.nbytes) == b"persist me"

    def test_writes_after_mapping_are_visible(self, tmp_path):
        with DiskTier(tmp_path, segment_bytes=SEG) as tier:
            first = tier.put(b"a" * 100)
            view = tier.get(first)  # maps the segment
            second = tier.put(b"b" * 100)  # pwrite into the mapped file
            assert second.segment == first.segment
            assert bytes(tier.get(second)) == b"b" * 100
            assert bytes(view) == b"a" * 100

    def test_views_stay_valid_after_dropping_pages(self, tmp_path, rng):
        data = _bytes(rng, 32 * MiB)
        with DiskTier(tmp_path, segment_bytes=8 * MiB) as tier:
            ref = tier.put(data)
            view = tier.get(ref)
            checksum = int(np.frombuffer(data, np.uint8).sum(dtype=np.uint64))
            before = _rss()
            assert int(view.sum(dtype=np.uint64)) == checksum  # touches all 32 MiB
            touched = _rss()
            assert touched - before > 16 * MiB
            assert tier.drop_mapped_pages() >= 32 * MiB
            dropped = _rss()
            assert touched - dropped > 16 * MiB  # madvise(DONTNEED) made them non-resident
            assert view.tobytes() == data  # ... and the view refaults the right bytes

    def test_mapped_budget_triggers_drops(self, tmp_path, rng):
        with DiskTier(tmp_path, segment_bytes=SEG, max_mapped_bytes=4 * SEG) as tier:
            refs = [tier.put(_bytes(rng, SEG // 2)) for _ in range(40)]
            for ref in refs:
                tier.get(ref)
            info = tier.info()
            assert info["page_drops"] >= 3
            assert info["mapped_nbytes"] <= 4 * SEG + SEG

    def test_view_outlives_close(self, tmp_path):
        tier = DiskTier(tmp_path, segment_bytes=SEG)
        view = tier.get(tier.put(b"still here"))
        tier.close()
        assert bytes(view) == b"still here"

    def test_rss_stays_low_with_512mb_on_disk(self, tmp_path):
        chunk_bytes, n = 128 << 10, 4096
        pool = np.random.default_rng(0).integers(0, 256, MiB + chunk_bytes, dtype=np.uint8)

        def chunk(i):
            start = i * 7919 % MiB
            out = pool[start:start + chunk_bytes].copy()
            out[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)
            return out

        before = _rss()
        with DiskTier(tmp_path) as tier:
            refs = [tier.put(chunk(i)) for i in range(n)]
            assert tier.used_nbytes == n * chunk_bytes
            after_put = _rss()
            for i, ref in enumerate(refs):
                assert np.array_equal(tier.get(ref), chunk(i))
            after_get = _rss()
        assert after_put - before < 50 * MiB
        assert after_get - before < 150 * MiB


# -- HybridTier -------------------------------------------------------------------------


class TestHybridTier:
    def test_spills_keep_refs_valid(self, tmp_path, rng):
        with HybridTier(4 * SEG, tmp_path, segment_bytes=SEG) as tier:
            expected = {}
            for _ in range(200):
                data = _bytes(rng, int(rng.integers(1, SEG // 3)))
                expected[tier.put(data)] = data
                assert tier.ram_nbytes <= 4 * SEG + SEG
            info = tier.info()
            assert info["spills"] > 0 and info["disk_nbytes"] > 0
            assert len(os.listdir(tier.path)) > 0
            for ref, data in expected.items():
                assert bytes(tier.get(ref)) == data
            path = tier.path
        assert not path.exists()

    def test_budget_smaller_than_a_segment(self, tmp_path, rng):
        with HybridTier(0, tmp_path, segment_bytes=SEG) as tier:
            refs = {tier.put(d): d for d in (_bytes(rng, 5000) for _ in range(60))}
            assert tier.ram_nbytes <= SEG
            assert all(bytes(tier.get(r)) == d for r, d in refs.items())

    def test_spilled_arrays_are_reused(self, tmp_path, rng):
        with HybridTier(4 * SEG, tmp_path, segment_bytes=SEG) as tier:
            live = collections.deque()
            for _ in range(500):
                live.append(tier.put(_bytes(rng, 4000)))
                if len(live) > 100:
                    tier.release(live.popleft())
            info = tier.info()
            assert info["spills"] > 10
            assert info["ram_allocations"] <= 4 + 1  # arrays recycled, not reallocated

    def test_view_held_across_a_spill_stays_valid(self, tmp_path, rng):
        with HybridTier(SEG, tmp_path, segment_bytes=SEG) as tier:
            data = _bytes(rng, 1000)
            ref = tier.put(data)
            view = tier.get(ref)  # a RAM view
            allocations = tier.ram_allocations
            for _ in range(10):  # spill ref's segment and overwrite RAM many times
                tier.put(_bytes(rng, SEG - 10))
            assert tier.info()["spills"] >= 1
            assert bytes(view) == data  # the array was not reused under the view
            assert tier.ram_allocations == allocations + 1
            assert bytes(tier.get(ref)) == data  # now read from disk

    def test_ring_stays_within_budget(self, tmp_path, rng):
        budget = 8 * SEG
        with HybridTier(budget, tmp_path, segment_bytes=SEG) as tier:
            live = collections.deque()
            block = _bytes(rng, 3000)
            peak_disk = 0
            for lap in range(10):
                for _ in range(200):
                    live.append(tier.put(block))
                    if len(live) > 300:
                        tier.release(live.popleft())
                    assert tier.ram_nbytes <= budget + SEG
                peak_disk = max(peak_disk, tier.disk_nbytes)
                if lap == 2:
                    disk_after_warmup = tier.disk_nbytes
            assert peak_disk <= disk_after_warmup + 2 * SEG  # disk files are recycled too

    @pytest.mark.slow
    def test_rss_near_budget_for_gigabytes_in_ring_order(self, tmp_path):
        budget, chunk_bytes, window = 256 * MiB, 200 << 10, 5000  # ~1 GB live
        total = 10 * 1000 * MiB // chunk_bytes  # ~10 GB through the tier
        pool = np.random.default_rng(0).integers(0, 256, MiB + chunk_bytes, dtype=np.uint8)
        before = _rss()
        peak = 0
        with HybridTier(budget, tmp_path) as tier:
            live = collections.deque()
            for i in range(total):
                start = i * 7919 % MiB
                live.append((start, tier.put(pool[start:start + chunk_bytes])))
                if len(live) > window:
                    start, ref = live.popleft()
                    assert np.array_equal(tier.get(ref), pool[start:start + chunk_bytes])
                    tier.release(ref)
                if i % 500 == 0:
                    peak = max(peak, _rss() - before)
            info = tier.info()
        assert info["spills"] > 1000
        assert info["ram_nbytes"] <= budget + tier.segment_bytes
        assert peak < budget + 100 * MiB, (peak, info)


# -- DeviceTier -------------------------------------------------------------------------


class TestDeviceTier:
    def test_get_tensor(self, rng):
        data = _bytes(rng, 5000)
        with DeviceTier("cpu", segment_bytes=SEG) as tier:
            ref = tier.put(data)
            tensor = tier.get_tensor(ref)
            assert tensor.dtype == torch.uint8 and tensor.device.type == "cpu"
            assert tensor.numpy().tobytes() == data
            assert tier.info()["device"] == "cpu"
            tier.release(ref)
            with pytest.raises(UnknownRefError):
                tier.get_tensor(ref)

    def test_torch_is_imported_lazily(self):
        code = "import sys, chunkstore.tiers; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == "False"

    @needs_cuda
    def test_cuda_round_trip(self, rng):
        data = _bytes(rng, 3 * SEG)
        with DeviceTier("cuda", segment_bytes=SEG) as tier:
            ref = tier.put(data)
            assert tier.get_tensor(ref).device.type == "cuda"
            assert bytes(tier.get(ref)) == data

    def test_cuda_unavailable_is_a_clear_error(self):
        if torch.cuda.is_available():
            pytest.skip("CUDA is available")
        with pytest.raises(ValueError, match="CUDA is not available"):
            DeviceTier("cuda")


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [2, 0, 3, 1]])
def test_file_tier_reads_its_chunks_in_any_listed_order_and_counts_every_table(tmp_path, order):
    """Chunks listed in offset order (as saves write them) skip the sort; any other order is sorted."""
    import zlib

    blobs = [bytes([65 + i]) * (10 + i) for i in range(4)]
    offsets = np.cumsum([0] + [len(b) for b in blobs[:-1]])
    path = tmp_path / "f.bin"
    path.write_bytes(b"".join(blobs))
    o = np.array(order)
    tier = FileTier(MappedFile(path), o + 100, offsets[o], [len(blobs[i]) for i in o],
                    [zlib.crc32(blobs[i]) for i in o])
    refs = [tier.put(FileChunk(int(offsets[i]), len(blobs[i]))) for i in range(4)]
    assert [bytes(tier.get(r)) for r in refs] == blobs
    tier.release(refs[1])
    assert sorted(tier.live_refs()[1].tolist()) == sorted(int(offsets[i]) for i in (0, 2, 3))
    # what the tier holds: every per-chunk table (offsets, ids, sizes, CRCs, checked and live flags)
    assert tier.held_nbytes >= 4 * (8 + 4 + 4 + 4 + 1 + 1)
    st = path.stat()
    with open(path, "r+b") as f:  # one chunk rewritten in place, size and mtime put back
        f.seek(int(offsets[2]))
        f.write(b"Z")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(CorruptChunkError, match="chunk 102 "):  # named by its index, whatever the order
        tier.get(refs[2])
