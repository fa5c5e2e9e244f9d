"""The tier contract, run against every tier, plus tier-specific behaviour.

``TestTierContract`` is the contract every tier must keep (zarr's StoreTests
style); ``TierMachine`` drives each tier and a plain dict side by side with
Hypothesis. Disk and hybrid tests check RSS, files and spills.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np
import psutil
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from chunkstore.errors import TierFullError, UnknownRefError
from chunkstore.tiers import ChunkRef, DeviceTier, DiskTier, HybridTier, MemoryTier, Tier

SEG = 64 << 10  # small segments: many segments, fast tests
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


@pytest.fixture(params=[*FACTORIES, *(["device-cuda"] if torch.cuda.is_available() else [])])
def make_tier(request, tmp_path):
    factory = _device_cuda if request.param == "device-cuda" else FACTORIES[request.param]
    tiers = []

    def make(**kw):
        kw.setdefault("segment_bytes", SEG)
        tiers.append(factory(tmp_path, **kw))
        return tiers[-1]

    yield make
    for tier in tiers:
        tier.close()


@pytest.fixture
def tier(make_tier):
    return make_tier()


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


class TestTierContract:
    """What every tier promises."""

    def test_is_a_tier(self, tier):
        assert isinstance(tier, Tier)
        assert tier.nbytes == tier.used_nbytes == 0
        assert tier.info()["kind"] == tier.kind

    @pytest.mark.parametrize("n", [0, 1, 1000, SEG - 1, SEG, SEG + 1, 3 * SEG + 5])
    def test_round_trip_sizes(self, tier, rng, n):
        data = _bytes(rng, n)
        ref = tier.put(data)
        assert isinstance(ref, ChunkRef)
        assert ref.nbytes == n
        view = np.asarray(tier.get(ref))
        assert view.dtype == np.uint8 and view.ndim == 1
        assert view.tobytes() == data
        assert tier.used_nbytes == n
        tier.release(ref)
        assert tier.used_nbytes == 0

    def test_zero_byte_chunks_are_distinct(self, tier):
        refs = [tier.put(b""), tier.put(b""), tier.put(b"x"), tier.put(b"")]
        assert len(set(refs)) == 4
        assert [bytes(tier.get(r)) for r in refs] == [b"", b"", b"x", b""]
        for ref in refs:
            tier.release(ref)
        assert tier.used_nbytes == 0

    def test_accepts_any_contiguous_bytes_like(self, tier, rng):
        arr = rng.standard_normal((7, 5)).astype(np.float32)
        raw = _bytes(rng, 300)
        for data, want in [(raw, raw), (bytearray(raw), raw), (memoryview(raw), raw),
                           (np.frombuffer(raw, np.uint8), raw), (arr, arr.tobytes())]:
            assert bytes(tier.get(tier.put(data))) == want
        with pytest.raises(ValueError):
            tier.put(arr[:, ::2])
        with pytest.raises(ValueError):
            tier.put(np.frombuffer(raw, np.uint8)[::2])

    def test_put_copies(self, tier):
        src = bytearray(b"abcdef")
        ref = tier.put(src)
        src[:] = b"zzzzzz"
        assert bytes(tier.get(ref)) == b"abcdef"

    def test_views_are_read_only(self, tier):
        if getattr(tier, "device", None) is not None and tier.device.type == "cuda":
            pytest.skip("cuda get returns a private host copy")
        view = tier.get(tier.put(b"abc"))
        with pytest.raises((ValueError, TypeError)):
            view[0] = 1

    def test_many_puts_span_segments(self, tier, rng):
        expected = {}
        for _ in range(300):
            data = _bytes(rng, int(rng.integers(1, SEG // 4)))
            expected[tier.put(data)] = data
        assert len({ref.segment for ref in expected}) > 10
        assert tier.info()["nsegments"] > 10
        for ref, data in expected.items():
            assert bytes(tier.get(ref)) == data
        assert tier.used_nbytes == sum(map(len, expected.values()))

    def test_first_chunk_survives_many_later_puts(self, tier, rng):
        first = _bytes(rng, 5000)
        ref = tier.put(first)
        block = _bytes(rng, 20_000)
        for i in range(250):  # ~5 MB of other chunks, released as we go
            other = tier.put(block)
            if i % 2:
                tier.release(other)
        assert bytes(tier.get(ref)) == first

    def test_ring_recycles_segments(self, tier, rng):
        window, max_chunk = 40, SEG // 16
        live = collections.deque()
        peak_live = peak_nbytes = 0
        segments_seen = set()
        for _ in range(20):  # laps
            for _ in range(window):
                ref = tier.put(_bytes(rng, int(rng.integers(1, max_chunk))))
                live.append(ref)
                segments_seen.add(ref.segment)
                if len(live) > window:
                    tier.release(live.popleft())
                peak_live = max(peak_live, tier.used_nbytes)
                peak_nbytes = max(peak_nbytes, tier.nbytes)
        # live bytes, one partly released segment at the tail, one being filled
        bound = peak_live * SEG / (SEG - max_chunk) + 2 * SEG
        assert peak_nbytes <= bound, tier.info()
        # recycled segments keep their ids: far fewer ids than segments' worth of data
        assert len(segments_seen) <= bound / SEG
        while live:
            tier.release(live.popleft())
        assert tier.used_nbytes == 0

    def test_used_nbytes_is_exact(self, tier, rng):
        live = {}
        for i in range(200):
            data = _bytes(rng, int(rng.integers(0, 3000)))
            live[tier.put(data)] = len(data)
            if i % 3 == 0:
                ref = list(live)[int(rng.integers(len(live)))]
                tier.release(ref)
                del live[ref]
            assert tier.used_nbytes == sum(live.values())
        info = tier.info()
        assert info["used_nbytes"] == sum(live.values())
        assert info["nchunks"] == len(live)
        assert tier.used_nbytes <= tier.nbytes

    def test_double_release_raises(self, tier):
        ref = tier.put(b"hello")
        tier.release(ref)
        with pytest.raises(UnknownRefError):
            tier.release(ref)
        with pytest.raises(KeyError):  # also a KeyError
            tier.get(ref)

    @pytest.mark.parametrize("bad", [ChunkRef(99, 0, 5), ChunkRef(0, 1, 4), ChunkRef(0, 0, 4)])
    def test_unknown_refs_raise(self, tier, bad):
        tier.put(b"hello")
        with pytest.raises(UnknownRefError):
            tier.get(bad)
        with pytest.raises(UnknownRefError):
            tier.release(bad)
        assert tier.used_nbytes == 5

    def test_large_chunk_segments_are_recycled(self, tier, rng):
        big = _bytes(rng, 2 * SEG + 100)
        ref = tier.put(big)
        nbytes = tier.nbytes
        for _ in range(5):
            tier.release(ref)
            ref = tier.put(big)
            assert bytes(tier.get(ref)) == big
        assert tier.nbytes == nbytes

    def test_trim_gives_back_free_segments(self, tier, rng):
        refs = [tier.put(_bytes(rng, SEG // 2)) for _ in range(20)]
        keep = refs.pop()
        for ref in refs:
            tier.release(ref)
        assert tier.trim() > 0
        assert tier.nbytes <= 3 * SEG
        assert tier.info()["nfree_segments"] == 0
        assert tier.get(keep).nbytes == SEG // 2
        assert tier.put(b"more") is not None

    def test_close(self, make_tier):
        tier = make_tier()
        ref = tier.put(b"abc")
        tier.close()
        tier.close()  # idempotent
        assert tier.nbytes == 0
        with pytest.raises(ValueError):
            tier.put(b"x")
        with pytest.raises(UnknownRefError):
            tier.get(ref)

    def test_context_manager(self, make_tier):
        with make_tier() as tier:
            tier.put(b"abc")
        assert tier.closed

    def test_concurrent_gets_while_writing(self, tier, rng):
        pinned = {tier.put(data): data for data in (_bytes(rng, 3000) for _ in range(50))}
        stop = threading.Event()
        errors = []

        def reader(seed):
            local = np.random.default_rng(seed)
            refs = list(pinned)
            while not stop.is_set():
                ref = refs[int(local.integers(len(refs)))]
                try:
                    if bytes(tier.get(ref)) != pinned[ref]:
                        errors.append(f"wrong bytes for {ref}")
                except Exception as exc:  # pragma: no cover - reported below
                    errors.append(repr(exc))

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        try:
            live = collections.deque()
            for _ in range(600):  # churn: segments fill, empty, recycle, spill
                live.append(tier.put(_bytes(rng, 2000)))
                if len(live) > 60:
                    tier.release(live.popleft())
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[:5]


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


class TierMachine(RuleBasedStateMachine):
    factory = staticmethod(_memory)
    segment_bytes = 4096

    def __init__(self):
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="tier-machine-")
        self.tier = self.factory(self.directory, segment_bytes=self.segment_bytes)
        self.model: dict[ChunkRef, bytes] = {}
        self.order: list[ChunkRef] = []

    @rule(size=st.one_of(st.integers(0, 600), st.integers(0, 3 * 4096)), seed=st.integers(0, 255))
    def put(self, size, seed):
        data = (bytes(range(seed, 256)) + bytes(range(seed))) * (size // 256 + 1)
        data = data[:size]
        ref = self.tier.put(data)
        assert ref not in self.model
        self.model[ref] = data
        self.order.append(ref)

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 10**6))
    def release_random(self, pick):
        ref = self.order.pop(pick % len(self.order))
        del self.model[ref]
        self.tier.release(ref)

    @precondition(lambda self: self.model)
    @rule(n=st.integers(1, 5))
    def release_oldest(self, n):  # the ring-buffer pattern
        for ref in self.order[:n]:
            del self.model[ref]
            self.tier.release(ref)
        del self.order[:n]

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 10**6))
    def get(self, pick):
        ref = self.order[pick % len(self.order)]
        assert bytes(self.tier.get(ref)) == self.model[ref]

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 10**6))
    def double_release_raises(self, pick):
        ref = self.order.pop(pick % len(self.order))
        del self.model[ref]
        self.tier.release(ref)
        try:
            self.tier.release(ref)
        except UnknownRefError:
            pass
        else:
            raise AssertionError("double release did not raise")

    @rule()
    def trim(self):
        self.tier.trim()

    @invariant()
    def accounting(self):
        assert self.tier.used_nbytes == sum(map(len, self.model.values()))
        assert self.tier.info()["nchunks"] == len(self.model)
        assert self.tier.used_nbytes <= self.tier.nbytes

    def teardown(self):
        for ref, data in self.model.items():
            assert bytes(self.tier.get(ref)) == data
        self.tier.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _machine(factory):
    machine = type(f"TierMachine_{factory.__name__}", (TierMachine,),
                   {"factory": staticmethod(factory)})
    machine.TestCase.settings = settings(
        max_examples=25, stateful_step_count=60, deadline=None,
        suppress_health_check=[HealthCheck.too_slow])
    return machine.TestCase


def _tiny_hybrid(directory, **kw):
    return HybridTier(kw["segment_bytes"], directory, max_mapped_bytes=0, **kw)


def _tiny_disk(directory, **kw):
    return DiskTier(directory, max_mapped_bytes=0, **kw)  # drop mapped pages on every get


TestMemoryMachine = _machine(_memory)
TestDiskMachine = _machine(_tiny_disk)
TestDeviceCpuMachine = _machine(_device_cpu)
TestHybridMachine = _machine(_tiny_hybrid)


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
