"""The device sample path's structural guarantees, its budget, its errors and its interrupts.

* No host reads: a whole ``sample()`` (and a rollout ``get()`` batch) runs under
  :class:`~chunkstore.device.checks.NoHostReads` on the ``meta`` device, where tensors
  have no data at all, so any op that reads device data on the host (``.item()``,
  ``.cpu()``, a data-sized output) fails. On the cpu the same mode catches
  ``_local_scalar_dense`` and data-sized ops (copies to the cpu cannot be told apart there).
* Op counts (:class:`~chunkstore.device.checks.OpCounter`): the same at batch 32 and 256,
  at 2 and 8 envs, and at most 40 per replay sample (channel-first and channel-last).
* Never overflow: under a tiny ``heap_bytes`` the segments of all keys together stay
  within the budget, the oldest move to host RAM, samples stay equal to SB3's.
* Bad options fail at the call; a pickle from a missing CUDA device loads into host memory
  with a warning; Ctrl-C inside ``add`` leaves a device buffer equal to SB3's.
* CUDA-only checks are skipped without CUDA.
"""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from conftest import count_events, frame_stack_stream, interrupted, random_transitions
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
from test_device_buffers import (
    ACT,
    DICT,
    assert_samples_equal,
    assert_views_equal,
    replay_trio,
    rollout_steps,
    stacked,
)

from chunkstore.device import DeviceArray
from chunkstore.device.checks import HostReadError, NoHostReads, OpCounter
from chunkstore.device.heap import DeviceBudget, DeviceHeap
from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
)
from sb3_integration.engine.frames import FrameStore

cuda = pytest.mark.skipif(not th.cuda.is_available(), reason="needs CUDA")
MAX_OPS = 40


def device_replay(device: str, n_envs: int, channels_last: bool = False, cls=CompressedReplayBuffer,
                  rows: int = 40, T: int = 90, **kw):
    shape = (12, 10, 4) if channels_last else (4, 12, 10)
    frame = (12, 10, 1) if channels_last else (1, 12, 10)
    buf = cls(rows * n_envs, spaces.Box(0, 255, shape, np.uint8), ACT, device, n_envs=n_envs,
              buffer_device=device, chunk_len=4, **kw)
    rng = np.random.default_rng(0)
    for t, (obs, nxt) in enumerate(frame_stack_stream(T, n_envs, frame=frame, channels_last=channels_last)):
        done = (t + 1 + np.arange(n_envs)) % 7 == 0
        buf.add(obs, nxt, rng.integers(0, 3, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32), done,
                [{"TimeLimit.truncated": False} for _ in done])
    assert buf.frame_stores[None].layout.depth == 4  # the stacks were detected: frames shared
    return buf


def sample_ops(buf, batch: int, seed: int = 0) -> int:
    """Torch ops of one sample, in steady state (the same batch once before: buffers sized)."""
    np.random.seed(seed)  # noqa: NPY002
    buf.sample(batch)
    np.random.seed(seed)  # noqa: NPY002
    with OpCounter() as ops, NoHostReads(buf.buffer_device):
        buf.sample(batch)
    return ops.total


# -- no host reads -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_envs", [1, 2, 8])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("cls", [CompressedReplayBuffer, CompressedNStepReplayBuffer])
def test_sample_reads_nothing_on_the_host_meta(n_envs, channels_last, cls):
    """On meta there is no data: any host read of device data (sync) would raise."""
    buf = device_replay("meta", n_envs, channels_last, cls)
    for batch in (1, 32, 256):
        with NoHostReads("meta") as mode:
            s = buf.sample(batch)
        assert mode.seen["aten.index_select"] > 0  # the decoder ran under the mode
        assert s.observations.device.type == "meta" and tuple(s.observations.shape) == (batch, *buf.obs_shape)
        assert s.next_observations.device.type == "meta"


