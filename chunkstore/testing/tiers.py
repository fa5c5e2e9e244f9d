"""Contract tests every tier runs (zarr's ``StoreTests`` pattern): subclass and supply ``factory``.

A new :class:`~chunkstore.tiers.Tier` proves itself by subclassing :class:`TierTests`
in a test module (and :class:`SegmentedTierTests` for tiers built on segments)::

    from chunkstore.testing.tiers import SegmentedTierTests

    class TestMyTier(SegmentedTierTests):
        def factory(self, directory, **kw):
            return MyTier(directory, **kw)

``factory(directory, **kw)`` gets a fresh temporary directory and ``segment_bytes``
(and sometimes other keyword arguments a segmented tier takes). :func:`tier_machine`
makes a Hypothesis state machine that drives a tier beside a plain dict.

Needs pytest and hypothesis (the ``dev`` extra).
"""

from __future__ import annotations

import collections
import shutil
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from chunkstore.errors import UnknownRefError
from chunkstore.tiers import ChunkRef, Tier

__all__ = ["SEG", "SegmentedTierTests", "TierMachine", "TierTests", "tier_machine"]

#: small segments: many segments, fast tests
SEG = 64 << 10


def _bytes(rng: np.random.Generator, n: int) -> bytes:
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


class TierTests:
    """What every tier promises. Subclasses define ``factory(directory, **kw) -> Tier``."""

    def factory(self, directory: Any, **kw: Any) -> Tier:
        raise NotImplementedError("a TierTests subclass supplies factory(directory, **kw)")

    @pytest.fixture
    def make_tier(self, tmp_path: Any) -> Any:
        tiers: list[Tier] = []

        def make(**kw: Any) -> Tier:
            kw.setdefault("segment_bytes", SEG)
            tiers.append(self.factory(tmp_path, **kw))
            return tiers[-1]

        yield make
        for tier in tiers:
            tier.close()

    @pytest.fixture
    def tier(self, make_tier: Any) -> Tier:
        return make_tier()

    @pytest.fixture
    def rng(self) -> np.random.Generator:
        return np.random.default_rng(12345)

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

    @pytest.mark.parametrize("zero", [False, True])
    def test_put_many_stores_each_chunk(self, tier, rng, zero):
        sizes = rng.integers(1, 3000, 40)
        sizes[[3, 20]] = 2 * SEG + 7  # larger than a segment
        if zero:
            sizes[[0, 11]] = 0
        data = np.frombuffer(_bytes(rng, int(sizes.sum())), np.uint8)
        keep = tier.put(b"before")
        refs = tier.put_many(data, sizes)
        assert refs.dtype == np.int64 and refs.shape == (3, len(sizes))
        assert len({tuple(r) for r in refs.T.tolist()}) == len(sizes)
        ends = np.cumsum(sizes)
        for r, s, e in zip(refs.T.tolist(), sizes.tolist(), ends.tolist(), strict=True):
            assert r[2] == s and bytes(tier.get(ChunkRef(*r))) == data[e - s:e].tobytes()
        assert tier.used_nbytes == 6 + int(sizes.sum())
        for r in refs.T.tolist():
            tier.release(ChunkRef(*r))
        assert tier.used_nbytes == 6 and bytes(tier.get(keep)) == b"before"
        assert tier.put_many(b"", np.zeros(0, np.int64)).shape == (3, 0)

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

    def test_first_chunk_survives_many_later_puts(self, tier, rng):
        first = _bytes(rng, 5000)
        ref = tier.put(first)
        block = _bytes(rng, 20_000)
        for i in range(250):  # ~5 MB of other chunks, released as we go
            other = tier.put(block)
            if i % 2:
                tier.release(other)
        assert bytes(tier.get(ref)) == first

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



    # -- snapshots: pinned chunks stay readable; bookkeeping can be recounted ---------------
    def test_pinned_chunks_stay_readable_after_release(self, tier, rng):
        refs = {tier.put(_bytes(rng, 3000)): None for _ in range(40)}
        want = {ref: bytes(tier.get(ref)) for ref in refs}
        unpin = tier.pin()
        if unpin is None:
            pytest.skip("this tier cannot pin (callers copy instead)")
        for ref in refs:
            tier.release(ref)
        for _ in range(200):  # later puts must not reuse the pinned bytes
            tier.put(_bytes(rng, 3000))
        assert all(bytes(tier.peek(ref)) == data for ref, data in want.items())
        unpin()
        unpin()  # idempotent

    def test_live_refs_are_the_live_chunks(self, tier, rng):
        live = {}
        for i in range(60):
            ref = tier.put(_bytes(rng, int(rng.integers(1, 2000))))
            live[ref] = True
            if i % 3 == 0:
                tier.release(ref)
                del live[ref]
        table = tier.live_refs()
        if table is None:
            pytest.skip("this tier does not track its chunks")
        got = {ChunkRef(int(s), int(o), int(n)) for s, o, n in table.T}
        assert got == set(live)
        assert tier.used_nbytes == sum(r.nbytes for r in live)

    def test_read_lock_gives_addresses_or_none(self, tier):
        ref = tier.put(b"hello")
        lock, segments = tier.read_lock()
        with lock:
            table = segments()
        assert table is None or (table.shape[0] == 2 and table.shape[1] > ref.segment)
        with lock:  # released: it can be taken again
            pass


class SegmentedTierTests(TierTests):
    """Tiers built on recycled segments (``nsegments``, ``trim``, recycling)."""

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


class TierMachine(RuleBasedStateMachine):
    """A tier beside a plain dict: every put, release, get and trim compared (see :func:`tier_machine`)."""

    factory: Callable[..., Tier]
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




def tier_machine(factory: Callable[..., Tier], *, max_examples: int = 25) -> Any:
    """A unittest TestCase running :class:`TierMachine` on tiers made by ``factory(directory, **kw)``."""
    machine: Any = type(f"TierMachine_{getattr(factory, '__name__', 'tier')}", (TierMachine,),
                        {"factory": staticmethod(factory)})
    machine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=60, deadline=None,
        suppress_health_check=[HealthCheck.too_slow])
    return machine.TestCase
