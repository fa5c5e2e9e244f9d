"""The prioritized buffers against a plain numpy PER reference and SB3's own sample fields."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from conftest import assert_same, random_transitions
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer

from sb3_integration import (
    CompressedPrioritizedDictReplayBuffer,
    CompressedPrioritizedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
)
from sb3_integration.buffers._prioritized_reads import read_samples

OBS = spaces.Box(0, 255, (2, 4, 3), np.uint8)
DICT_OBS = spaces.Dict({"image": spaces.Box(0, 255, (2, 3), np.uint8), "vec": spaces.Box(-1, 1, (3,), np.float32)})
ACT = spaces.Discrete(4)
KINDS = {
    "replay": (ReplayBuffer, CompressedPrioritizedReplayBuffer, OBS, {}),
    "dict": (DictReplayBuffer, CompressedPrioritizedDictReplayBuffer, DICT_OBS, {}),
    "nstep": (NStepReplayBuffer, CompressedPrioritizedNStepReplayBuffer, OBS, {"n_steps": 3, "gamma": 0.9}),
    "omu": (ReplayBuffer, CompressedPrioritizedReplayBuffer, OBS,
            {"optimize_memory_usage": True, "handle_timeout_termination": False}),
}


class PER:
    """Prioritized replay the plain way: fp64 priorities, numpy cumsum and searchsorted."""

    def __init__(self, rows: int, n_envs: int, alpha: float, beta: float, eps: float, omu: bool) -> None:
        self.rows, self.n, self.alpha, self.beta, self.eps, self.omu = rows, n_envs, alpha, beta, eps, omu
        self.mass = np.zeros(rows * n_envs, np.float32)  # p^alpha, held as the index holds it (fp32)
        self.gen = np.zeros(rows * n_envs, np.int64)
        self.max = 1.0  # the largest p^alpha so far

    def add(self, pos: int) -> None:
        s = pos * self.n + np.arange(self.n)
        self.mass[s], self.gen[s] = self.max, self.gen[s] + 1
        if self.omu and self.rows > 1:
            s = (pos + 1) % self.rows * self.n + np.arange(self.n)
            self.mass[s], self.gen[s] = 0.0, self.gen[s] + 1

    def sample(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self.mass.astype(np.float64)
        cum = np.cumsum(m)
        targets = (np.arange(k) + np.random.random(k)) * (cum[-1] / k)  # noqa: NPY002 - SB3's global RNG
        slots = np.searchsorted(cum, targets, side="right")
        low = m[m > 0].min()
        weights = ((len(m) * m[slots] / cum[-1]) ** -self.beta) / ((len(m) * low / cum[-1]) ** -self.beta)
        return slots, weights, self.gen[slots].copy()

    def update(self, slots: np.ndarray, td: np.ndarray, gens: np.ndarray | None) -> None:
        for s, t, g in zip(slots, td, gens if gens is not None else [None] * len(slots), strict=True):
            if g is not None and g != self.gen[s]:
                continue
            v = (float(t) + self.eps) ** self.alpha
            self.mass[s] = v
            self.max = max(self.max, v)


def build(kind: str, rows: int, n_envs: int, **kw):  # type: ignore[no-untyped-def]
    sb3_cls, cls, space, extra = KINDS[kind]
    kw = {**extra, **kw}
    prio = {k: kw.pop(k) for k in ("alpha", "beta", "epsilon") if k in kw}
    plain = sb3_cls(rows * n_envs, space, ACT, "cpu", n_envs=n_envs, **kw)
    ours = cls(rows * n_envs, space, ACT, "cpu", n_envs=n_envs, chunk_len=4, **kw, **prio)
    ref = PER(rows, n_envs, ours.alpha, ours.beta, ours.epsilon, ours.optimize_memory_usage)
    return plain, ours, ref


def check_sample(plain, ours, ref, k: int, seed: int):  # type: ignore[no-untyped-def]
    np.random.seed(seed)  # noqa: NPY002
    s = ours.sample(k)
    np.random.seed(seed)  # noqa: NPY002
    slots, weights, gens = ref.sample(k)
    np.testing.assert_array_equal(s.indices, slots)
    assert s.indices.dtype == np.int64 and s.weights.dtype == th.float32 and s.weights.shape == (k,)
    np.testing.assert_allclose(s.weights.numpy(), weights, rtol=1e-6)
    rows, envs = slots // ours.n_envs, slots % ours.n_envs
    expect = read_samples(plain, rows, envs, None)  # checked against SB3's own below
    for field in expect._fields:
        assert_same(getattr(expect, field), getattr(s, field), field)
    return s, gens


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize(("alpha", "beta"), [(0.6, 0.4), (1.0, 1.0), (0.0, 0.5)])
def test_against_numpy_reference(kind: str, n_envs: int, alpha: float, beta: float) -> None:
    rows = 10
    plain, ours, ref = build(kind, rows, n_envs, alpha=alpha, beta=beta)
    space = KINDS[kind][2]
    rng = np.random.default_rng(7)
    held = []
    for t, tr in enumerate(random_transitions(space, ACT, 37, n_envs, ep_len=5, seed=n_envs)):  # wraps 3 times
        pos = ours.pos
        plain.add(*tr)
        ours.add(*tr)
        ref.add(pos)
        if t % 3 == 2:
            s, gens = check_sample(plain, ours, ref, 16, seed=t)
            if alpha == 0:
                assert (s.weights == 1.0).all()
            held.append((s.indices, gens))
            if t % 2:  # answer now
                td = rng.exponential(2.0, 16)
                idx, g = held.pop()
                ours.update_priorities(idx, td)
                ref.update(idx, td, g)
            elif len(held) > 3:  # answer an old sample: rows written since then are dropped
                idx, g = held.pop(0)
                td = rng.exponential(2.0, 16)
                ours.update_priorities(idx, th.as_tensor(td))
                ref.update(idx, td, g)
            np.testing.assert_array_equal(ours.priority_index.get(np.arange(rows * n_envs)), ref.mass)
    assert ours.full


@pytest.mark.parametrize("kind", ["replay", "dict", "nstep", "omu"])
def test_reads_are_sb3s(kind: str) -> None:
    """read_samples with SB3's own env draw gives what SB3's _get_samples gives, on both buffers."""
    plain, ours, _ = build(kind, 8, 3)
    for tr in random_transitions(KINDS[kind][2], ACT, 21, 3, ep_len=4):
        plain.add(*tr)
        ours.add(*tr)
    rows = np.array([0, 1, 2, 5, 6, 7, 3, 3, 4], np.int64)
    if kind == "omu":
        rows = rows[rows != plain.pos]
    for seed in range(3):
        np.random.seed(seed)  # noqa: NPY002
        envs = np.random.randint(0, 3, size=len(rows))  # noqa: NPY002 - the draw SB3 makes first
        np.random.seed(seed)  # noqa: NPY002
        sb3 = ReplayBuffer._get_samples.__get__(plain)(rows) if kind == "omu" else plain._get_samples(rows)
        from_ours = ours._batch(rows, lambda e=envs: read_samples(ours, rows, e, None))
        for got in (read_samples(plain, rows, envs, None), from_ours):
            for field in sb3._fields:
                assert_same(getattr(sb3, field), getattr(got, field), field)


def test_omu_row_being_overwritten_has_no_mass() -> None:
    plain, ours, _ = build("omu", 6, 2)
    for tr in random_transitions(OBS, ACT, 15, 2):
        plain.add(*tr)
        ours.add(*tr)
    assert ours.full
    rows_drawn = np.concatenate([ours.sample(64).indices // 2 for _ in range(20)])
    assert ours.pos not in rows_drawn and len(np.unique(rows_drawn)) == 5
    ours.update_priorities(np.array([ours.pos * 2, 0]), np.array([100.0, 1.0]))  # dropped for the row at pos
    assert ours.priorities()[ours.pos * 2] == 0


def test_stale_update_dropped_and_weights_from_global_min() -> None:
    _, ours, _ = build("replay", 4, 1, alpha=1.0, beta=1.0, epsilon=0.0)
    for tr in random_transitions(OBS, ACT, 4, 1):
        ours.add(*tr)
    ours.update_priorities(np.arange(4), np.array([1.0, 2.0, 4.0, 8.0]))
    s = ours.sample(4)
    before = ours.priorities().copy()
    for tr in random_transitions(OBS, ACT, 2, 1, seed=3):  # overwrites rows 0 and 1
        ours.add(*tr)
    ours.update_priorities(s.indices, np.full(4, 3.0))
    p = ours.priorities()
    stale = np.isin(np.arange(4), [0, 1])
    np.testing.assert_allclose(p[stale], 8.0)  # new transitions: the largest priority so far
    drawn = np.unique(s.indices[~np.isin(s.indices, [0, 1])])
    np.testing.assert_allclose(p[drawn], 3.0)
    assert before[0] == 1.0
    s = ours.sample(8)
    m = ours.priorities()
    np.testing.assert_allclose(s.weights.numpy(), (m[s.indices] / m.min()) ** -1.0, rtol=1e-6)


@pytest.mark.parametrize(("indices", "priorities", "match"), [
    (np.array([0, 1]), np.array([1.0]), "same length"),
    (np.array([0, 1]), np.array([1.0, np.nan]), "finite"),
    (np.array([0, 1]), np.array([1.0, -1.0]), ">= 0"),
    (np.array([0, 99]), np.array([1.0, 1.0]), r"stored transitions, in \[0, 12\)"),
    (np.array([0.0, 1.0]), np.array([1.0, 1.0]), "integers"),
    (np.zeros((2, 1), np.int64), np.array([1.0, 1.0]), "1-D"),
    (th.tensor([0, 1]), th.tensor([[1.0, 2.0]]), "1-D"),
])
def test_update_priorities_validates(indices, priorities, match) -> None:  # type: ignore[no-untyped-def]
    _, ours, _ = build("replay", 10, 2)
    for tr in random_transitions(OBS, ACT, 6, 2):
        ours.add(*tr)
    before = ours.priority_index.state_dict()
    with pytest.raises(ValueError, match=match):
        ours.update_priorities(indices, priorities)
    after = ours.priority_index.state_dict()
    np.testing.assert_array_equal(before["masses"], after["masses"])
    np.testing.assert_array_equal(before["generations"], after["generations"])


def test_options() -> None:
    _, ours, _ = build("replay", 10, 1, alpha=0.7, beta=0.5, epsilon=0.01)
    assert (ours.alpha, ours.beta, ours.epsilon) == (0.7, 0.5, 0.01)
    ours.beta = 0.9
    assert ours.beta == 0.9
    with pytest.raises(ValueError, match="beta must be"):
        ours.beta = -1
    with pytest.raises(AttributeError):
        ours.alpha = 0.3  # type: ignore[misc]
    for bad in ({"alpha": -0.1}, {"epsilon": float("nan")}, {"beta": "x"}):
        with pytest.raises(ValueError, match="must be a finite number"):
            CompressedPrioritizedReplayBuffer(10, OBS, ACT, "cpu", **bad)
    with pytest.raises(ValueError, match=r"high <= 0|empty"):
        ours.sample(4)


def _drive(buf, seed: int, steps: int) -> None:  # type: ignore[no-untyped-def]
    space = buf.observation_space
    for tr in random_transitions(space, ACT, steps, buf.n_envs, seed=seed):
        buf.add(*tr)


def _continue_identically(a, b, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Same samples, updates and adds from here on."""
    rng = np.random.default_rng(0)
    for step in range(4):
        outs = []
        for buf in (a, b):
            np.random.seed(100 + step)  # noqa: NPY002
            outs.append(buf.sample(12))
        for field in outs[0]._fields:
            x, y = getattr(outs[0], field), getattr(outs[1], field)
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert_same(x, y, field)
        td = rng.exponential(1.0, 12)
        a.update_priorities(outs[0].indices, td)
        b.update_priorities(outs[1].indices, td)
        _drive(a, 50 + step, 3)
        _drive(b, 50 + step, 3)
    np.testing.assert_array_equal(a.priorities(), b.priorities())