def test_dict_sample_and_rollout_batches_read_nothing_on_the_host_meta():
    space = spaces.Dict({"img": spaces.Box(0, 255, (4, 6, 5), np.uint8), "vec": spaces.Box(-1, 1, (3,), np.float32)})
    buf = CompressedDictReplayBuffer(40, space, ACT, "meta", n_envs=2, buffer_device="meta", chunk_len=2)
    for tr in random_transitions(space, ACT, 30, 2, ep_len=4):
        buf.add(*tr)
    with NoHostReads("meta"):
        s = buf.sample(64)
    assert {x.device.type for x in s.observations.values()} == {"meta"}
    roll = CompressedRolloutBuffer(8, spaces.Box(0, 255, (4, 6, 5), np.uint8), ACT, "meta", n_envs=4,
                                   buffer_device="meta")
    roll.reset()
    for step in rollout_steps(roll.observation_space, 4, 8, 0):
        roll.add(*step)
    roll.compute_returns_and_advantage(th.zeros(4), np.zeros(4))
    gen = roll.get(16)
    with NoHostReads("meta"):
        batch = next(gen)
    assert batch.observations.device.type == "meta" and tuple(batch.observations.shape) == (16, 4, 6, 5)


def test_sample_with_spilled_segments_reads_nothing_on_the_host_cpu():
    buf = device_replay("cpu", 2, rows=200, T=300, heap_bytes=1 << 16)
    heap = buf.frame_stores[None].frames.info()["heap"]
    assert heap["segments_in_host_ram"] > 0  # reads ship spilled records with the batch
    with NoHostReads("cpu") as mode:
        buf.sample(256)
    assert mode.seen["aten.put_"] == 1


def test_the_checks_would_catch_a_host_read():
    """The same modes fail a sample path that reads device data back (here: a planted .cpu())."""
    buf = device_replay("meta", 1)
    store = buf.frame_stores[None]
    original = store.gather
    store.gather = lambda *a, **k: [t.cpu() for t in original(*a, **k)]  # type: ignore[method-assign]
    with pytest.raises(HostReadError, match="to the host"), NoHostReads("meta"):
        buf.sample(8)


# -- op counts ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("heap_bytes", [None, 1 << 15])
def test_ops_per_sample_do_not_grow_with_batch_or_envs(channels_last, heap_bytes):
    counts = {}
    for n_envs in (2, 8):
        buf = device_replay("cpu", n_envs, channels_last, rows=60, T=160, heap_bytes=heap_bytes)
        for batch in (32, 256):
            counts[(n_envs, batch)] = sample_ops(buf, batch)
    assert len(set(counts.values())) == 1, counts
    assert next(iter(counts.values())) <= MAX_OPS


def test_ops_per_nstep_sample_and_rollout_batch():
    nstep = device_replay("cpu", 2, cls=CompressedNStepReplayBuffer, n_steps=3, gamma=0.9)
    assert sample_ops(nstep, 32) == sample_ops(nstep, 256) <= MAX_OPS
    roll = CompressedRolloutBuffer(32, spaces.Box(0, 255, (4, 6, 5), np.uint8), ACT, "cpu", n_envs=8,
                                   buffer_device="cpu")
    roll.reset()
    for step in rollout_steps(roll.observation_space, 8, 32, 0):
        roll.add(*step)
    roll.compute_returns_and_advantage(th.zeros(8), np.zeros(8))
    counts = set()
    for batch in (32, 128):
        list(roll.get(batch))  # warm: buffers sized
        gen = roll.get(batch)
        with OpCounter() as ops:
            next(gen)
        counts.add(ops.total)
    assert len(counts) == 1 and counts.pop() <= MAX_OPS


# -- budget and spill ----------------------------------------------------------------------------------------
def test_tiny_budget_spills_and_samples_stay_exact():
    seg_budget = 3 << 16
    ref, host, dev = replay_trio("dict", 150 * 2, DICT, n_envs=2, chunk_len=4, heap_bytes=seg_budget)
    for tr in random_transitions(DICT, ACT, 400, 2, ep_len=9, seed=1):  # wraps twice
        for b in (ref, host, dev):
            b.add(*tr)
    arrays = [fs.frames for fs in dev.frame_stores.values()]
    budget = arrays[0]._heap.budget
    assert all(a._heap.budget is budget for a in arrays)  # one budget for all keys
    heaps = [a.info()["heap"] for a in arrays]
    on_device = sum(h["slots"] * h["segment_bytes"] for h in heaps)
    assert on_device <= seg_budget and budget.used == on_device  # never over the budget
    assert sum(h["segments_in_host_ram"] for h in heaps) > 0 and sum(h["spills"] for h in heaps) > 0
    for seed in range(5):
        assert_samples_equal(ref, dev, 64, seed)
        assert_samples_equal(host, dev, 64, seed)
    assert_views_equal(ref, dev)


