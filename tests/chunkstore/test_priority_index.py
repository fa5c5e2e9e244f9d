"""chunkstore.priority.PriorityIndex against a plain numpy model."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstore.priority import PriorityIndex

try:
    from scipy import stats
except ImportError:  # pragma: no cover - scipy is in the venv; the critical value is stated below
    stats = None

#: fp32 leaves against fp64 sums: each mass is rounded once (relative 2^-24), so the total of
#: fp32 masses differs from the fp64 total by at most 2^-24 of it (plus fp64 summation error)
REL_TOL = 2.0 ** -23


class Model:
    """Prioritized slots the slow, obvious way (fp64 masses, fp64 sums)."""

    def __init__(self, capacity: int) -> None:
        self.mass = np.zeros(capacity)
        self.gen = np.zeros(capacity, np.int64)
        self.max = 1.0

    def set(self, slots: np.ndarray, masses: np.ndarray | None) -> None:
        for i, s in enumerate(slots):
            v = self.max if masses is None else float(masses[i])
            self.mass[s] = v
            self.max = max(self.max, v)
            self.gen[s] = (self.gen[s] + 1) % 65536

    def update(self, slots: np.ndarray, masses: np.ndarray, gens: np.ndarray | None) -> np.ndarray:
        applied = np.ones(len(slots), bool)
        for i, s in enumerate(slots):
            if gens is not None and self.gen[s] != gens[i]:
                applied[i] = False
                continue
            self.mass[s] = masses[i]
            self.max = max(self.max, float(masses[i]))
        return applied


def check_same(ix: PriorityIndex, model: Model) -> None:
    np.testing.assert_array_equal(ix.get(np.arange(ix.capacity)), model.mass.astype(np.float32))
    np.testing.assert_array_equal(ix.generations(np.arange(ix.capacity)), model.gen)
    assert ix.total == pytest.approx(model.mass.sum(), rel=REL_TOL, abs=1e-300)
    pos = model.mass[model.mass > 0]
    assert ix.min == (np.float32(pos.min()) if pos.size else np.inf)
    assert ix.max == pytest.approx(model.max, rel=REL_TOL)


# fp32 subnormals are refused (test_subnormal_masses_are_refused): the index holds normal fp32 masses
masses_st = (st.floats(0, 1e6, allow_nan=False, allow_subnormal=False, width=32) | st.just(0.0)
             | st.floats(1e-30, 1e-20).map(lambda x: float(np.float32(x))))


@st.composite
def programs(draw):  # type: ignore[no-untyped-def]
    capacity = draw(st.integers(1, 300))
    fanout = draw(st.sampled_from([2, 3, 16, 32]))
    ops = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["set", "set_max", "update", "update_stale", "sample"]))
        n = draw(st.integers(1, 12))
        slots = draw(st.lists(st.integers(0, capacity - 1), min_size=n, max_size=n))
        masses = draw(st.lists(masses_st, min_size=n, max_size=n))
        ops.append((kind, np.array(slots), np.array(masses), draw(st.integers(1, 40))))
    return capacity, fanout, ops


@settings(max_examples=150, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_index_matches_model(program, seed) -> None:  # type: ignore[no-untyped-def]
    capacity, fanout, ops = program
    ix, model = PriorityIndex(capacity, fanout), Model(capacity)
    rng = np.random.default_rng(seed)
    held: list[tuple[np.ndarray, np.ndarray]] = []  # sampled (slots, generations), updated later
    for kind, slots, masses, k in ops:
        if kind == "set":
            ix.set(slots, masses)
            model.set(slots, masses)
        elif kind == "set_max":
            ix.set(slots)
            model.set(slots, None)
        elif kind == "update":
            ix.update(slots, masses)
            model.update(slots, masses, None)
        elif kind == "update_stale" and held:  # an update from an earlier sample: stale slots dropped
            s, g = held.pop(0)
            m = rng.random(len(s)) * 10
            np.testing.assert_array_equal(ix.update(s, m, g), model.update(s, m, g))
        elif kind == "sample":
            if model.mass.sum() == 0:
                with pytest.raises(ValueError, match="no mass"):
                    ix.sample(k, rng)
                continue
            s, m, g = ix.sample(k, rng)
            assert (model.mass[s] > 0).all(), "a slot with no mass was drawn"
            np.testing.assert_array_equal(m, model.mass[s].astype(np.float32))
            np.testing.assert_array_equal(g, model.gen[s])
            held.append((s, g))
        check_same(ix, model)
    restored = pickle.loads(pickle.dumps(ix))
    check_same(restored, model)
    assert restored.total == ix.total


def test_stale_updates_dropped() -> None:
    ix = PriorityIndex(8)
    ix.set(np.arange(8))
    slots, _, gens = ix.sample(4, np.random.default_rng(0))
    ix.set(slots[:1], [0.5])  # slot overwritten after the sample
    applied = ix.update(slots, np.full(4, 7.0), gens)
    assert not applied[slots == slots[0]].any()
    assert ix.get(slots[:1])[0] == 0.5
    assert (ix.get(slots[1:])[slots[1:] != slots[0]] == 7.0).all()


def test_stratified_each_segment_once() -> None:
    ix = PriorityIndex(100, fanout=4)
    ix.set(np.arange(100), np.ones(100))
    slots, _, _ = ix.sample(100, np.random.default_rng(3))
    np.testing.assert_array_equal(slots, np.arange(100))  # equal masses, 100 strata: one draw each


def test_zero_mass_never_drawn_at_rounding_edges() -> None:
    ix = PriorityIndex(1000, fanout=32)
    ix.set(np.arange(0, 1000, 7), np.full(143, 3e-38))
    ix.set([999], [3e38])
    rng = np.random.default_rng(1)
    for _ in range(50):
        s, m, _ = ix.sample(256, rng)
        assert (m > 0).all()
        assert np.isin(s, np.r_[np.arange(0, 1000, 7), 999]).all()


def test_new_slots_get_largest_mass() -> None:
    ix = PriorityIndex(10)
    ix.set([0])
    assert ix.get([0])[0] == 1.0
    ix.update([0], [5.0])
    ix.update([0], [2.0])
    ix.set([1])
    assert ix.get([1])[0] == 5.0 and ix.max == 5.0


def _skewed(seed: int, n: int = 2000, alpha: float = 0.6) -> np.ndarray:
    """p^alpha with p over 7 orders of magnitude, a tenth of the slots without mass."""
    rng = np.random.default_rng(seed)
    p = np.exp(rng.uniform(np.log(1e-6), np.log(10.0), n))
    p[rng.choice(n, n // 10, replace=False)] = 0.0
    return p ** alpha


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_chi_square_independent_draws(seed: int) -> None:
    """10^6 independent draws on a heavily skewed vector: chi-square against p^alpha / sum."""
    mass = _skewed(seed)
    ix = PriorityIndex(len(mass))
    ix.set(np.arange(len(mass)), mass)
    rng = np.random.default_rng(100 + seed)
    counts = np.zeros(len(mass), np.int64)
    for _ in range(4):
        counts += np.bincount(ix.sample(250_000, rng, stratified=False)[0], minlength=len(mass))
    assert counts[mass == 0].sum() == 0
    expected = mass / mass.sum() * counts.sum()
    keep = expected >= 5  # bins expecting fewer than 5 pooled into one
    obs = np.r_[counts[keep], counts[~keep & (mass > 0)].sum()]
    exp = np.r_[expected[keep], expected[~keep & (mass > 0)].sum()]
    chi2, dof = float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1
    # one-sided at 1e-4 (Wilson-Hilferty's approximation of the quantile when scipy is absent)
    crit = stats.chi2.ppf(1 - 1e-4, dof) if stats else dof * (1 - 2 / (9 * dof) + 3.719 * (2 / (9 * dof)) ** 0.5) ** 3
    assert chi2 < crit, (chi2, crit, dof)
    if stats:
        assert stats.chi2.sf(chi2, dof) > 1e-4


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_stratified_counts_within_two_per_sample(seed: int) -> None:
    """Stratified: a slot of mass m gets m / (total / k) draws per sample, give or take 2 (the
    strata it covers entirely always land in it; at most the two at its ends may not)."""
    mass = _skewed(seed)
    ix = PriorityIndex(len(mass))
    ix.set(np.arange(len(mass)), mass)
    rng = np.random.default_rng(seed)
    calls, k = 4, 250_000
    counts = np.zeros(len(mass), np.int64)
    for _ in range(calls):
        s = ix.sample(k, rng)[0]
        assert np.all(np.diff(s) >= 0)
        counts += np.bincount(s, minlength=len(mass))
    expected = ix.get(np.arange(len(mass))) / ix.total * k * calls
    assert counts[mass == 0].sum() == 0
    assert np.abs(counts - expected).max() <= 2 * calls


def test_state_dict_round_trip_and_errors() -> None:
    ix = PriorityIndex(50, fanout=4)
    ix.set(np.arange(30), np.linspace(0.1, 3, 30))
    st_ = ix.state_dict()
    other = PriorityIndex(1)
    other.load_state_dict(st_)
    assert other.total == ix.total and other.min == ix.min and other.max == ix.max
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(ix.sample(64, rng1)[0], other.sample(64, rng2)[0])
    with pytest.raises(ValueError, match="not a PriorityIndex state"):
        other.load_state_dict({"capacity": 3})
    bad = dict(st_, masses=np.full(50, np.nan, np.float32))
    with pytest.raises(ValueError, match="finite"):
        other.load_state_dict(bad)
    assert other.total == ix.total  # unchanged


@pytest.mark.parametrize(("call", "match"), [
    (lambda ix: ix.update([0], [-1.0]), "masses must be finite"),
    (lambda ix: ix.update([0], [np.inf]), "masses must be finite"),
    (lambda ix: ix.update([0, 1], [1.0]), "masses must have shape"),
    (lambda ix: ix.update([10], [1.0]), r"slots must be in \[0, 10\)"),
    (lambda ix: ix.update([0.5], [1.0]), "slots must be integers"),
    (lambda ix: ix.update([0], [1.0], [1, 2]), "generations must have shape"),
    (lambda ix: ix.sample(0), "k must be an int"),
    (lambda ix: PriorityIndex(0), "capacity must be"),
    (lambda ix: PriorityIndex(5, fanout=1), "fanout must be"),
])
def test_bad_input(call, match) -> None:  # type: ignore[no-untyped-def]
    ix = PriorityIndex(10)
    ix.set(np.arange(10))
    before = ix.state_dict()
    with pytest.raises(ValueError, match=match):
        call(ix)
    np.testing.assert_array_equal(ix.state_dict()["masses"], before["masses"])


def test_empty_index_cannot_sample() -> None:
    with pytest.raises(ValueError, match="no mass"):
        PriorityIndex(4).sample(2)