@pytest.mark.parametrize("kind", ["replay", "dict", "nstep"])
@pytest.mark.parametrize("how", ["pickle", "save", "state_dict"])
def test_round_trips_keep_priorities(kind: str, how: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, ours, _ = build(kind, 9, 2, alpha=0.8, beta=0.3, epsilon=1e-3)
    _drive(ours, 1, 13)
    s = ours.sample(10)
    ours.update_priorities(s.indices, np.linspace(0, 5, 10))
    if how == "pickle":
        other = pickle.loads(pickle.dumps(ours))
    elif how == "save":
        ours.save(tmp_path / "buf.h5")
        other = type(ours).load(tmp_path / "buf.h5", device="cpu")
    else:
        with ours.state_dict() as state:
            other = type(ours).from_state_dict(state, device="cpu")
    assert (other.alpha, other.beta, other.epsilon) == (0.8, 0.3, 1e-3)
    np.testing.assert_array_equal(other.priorities(), ours.priorities())
    assert other.priority_index.max == ours.priority_index.max
    np.testing.assert_array_equal(other.priority_index.generations(np.arange(18)),
                                  ours.priority_index.generations(np.arange(18)))
    _continue_identically(ours, other, kind)


def test_buffer_device_indices_are_tensors() -> None:
    buf = CompressedPrioritizedReplayBuffer(20, OBS, ACT, "cpu", n_envs=2, buffer_device="cpu")
    _drive(buf, 0, 8)
    s = buf.sample(6)
    assert isinstance(s.indices, th.Tensor) and s.indices.dtype == th.int64 and s.indices.device.type == "cpu"
    _drive(buf, 1, 10)  # overwrites every row: the sample's update is stale
    before = buf.priorities().copy()
    buf.update_priorities(s.indices, th.full((6,), 9.0))
    np.testing.assert_array_equal(buf.priorities(), before)
    s = buf.sample(6)
    buf.update_priorities(s.indices, th.full((6,), 9.0))
    assert (buf.priorities()[s.indices.numpy()] > 8.9).all()


def test_alpha_zero_is_uniform() -> None:
    _, ours, _ = build("replay", 50, 2, alpha=0.0)
    _drive(ours, 0, 30)
    ours.update_priorities(np.arange(60), np.random.default_rng(0).exponential(5.0, 60))
    counts = np.zeros(60)
    for _ in range(200):
        s = ours.sample(60)
        assert (s.weights == 1.0).all()
        counts += np.bincount(s.indices, minlength=100)[:60]
    np.testing.assert_array_equal(counts, 200)  # 60 strata of equal mass: each slot once per sample


def test_reset_clears_priorities() -> None:
    _, ours, _ = build("replay", 5, 1)
    _drive(ours, 0, 4)
    s = ours.sample(3)
    ours.update_priorities(s.indices, np.full(3, 7.0))
    ours.reset()
    assert ours.priority_index.total == 0 and ours.priority_index.max == 1.0
    _drive(ours, 1, 5)
    ours.update_priorities(s.indices, np.full(3, 5.0))  # from before the reset: stale, dropped
    np.testing.assert_array_equal(ours.priorities(), 1.0)
    ours.update_priorities(s.indices.copy(), np.full(3, 5.0))  # a copy of them: stale too
    np.testing.assert_array_equal(ours.priorities(), 1.0)
    ours.update_priorities(s.indices[::-1].copy(), np.full(3, 5.0))  # indices of no sample: applied
    np.testing.assert_allclose(ours.priorities()[s.indices], 5.0 + 1e-6)


def test_sample_on_meta_reads_nothing_on_the_host() -> None:
    """With buffer_device, a prioritized sample's frames and indices stay on the device: the
    host index draws, the device decodes, and the indices go up as one upload."""
    from chunkstore.device.checks import NoHostReads

    buf = CompressedPrioritizedReplayBuffer(40, OBS, ACT, "meta", n_envs=2, buffer_device="meta", chunk_len=2)
    _drive(buf, 0, 15)
    buf.update_priorities(np.arange(30), np.linspace(0.0, 3.0, 30))
    for batch in (1, 32, 256):
        with NoHostReads("meta"):
            s = buf.sample(batch)
        assert s.observations.device.type == "meta" and tuple(s.observations.shape) == (batch, *OBS.shape)
        assert s.indices.device.type == "meta" and s.indices.dtype == th.int64
        assert s.weights.device.type == "meta" and s.weights.shape == (batch,)


def test_converted_buffer_has_initial_priorities() -> None:
    from sb3_integration import from_sb3_extra_buffers

    plain, _, _ = build("replay", 6, 2)
    for tr in random_transitions(OBS, ACT, 8, 2):
        plain.add(*tr)
    conv = from_sb3_extra_buffers(plain, buffer_class=CompressedPrioritizedReplayBuffer, alpha=0.5)
    assert conv.alpha == 0.5 and conv.full and conv.pos == plain.pos
    np.testing.assert_array_equal(conv.priorities(), 1.0)  # SB3's buffers hold no priorities: all new
    s = conv.sample(8)
    expect = read_samples(plain, s.indices // 2, s.indices % 2, None)
    for field in expect._fields:
        assert_same(getattr(expect, field), getattr(s, field), field)


def test_file_without_priority_arrays_loads_with_initial_priorities(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A file whose priority arrays are absent (written before them) loads as if every stored
    transition were just added; the row being overwritten under optimize_memory_usage stays empty."""
    _, ours, _ = build("omu", 5, 2)
    _drive(ours, 0, 7)
    with ours.state_dict() as state:
        for name in ("priority_masses", "priority_generations", "priority_max"):
            del state.arrays[f"extra/{name}"]
        other = type(ours).from_state_dict(state, device="cpu")
    p = other.priorities()
    row = np.arange(10) // 2 == other.pos
    np.testing.assert_array_equal(p[row], 0.0)
    np.testing.assert_array_equal(p[~row], 1.0)


@pytest.mark.parametrize("as_", ["copy", "list", "tensor", "pickle"])
def test_stale_updates_dropped_for_copies_of_a_samples_indices(as_) -> None:  # type: ignore[no-untyped-def]
    obs, act = spaces.Box(0, 255, (2, 3, 3), np.uint8), spaces.Discrete(3)
    buf = CompressedPrioritizedReplayBuffer(4, obs, act, "cpu", chunk_len=2, alpha=1.0, epsilon=0.0)
    trs = list(random_transitions(obs, act, 12, 1, seed=2))
    for tr in trs[:4]:
        buf.add(*tr)
    np.random.seed(0)  # noqa: NPY002
    s = buf.sample(4)
    idx = {"copy": s.indices.copy(), "list": s.indices.tolist(), "tensor": th.as_tensor(s.indices),
           "pickle": pickle.loads(pickle.dumps(s.indices))}[as_]
    for tr in trs[4:8]:  # every slot overwritten since the sample
        buf.add(*tr)
    before = buf.priorities().copy()
    buf.update_priorities(idx, np.full(4, 100.0))
    np.testing.assert_array_equal(buf.priorities(), before)  # all stale: dropped
    fresh = buf.sample(4)
    same = np.array_equal(fresh.indices, s.indices)  # the earlier sample's values, other generations
    buf.update_priorities(list(fresh.indices), np.full(4, 100.0))
    if same:  # a copy of values two samples returned may be the earlier one's: dropped (issue 34)
        np.testing.assert_array_equal(buf.priorities(), before)
        buf.update_priorities(fresh.indices, np.full(4, 100.0))  # the fresh sample's own: applied
    assert (buf.priorities()[np.unique(fresh.indices)] == pytest.approx(100.0))


def test_sample_zero_is_empty_as_sb3() -> None:
    obs, act = spaces.Box(0, 255, (2, 3, 3), np.uint8), spaces.Discrete(3)
    buf = CompressedPrioritizedReplayBuffer(8, obs, act, "cpu", chunk_len=2)
    for tr in random_transitions(obs, act, 3, 1, seed=1):
        buf.add(*tr)
    s = buf.sample(0)
    assert s.observations.shape == (0, 2, 3, 3) and s.weights.shape == (0,) and s.indices.shape == (0,)
    assert s.indices.dtype == np.int64 and s.weights.dtype == th.float32