def test_shared_budget_between_heaps():
    budget = DeviceBudget(4 * 64)
    a = DeviceHeap(th, th.device("cpu"), th.int16, segment_bytes=64, budget_bytes=budget)
    b = DeviceHeap(th, th.device("cpu"), th.int16, segment_bytes=64, budget_bytes=budget)
    data = np.arange(64, dtype=np.uint8)
    for _ in range(6):
        a.put(data, np.array([64]))
    assert a.info()["slots"] <= 4 and budget.used == a.info()["slots"] * 64
    for _ in range(6):
        b.put(data, np.array([64]))
    assert (a.info()["slots"] + b.info()["slots"]) * 64 <= 4 * 64
    assert b.info()["segments_in_host_ram"] > 0
    a.close()
    assert budget.used == b.info()["slots"] * 64
    again = pickle.loads(pickle.dumps(budget))
    assert again.limit == 4 * 64 and again.used == 0  # a pickled budget is counted again by its heaps


def test_default_budget_is_unlimited_off_cuda():
    buf = CompressedReplayBuffer(20, spaces.Box(0, 255, (4, 6, 5), np.uint8), ACT, "cpu", buffer_device="cpu")
    buf.add(*next(stacked(1, 1, False, 5, 0)))
    buf.frame_stores[None].ensure_layout()
    assert buf.frame_stores[None].frames._heap.budget.limit is None


# -- options and their errors ----------------------------------------------------------------------------------
def test_bad_device_options_fail_at_the_call():
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    with pytest.raises(ValueError, match="pass buffer_device too"):
        CompressedReplayBuffer(10, space, ACT, "cpu", heap_bytes=1 << 20)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="heap_bytes"):
            CompressedReplayBuffer(10, space, ACT, "cpu", buffer_device="cpu", heap_bytes=bad)
    with pytest.raises(ValueError, match="buffer_device must name a torch device"):
        CompressedReplayBuffer(10, space, ACT, "cpu", buffer_device="gpu0")
    from chunkstore import MemoryTier

    with pytest.raises(ValueError, match="tier"):
        CompressedReplayBuffer(10, space, ACT, "cpu", buffer_device="cpu", tier=MemoryTier())
    with pytest.raises(TypeError, match="buffer_device, heap_bytes"):
        CompressedRolloutBuffer(8, space, ACT, "cpu", buffer_devic="cpu")
    with pytest.raises(TypeError, match="torch has no dtype"):
        FrameStore((4,), np.dtype(">u2"), 10, device="cpu")


@pytest.mark.skipif(th.cuda.is_available(), reason="checks the errors without CUDA")
def test_missing_cuda_fails_at_construction_and_pickles_fall_back_to_host():
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    with pytest.raises(ValueError, match="CUDA is not available"):
        CompressedReplayBuffer(10, space, ACT, "cpu", buffer_device="cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        CompressedRolloutBuffer(8, space, ACT, "cpu", buffer_device="cuda:0")
    ref, _, dev = replay_trio("replay", 20, space, n_envs=1, chunk_len=4)
    for tr in stacked(30, 1, False, 5, 0):
        ref.add(*tr)
        dev.add(*tr)
    state = dev.__getstate__()
    for fs_state in state["_stores"].values():
        fs_state["config"]["device"] = "cuda:0"  # as a pickle made on a CUDA machine holds it
    moved = CompressedReplayBuffer.__new__(CompressedReplayBuffer)
    with pytest.warns(RuntimeWarning, match="not available here"):
        moved.__setstate__(state)
    assert moved.buffer_device is None and not isinstance(moved.frame_stores[None].frames, DeviceArray)
    for seed in range(3):
        assert_samples_equal(ref, moved, 8, seed)


def test_vecnormalize_sample_reads_back_and_equals_sb3():
    venv = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), norm_obs=True, norm_reward=True)
    venv.reset()
    for _ in range(30):
        venv.step(np.array([venv.action_space.sample()]))
    space, act = venv.observation_space, venv.action_space
    ref = ReplayBuffer(40, space, act, "cpu")
    dev = CompressedReplayBuffer(40, space, act, "cpu", buffer_device="cpu")
    for tr in random_transitions(space, act, 50, 1):
        ref.add(*tr)
        dev.add(*tr)
    for seed in range(3):
        assert_samples_equal(ref, dev, 16, seed, env=venv)


