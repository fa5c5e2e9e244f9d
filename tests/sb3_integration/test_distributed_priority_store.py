"""A prioritized shard store without Ray: masses of writers' priorities, eviction, ring growth,
per-transition frequencies, stale updates and checkpoints, against a plain numpy model."""

from __future__ import annotations

import _ray_helpers as helpers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from chunkstore import get_codec
from sb3_integration.distributed import ChunkWriter, ShardStore, StoreSpec
from sb3_integration.distributed import shard_checkpoint as ckpt_mod

SHAPE = (4, 8, 8)
CHI2_999_DF19 = 43.82  # the chi-square 0.999 quantile for 19 degrees of freedom


def store(capacity, alpha=0.5, epsilon=1e-3):
    spec = StoreSpec(capacity, SHAPE, "uint8", (1,), np.int64, priority_alpha=alpha, priority_epsilon=epsilon)
    return ShardStore(spec, get_codec("zstd3"), 0)


class Feeder:
    """One writer feeding a store; the model lists each transition's mass as the store should hold it."""

    def __init__(self, st, writer=1, seed=0):
        self.st, self.rng = st, np.random.default_rng(seed)
        self.w = ChunkWriter(writer, SHAPE, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3"), flush_every=16)
        self.model: list[float] = []
        self.max = 1.0

    def feed(self, n, given=0.5):
        """``n`` steps; each has a priority with probability ``given`` (None otherwise)."""
        a, eps = self.st.spec.priority_alpha or 1.0, self.st.spec.priority_epsilon
        for s in helpers.stacked_steps(int(self.rng.integers(1 << 30)), n):
            p = float(np.float32(self.rng.exponential(2.0))) if self.rng.random() < given else None  # as sent
            self.w.add(*s, priorities=None if p is None else [p])
            m = float(np.float32(self.max if p is None else (p + eps) ** a))
            self.max = max(self.max, (p + eps) ** a if p is not None else self.max)
            self.model.append(m)
            if self.w.ready:
                self.st.insert(self.w.drain())
        msg = self.w.drain()
        if msg is not None:
            self.st.insert(msg)


@pytest.mark.parametrize("capacity,steps", [(50, [30, 40]), (3000, [900, 700, 1500])])
def test_masses_follow_writers_priorities_eviction_and_ring_growth(capacity, steps):
    st = store(capacity)
    f = Feeder(st)
    for n in steps:
        f.feed(n)
        want = np.array(f.model[-capacity:])
        assert st.size() == len(want)
        np.testing.assert_allclose(st.priority_masses(), want, rtol=1e-6)
        # evicted rows and ring positions beyond the held rows have no mass
        assert st.weight() == pytest.approx(want.sum(), rel=1e-9)
        assert st.priorities.min == pytest.approx(want.min(), rel=1e-6)


def test_per_transition_frequencies_match_p_alpha_on_a_skewed_store():
    st = store(20, alpha=0.7, epsilon=0.0)
    f = Feeder(st, seed=3)
    f.feed(20, given=1.0)
    rows = st.live_rows()
    masses = st.priority_masses()
    assert masses.max() / masses.min() > 5  # skewed
    pos_to_i = {int(r): i for i, r in enumerate(rows)}
    counts = np.zeros(20)
    rng = np.random.default_rng(7)
    n = 0
    for _ in range(100):
        reply = st.sample_prioritized(997, rng, decode=False)
        np.add.at(counts, [pos_to_i[int(r)] for r in reply.rows], 1)
        np.testing.assert_array_equal(reply.masses, masses[[pos_to_i[int(r)] for r in reply.rows]])
        assert reply.min_mass == masses.min() and reply.weight == pytest.approx(masses.sum())
        n += reply.n
    expected = n * masses / masses.sum()
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert stat < CHI2_999_DF19, (counts, expected)


def test_updates_apply_by_generation_and_stale_ones_are_dropped():
    st = store(64)
    f = Feeder(st, seed=1)
    f.feed(64)
    reply = st.sample_prioritized(32, np.random.default_rng(0), decode=False)
    slots, gens = reply.rows, reply.generations
    uniq = np.unique(slots, return_index=True)[1]
    slots, gens = slots[uniq], gens[uniq]
    assert st.update_priorities(slots, gens, np.full(len(slots), 2.0)) == len(slots)
    np.testing.assert_allclose(st.priorities.get(slots), (2.0 + 1e-3) ** 0.5, rtol=1e-6)
    held_before = set(st.live_rows()[:20].tolist())  # the 20 oldest rows: evicted next
    f.feed(20, given=0.0)
    stale = np.isin(slots, list(held_before))
    applied = st.update_priorities(slots, gens, np.full(len(slots), 7.0))
    assert applied == int((~stale).sum())
    assert stale.any()
    # the stale entries left the new rows' masses alone
    new = st.priorities.get(slots[stale])
    assert not np.isclose(new, (7.0 + 1e-3) ** 0.5).any()


def test_ring_growth_keeps_rows_that_stay_and_makes_moved_ones_stale():
    st = store(3000)
    f = Feeder(st, seed=2)
    f.feed(1000)
    reply = st.sample_prioritized(16, np.random.default_rng(1), decode=False)
    ring = st.ring
    f.feed(100)
    assert st.ring > ring and st.tail == 0  # the ring grew; nothing had left it: no row moved
    assert st.update_priorities(reply.rows, reply.generations, np.ones(16)) == len(reply.rows)
    # rows leave the front (the service's stamps moved on), then the ring grows again: rows move
    st.advance(st.horizon + st.capacity - st.size() + 300)
    assert st.tail == 300 and st.size() == 800
    reply = st.sample_prioritized(16, np.random.default_rng(2), decode=False)
    masses = st.priority_masses()
    f.feed(2000)
    assert st.ring == 3000
    assert st.update_priorities(reply.rows, reply.generations, np.full(16, 9.0)) == 0
    np.testing.assert_allclose(st.priority_masses()[:800], masses, rtol=1e-6)  # moved with their rows


def test_bad_priorities_are_rejected_at_add_and_nothing_is_staged():
    w = ChunkWriter(1, SHAPE, "uint8", (1,), np.int64, 2, codec=get_codec("zstd3"))
    s = helpers.stacked_steps(0, 1, 2)[0]
    for bad in ([1.0], [1.0, -1.0], [np.nan, 1.0], [np.inf, 0.0], [[1.0, 2.0]], ["a", "b"]):
        with pytest.raises(ValueError, match="priorities"):
            w.add(*s, priorities=bad)
        assert w.pending == 0
    w.add(*s, priorities=np.array([0.0, 3.0]))
    assert w.pending == 1


def test_checkpoints_keep_priorities_and_version_2_files_load_at_mass_1(tmp_path, monkeypatch):
    st = store(100)
    f = Feeder(st, seed=4)
    f.feed(130)
    path = str(tmp_path / "p.h5")
    st.save(path)
    back = store(100)
    back.restore(path)
    np.testing.assert_array_equal(back.priority_masses(), st.priority_masses())
    assert back.priorities.max == st.priorities.max and back.weight() == st.weight()
    # a version 2 file (a uniform shard's, no priorities) in a prioritized shard: every held row at 1.0
    uniform = ShardStore(StoreSpec(100, SHAPE, "uint8", (1,), np.int64), get_codec("zstd3"), 0)
    Feeder(uniform, seed=5).feed(70)
    old = str(tmp_path / "v2.h5")
    monkeypatch.setattr(ckpt_mod, "SHARD_FORMAT_VERSION", 2)
    uniform.save(old)
    monkeypatch.undo()
    pri = store(100)
    pri.restore(old)
    assert pri.size() == 70 and pri.weight() == 70.0
    np.testing.assert_array_equal(pri.priority_masses(), np.ones(70))
    # and a prioritized file in a uniform shard: its rows, sampled uniformly
    plain = ShardStore(StoreSpec(100, SHAPE, "uint8", (1,), np.int64), get_codec("zstd3"), 0)
    plain.restore(path)
    assert plain.size() == 100 and plain.weight() == 100.0


def test_a_state_or_a_pickle_keeps_the_priorities():
    import pickle

    st = store(100)
    Feeder(st, seed=6).feed(130)
    with st.state_dict() as state:
        back = store(100)
        back.load_state_dict(state)
    for other in (back, pickle.loads(pickle.dumps(st))):
        np.testing.assert_array_equal(other.priority_masses(), st.priority_masses())
        assert other.priorities.max == st.priorities.max and other.weight() == st.weight()


def test_a_uniform_store_refuses_prioritized_calls():
    plain = ShardStore(StoreSpec(10, SHAPE, "uint8", (1,), np.int64), get_codec("zstd3"), 0)
    with pytest.raises(ValueError, match="not prioritized"):
        plain.sample_prioritized(1, np.random.default_rng(0), decode=False)
    with pytest.raises(ValueError, match="not prioritized"):
        plain.update_priorities([0], [0], [1.0])
    with pytest.raises(ValueError, match="alpha"):
        StoreSpec(10, SHAPE, "uint8", (1,), np.int64, priority_alpha=-1.0)


def test_bad_priority_options_fail_at_create_before_any_actor():
    from gymnasium import spaces

    from sb3_integration.distributed import ReplayService

    obs, act = spaces.Box(0, 255, SHAPE, np.uint8), spaces.Discrete(4)
    for kw, match in [({"alpha": -0.5}, "alpha"), ({"alpha": float("nan")}, "alpha"),
                      ({"alpha": 0.6, "epsilon": -1.0}, "epsilon")]:
        with pytest.raises(ValueError, match=match):
            ReplayService.create("never", obs, act, 100, **kw)
    with pytest.raises(TypeError, match="alpha"):
        ReplayService.create("never", obs, act, 100, alpha="0.6")


@settings(max_examples=25, deadline=None)
@given(st_ops=hst.lists(hst.tuples(hst.sampled_from(["feed", "sample", "update", "advance"]),
                                   hst.integers(1, 90), hst.floats(0.0, 1.0)), min_size=1, max_size=12),
       capacity=hst.sampled_from([40, 1100]))
def test_interleavings_keep_the_masses_of_a_numpy_model(st_ops, capacity):
    """Feeds (writers' priorities or none), samples, later updates and evictions by the service's
    stamps: the store's masses by stamp equal a model's; an update applies exactly where its slot
    still holds the row it was sampled from (whatever evictions and ring growth did since)."""
    s = store(capacity, alpha=0.7, epsilon=1e-2)
    f = Feeder(s, seed=capacity)
    mass: dict[int, float] = {}  # stamp -> mass (the model)
    drawn: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # slots, generations, stamps
    for op, k, u in st_ops:
        if op == "feed":
            first = len(f.model)
            f.feed(k, given=u)
            mass.update({first + j: m for j, m in enumerate(f.model[first:])})
        elif op == "sample" and s.weight() > 0:
            r = s.sample_prioritized(k, np.random.default_rng(k), decode=False)
            drawn.append((r.rows, r.generations, s.rows["stamp"][r.rows].copy()))
        elif op == "update" and drawn:
            slots, gens, stamps = drawn.pop(0)
            pri = np.float32(np.linspace(0.0, 5.0 * u, len(slots))).astype(np.float64)
            same = s.rows["stamp"][slots] == stamps
            applied = s.update_priorities(slots, gens, pri)
            assert applied == int(same.sum())
            for stamp, p, ok in zip(stamps.tolist(), pri.tolist(), same.tolist(), strict=True):
                if ok:  # later entries for the same slot win
                    m = (p + 1e-2) ** 0.7
                    mass[stamp] = float(np.float32(m))
                    f.max = max(f.max, m)
        elif op == "advance":
            s.advance(s.horizon + k)
        live = s.rows["stamp"][s.live_rows()]
        want = np.array([mass[int(t)] for t in live])
        np.testing.assert_allclose(s.priority_masses(), want, rtol=1e-6)
        assert s.weight() == pytest.approx(want.sum(), rel=1e-9, abs=1e-12)


def test_alpha_0_is_uniform_with_weights_of_exactly_1():
    from sb3_integration.distributed.prioritized import importance_weights

    s = store(50, alpha=0.0)
    f = Feeder(s, seed=9)
    f.feed(50, given=1.0)
    masses = s.priority_masses()
    assert (masses == 1.0).all() and s.weight() == 50.0
    r = s.sample_prioritized(64, np.random.default_rng(0), decode=False)
    assert (importance_weights(r.masses, r.min_mass, 0.7) == 1.0).all()
    # and against an fp64 reference for skewed masses
    m = np.array([0.5, 2.0, 8.0, 0.25])
    np.testing.assert_allclose(importance_weights(m, 0.25, 0.4), (m / 0.25) ** -0.4, rtol=1e-6)
    assert (importance_weights(m, 0.25, 0.0) == 1.0).all()


def test_indices_encode_shard_generation_and_slot():
    from sb3_integration.distributed.prioritized import decode_indices, encode_indices

    rng = np.random.default_rng(0)
    shard, gen, slot = rng.integers(0, 1 << 15, 100), rng.integers(0, 1 << 16, 100), rng.integers(0, 1 << 32, 100)
    idx = encode_indices(shard, gen, slot)
    assert idx.dtype == np.int64 and (idx >= 0).all()
    for a, b in zip(decode_indices(idx), (shard, gen, slot), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_priority_whose_mass_overflows_float32_is_clamped_and_the_writer_goes_on():
    st = store(64, alpha=2.0)
    f = Feeder(st)
    s = helpers.stacked_steps(3, 2)
    f.w.add(*s[0], priorities=[1e30])  # (1e30)^2 is beyond float32: held as its largest
    st.insert(f.w.drain())
    f.w.add(*s[1], priorities=[1.0])
    st.insert(f.w.drain())  # the next message is taken (it raised MissingMessagesError before)
    assert st.count == 2
    masses = st.priorities.get(st.live_rows())
    assert masses[0] == float(np.finfo(np.float32).max) and masses[1] == pytest.approx((1.0 + 1e-3) ** 2)


def test_the_issue_34_case_late_updates_carry_their_own_generation():
    """4 slots, alpha 1, eps 0, all the mass on one row; sample A draws it, a new row overwrites
    it, sample B draws it: the indices a learner gets differ (the generation is in them), and
    A's late update is dropped. (The Ray path carried generations in the indices already.)"""
    from sb3_integration.distributed.prioritized import encode_indices

    st = store(4, alpha=1.0, epsilon=0.0)
    f = Feeder(st, seed=3)
    f.feed(4, given=0.0)
    live = st.live_rows()
    gens = st.priorities.generations(live)
    assert st.update_priorities(live, gens, np.array([1000.0, 0.0, 0.0, 0.0])) == 4
    a = st.sample_prioritized(1, np.random.default_rng(0), decode=False)
    assert a.rows[0] == live[0]
    f.feed(1, given=0.0)  # evicts the row with all the mass; the new row takes its slot at mass 1000
    b = st.sample_prioritized(1, np.random.default_rng(1), decode=False)
    assert b.rows[0] == a.rows[0] and b.generations[0] != a.generations[0]
    assert encode_indices([0], a.generations, a.rows)[0] != encode_indices([0], b.generations, b.rows)[0]
    assert st.update_priorities(a.rows, a.generations, np.array([7.0])) == 0
    assert st.priorities.get(b.rows)[0] == 1000.0
    assert st.update_priorities(b.rows, b.generations, np.array([5.0])) == 1


def test_priorities_below_float32s_normal_range_clamped_from_writers_refused_from_learners():
    tiny = float(np.finfo(np.float32).tiny)
    st = store(8, alpha=1.0, epsilon=0.0)
    f = Feeder(st)
    s = helpers.stacked_steps(3, 2)
    f.w.add(*s[0], priorities=[1e-45])  # a float32 subnormal: its mass is held as the smallest normal
    st.insert(f.w.drain())
    assert st.priorities.get(st.live_rows())[0] == tiny
    with pytest.raises(ValueError, match="smallest normal"):
        st.update_priorities(st.live_rows(), st.priorities.generations(st.live_rows()), np.array([1e-46]))
    assert st.priorities.get(st.live_rows())[0] == tiny