# -- Ctrl-C inside add and sample (device variants of tests/test_interrupts.py's cases) ---------------------------
def run_device_add_cases(kind: str, k: int, budget: int | None) -> int:
    """A KeyboardInterrupt at events of one add (all, or ``budget`` sampled ones): every other row
    stays equal to SB3's, and after the next adds every row and sample does."""
    space = DICT if kind == "dict" else spaces.Box(0, 255, (4, 6, 5), np.uint8)
    trs = list(random_transitions(space, ACT, k + 6, 1, ep_len=5, seed=k)) if kind == "dict" else \
        list(stacked(k + 6, 1, False, 5, k))

    def prepared():
        ref_cls, cls = (DictReplayBuffer, CompressedDictReplayBuffer) if kind == "dict" else \
            (ReplayBuffer, CompressedReplayBuffer)
        ref = ref_cls(16, space, ACT, "cpu")
        ours = cls(16, space, ACT, "cpu", buffer_device="cpu", chunk_len=4, heap_bytes=1 << 16)
        for tr in trs[:k]:
            ref.add(*tr)
            ours.add(*tr)
        return ref, ours

    ref, ours = prepared()
    total = count_events(lambda: ours.add(*trs[k]))
    rng = np.random.default_rng(k)
    cases = list(range(1, total + 1)) if budget is None else \
        sorted({1, total, *rng.choice(np.arange(1, total + 1), min(total, budget), replace=False).tolist()})
    fired = 0
    for at in cases:
        ref, ours = prepared()
        before = (ours.pos, ours.full)
        with warnings.catch_warnings():
            # an interrupt landing where Python cannot raise it (a generator being finalised after
            # all() stopped early) is printed and ignored: the add then completes, and must still match
            warnings.simplefilter("ignore")
            fired += interrupted(lambda ours=ours: ours.add(*trs[k]), at)
        if (ours.pos, ours.full) != before:  # accepted
            ref.add(*trs[k])
        for tr in trs[k + 1:]:  # keeps training: the torn row is rewritten
            ref.add(*tr)
            ours.add(*tr)
        assert_views_equal(ref, ours)
        for seed in (1, 2):
            assert_samples_equal(ref, ours, 8, seed, where=f"interrupted at event {at}")
        ours.close()
    assert fired >= 0.9 * len(cases)  # nearly every position did interrupt the add
    return len(cases)


#: which add of a 16-row buffer: the one deciding the layout, a ring growth, the wrap, later releases
DEVICE_ADDS = [("replay", 1), ("replay", 6), ("replay", 16), ("replay", 23), ("dict", 6), ("dict", 17)]


@pytest.mark.parametrize(("kind", "k"), DEVICE_ADDS)
def test_an_interrupt_anywhere_in_add_leaves_a_device_buffer_intact(kind, k):
    assert run_device_add_cases(kind, k, budget=24) >= 10


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "k"), DEVICE_ADDS)
def test_every_interrupt_point_of_a_device_add(kind, k):
    run_device_add_cases(kind, k, budget=None)


def test_an_interrupted_device_sample_leaves_the_buffer_working():
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    ref = ReplayBuffer(32, space, ACT, "cpu", n_envs=2)
    ours = CompressedReplayBuffer(32, space, ACT, "cpu", n_envs=2, buffer_device="cpu", chunk_len=4,
                                  heap_bytes=1 << 16)
    trs = list(stacked(60, 2, False, 5, 3))
    for tr in trs[:40]:  # wrapped: some frames spilled, some chunks open
        ref.add(*tr)
        ours.add(*tr)
    def sample() -> None:
        np.random.seed(0)  # noqa: NPY002 - the same batch (and events) every time
        ours.sample(16)

    sample()  # warm: the staging buffer and the read inbox are sized for this batch
    total = count_events(sample)
    for at in sorted(set(np.linspace(1, total, 30).astype(int).tolist())):
        assert interrupted(sample, at)
        assert_samples_equal(ref, ours, 16, at, where=f"after an interrupt at event {at}")
    for tr in trs[40:]:
        ref.add(*tr)
        ours.add(*tr)
    assert_views_equal(ref, ours)


# -- CUDA (skipped without it) -----------------------------------------------------------------------------------
@cuda
@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_samples_equal_sb3_and_read_nothing_back(channels_last):
    ref, host, _ = replay_trio("replay", 64, spaces.Box(0, 255, (6, 5, 4) if channels_last else (4, 6, 5), np.uint8),
                               n_envs=2, chunk_len=4)
    dev = CompressedReplayBuffer(64, ref.observation_space, ACT, "cuda", n_envs=2, buffer_device="cuda",
                                 chunk_len=4, heap_bytes=1 << 16)
    for tr in stacked(120, 2, channels_last, 6, 0):
        for b in (ref, host, dev):
            b.add(*tr)
    for seed in range(4):
        np.random.seed(seed)  # noqa: NPY002
        a = ref.sample(32)
        np.random.seed(seed)  # noqa: NPY002
        with NoHostReads("cuda"):
            b = dev.sample(32)
        assert b.observations.device.type == "cuda"
        for f in a._fields:
            want, got = getattr(a, f), getattr(b, f)
            if want is None:  # SB3's fields a plain replay sample leaves None (discounts)
                assert got is None, f
                continue
            assert th.equal(want, got.cpu()), f
    store = dev.frame_stores[None]
    ids = np.arange(32)
    store.gather([(0, ids)], np.zeros(32, np.int64))
    th.cuda.set_sync_debug_mode("error")  # the frame read itself: no synchronising call at all
    try:
        store.gather([(0, ids), (1, ids)], np.zeros(32, np.int64))
    finally:
        th.cuda.set_sync_debug_mode("default")


def _same_samples(ref, ours, seeds=4, batch=64):
    """``ours.sample`` equals SB3's ``ref.sample``, bit for bit, for the same seeds."""
    for seed in range(seeds):
        assert_samples_equal(ref, ours, batch, seed)


def _fill(bufs, transitions):
    for tr in transitions:
        for b in bufs:
            b.add(*tr)


@cuda
@pytest.mark.parametrize("heap_bytes", [None, 2 << 20, 1 << 14])
def test_cuda_buffer_equals_sb3_with_segments_spilled_to_host_ram(heap_bytes):
    """(4, 84, 84) frames of noise, 2 envs: with no cap, with a cap that spills segments to host RAM
    (read back with the batch that needs them), and with no device room at all (host RAM only)."""
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    ref = ReplayBuffer(600, space, ACT, "cpu", n_envs=2)
    ours = CompressedReplayBuffer(600, space, ACT, "cuda", n_envs=2, buffer_device="cuda", heap_bytes=heap_bytes)
    _fill([ref, ours], stacked(1500, 2, False, 11, 0, frame=(1, 84, 84)))
    heap = ours.frame_stores[None].frames._heap
    assert (heap.spills > 0) == (heap_bytes == 2 << 20)
    _same_samples(ref, ours)


@cuda
def test_cuda_n_step_dict_saved_loaded_and_pickled_equal_sb3(tmp_path):
    from stable_baselines3.common.buffers import NStepReplayBuffer

    from sb3_integration import CompressedNStepReplayBuffer

    space = spaces.Box(0, 255, (4, 12, 10), np.uint8)
    ref = NStepReplayBuffer(300, space, ACT, "cpu", n_envs=2, n_steps=3, gamma=0.9)
    ours = CompressedNStepReplayBuffer(300, space, ACT, "cuda", n_envs=2, n_steps=3, gamma=0.9, buffer_device="cuda")
    _fill([ref, ours], stacked(500, 2, False, 11, 0, frame=(1, 12, 10)))
    _same_samples(ref, ours)
    dspace = spaces.Dict({"img": space, "vec": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
    dref = DictReplayBuffer(300, dspace, ACT, "cpu", n_envs=2)
    dours = CompressedDictReplayBuffer(300, dspace, ACT, "cuda", n_envs=2, buffer_device="cuda")
    _fill([dref, dours], random_transitions(dspace, ACT, 500, 2, seed=1))
    _same_samples(dref, dours)
    ref = ReplayBuffer(300, space, ACT, "cpu", n_envs=2)
    ours = CompressedReplayBuffer(300, space, ACT, "cuda", n_envs=2, buffer_device="cuda")
    _fill([ref, ours], stacked(450, 2, False, 11, 3, frame=(1, 12, 10)))
    ours.save(tmp_path / "b.h5")
    back = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cuda", buffer_device="cuda")
    assert back.sample(4).observations.is_cuda
    _same_samples(ref, back)
    _same_samples(ref, pickle.loads(pickle.dumps(ours)))
