"""Every buffer with ``buffer_device``: samples are device tensors equal to SB3's and the host path's.

Each case drives three buffers side by side with the same transitions: SB3's own, ours
with frames in host memory, and ours with ``buffer_device="cpu"`` (the frames in a
DeviceArray, decoded and stacked by torch ops). Every sample of the device buffer must
be bit-identical to both for the same seed, and its observation tensors must come
straight from the device read (no numpy in between). Property tests vary chunk
lengths, episode resets (zero padding), buffer resets, wrap-around, n_envs, channel-last
stacks and Dict spaces. Then state in and out: pickles and HDF5 files, into and out of
the device store.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from conftest import assert_same, frame_stack_stream, random_transitions
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3 import HerReplayBuffer
from stable_baselines3.common.buffers import (
    DictReplayBuffer,
    DictRolloutBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
    RolloutBuffer,
)
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv

from chunkstore.device import DeviceArray
from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedDictRolloutBuffer,
    CompressedHerReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
    GpuReplayBuffer,
)

REPLAY = {"replay": (ReplayBuffer, CompressedReplayBuffer), "nstep": (NStepReplayBuffer, CompressedNStepReplayBuffer),
          "dict": (DictReplayBuffer, CompressedDictReplayBuffer)}
ACT = spaces.Discrete(3)
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def replay_trio(kind: str, size: int, space: spaces.Space, **kw):
    """SB3's buffer, ours on the host, ours with frames on the cpu device."""
    ours_kw = {k: kw.pop(k) for k in ("chunk_len", "heap_bytes") if k in kw}
    ref_cls, our_cls = REPLAY[kind]
    host_kw = {k: v for k, v in ours_kw.items() if k != "heap_bytes"}
    return (ref_cls(size, space, ACT, "cpu", **kw), our_cls(size, space, ACT, "cpu", **kw, **host_kw),
            our_cls(size, space, ACT, "cpu", buffer_device="cpu", **kw, **ours_kw))


def stacked(T: int, n_envs: int, channels_last: bool, ep_len: int, seed: int, frame: tuple[int, ...] | None = None):
    """Frame-stacked transitions (zero padding after episode starts), with dones and truncations;
    frames of ``frame`` shape (default 6 x 5, one channel first or last)."""
    rng = np.random.default_rng(seed)
    frame = frame or ((6, 5, 1) if channels_last else (1, 6, 5))
    for t, (obs, nxt) in enumerate(frame_stack_stream(T, n_envs, frame=frame, channels_last=channels_last,
                                                      ep_len=ep_len, seed=seed)):
        done = (t + 1 + np.arange(n_envs)) % ep_len == 0
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        yield obs, nxt, rng.integers(0, 3, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32), done, infos


def _bits(x) -> tuple | None:
    if x is None:
        return None
    if isinstance(x, dict):
        return tuple((k, _bits(v)) for k, v in sorted(x.items()))
    return (str(x.dtype), tuple(x.shape), x.cpu().numpy().tobytes())


def assert_samples_equal(ref, ours, batch: int, seed: int, where: str = "", env=None) -> None:
    """Same seed, same samples, field by field and bit for bit (NaN payloads, -0.0), dtypes included."""
    np.random.seed(seed)  # noqa: NPY002
    a = ref.sample(batch, env=env)
    np.random.seed(seed)  # noqa: NPY002
    b = ours.sample(batch, env=env)
    assert type(a) is type(b)
    for field in a._fields:
        assert _bits(getattr(a, field)) == _bits(getattr(b, field)), f"{where} {field}"


def assert_device_sample(ours, batch: int, seed: int) -> None:
    """A device buffer's sample: observation tensors on the buffer's device, straight from the device read."""
    np.random.seed(seed)  # noqa: NPY002
    s = ours.sample(batch)
    obs = s.observations if isinstance(s.observations, dict) else {None: s.observations}
    for key, x in obs.items():
        if key not in ("achieved_goal", "desired_goal"):
            assert isinstance(x, th.Tensor) and x.device == ours.device, key


def drive3(ref, host, dev, transitions, *, every: int = 5, batch: int = 16, reset_at: int | None = None) -> None:
    for t, tr in enumerate(transitions):
        if t == reset_at:
            for b in (ref, host, dev):
                b.reset()
        for b in (ref, host, dev):
            b.add(*tr)
        if t % every == every - 1:
            for seed in (t, t + 1000):
                assert_samples_equal(ref, dev, batch, seed, where=f"device vs SB3, t={t}")
                assert_samples_equal(host, dev, batch, seed, where=f"device vs host, t={t}")
            assert_device_sample(dev, batch, t)


def assert_views_equal(ref, dev) -> None:
    """Reads outside a sample are numpy arrays equal to SB3's (copies from the device), on every live row."""
    live = ref.buffer_size if ref.full else ref.pos  # after reset() SB3 keeps stale rows it never reads
    names = ("observations", "next_observations") if hasattr(ref, "next_observations") else ("observations",)
    for name in names:
        a, b = getattr(ref, name), getattr(dev, name)
        for key in (a if isinstance(a, dict) else [None]):
            x = (a if key is None else a[key])[:live]
            y = b if key is None else b[key]
            got = np.asarray(y)[:live]
            assert isinstance(y[0], np.ndarray) and got.dtype == x.dtype and got.tobytes() == x.tobytes(), \
                f"{name}[{key}]"


# -- replay and n-step: frame stacks ---------------------------------------------------------------------
@SETTINGS
@given(kind=st.sampled_from(["replay", "nstep"]), chunk_len=st.sampled_from([1, 2, 3, 4, 8]),
       n_envs=st.integers(1, 3), rows=st.integers(3, 14), channels_last=st.booleans(),
       ep_len=st.integers(2, 9), T=st.integers(1, 45), reset_at=st.none() | st.integers(0, 44),
       seed=st.integers(0, 99))
def test_frame_stacks_equal_sb3_and_host(kind, chunk_len, n_envs, rows, channels_last, ep_len, T, reset_at, seed):
    shape = (6, 5, 4) if channels_last else (4, 6, 5)
    kw = {"n_steps": 3, "gamma": 0.9} if kind == "nstep" else {}
    ref, host, dev = replay_trio(kind, rows * n_envs, spaces.Box(0, 255, shape, np.uint8), n_envs=n_envs,
                                 chunk_len=chunk_len, **kw)
    drive3(ref, host, dev, stacked(T, n_envs, channels_last, ep_len, seed), every=4, reset_at=reset_at)
    if dev.size():
        assert_samples_equal(ref, dev, 9, seed)
        assert_views_equal(ref, dev)
    for b in (host, dev):
        b.close()


@pytest.mark.parametrize("n_envs", [1, 4])
def test_optimize_memory_usage_equal_sb3(n_envs):
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    ref, host, dev = replay_trio("replay", 12 * n_envs, space, n_envs=n_envs, optimize_memory_usage=True,
                                 handle_timeout_termination=False, chunk_len=4)
    drive3(ref, host, dev, stacked(40, n_envs, False, 6, 0))


# -- every dtype, bit for bit (float bit patterns: -0.0, NaN payloads) -----------------------------------
DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.float16, np.float32,
          np.float64, bool]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_bit_exact(dtype):
    dt = np.dtype(dtype)
    space = spaces.Box(0, 1 if dt.kind == "b" else 100, (3, 4), dt)  # SB3 stores any values of the dtype
    ref, host, dev = replay_trio("replay", 20, space, n_envs=2, chunk_len=4)
    rng = np.random.default_rng(0)

    def obs():
        x = rng.integers(0, 256, (2, 3, 4 * dt.itemsize), dtype=np.uint8).view(dt) if dt.kind != "b" else \
            rng.random((2, 3, 4)) < 0.5
        if dt.kind == "f":  # special values, kept by their bits
            x.reshape(-1)[:3] = np.array([-0.0, np.inf, np.nan], dt)
        return x

    o = obs()
    trs = []
    for t in range(30):
        n = obs()
        trs.append((o, n, rng.integers(0, 3, (2, 1)), rng.standard_normal(2).astype(np.float32),
                    np.array([t % 7 == 6, False]), [{}, {}]))
        o = n
    drive3(ref, host, dev, trs)  # compares bit patterns: NaN payloads and -0.0 survive
    assert_views_equal(ref, dev)


# -- Dict spaces ------------------------------------------------------------------------------------------
DICT = spaces.Dict({"img": spaces.Box(0, 255, (4, 6, 5), np.uint8), "vec": spaces.Box(-1, 1, (3,), np.float32),
                    "id": spaces.Discrete(5), "bits": spaces.MultiBinary(4)})


@SETTINGS
@given(n_envs=st.integers(1, 3), rows=st.integers(2, 10), chunk_len=st.sampled_from([1, 2, 4]),
       T=st.integers(1, 30), seed=st.integers(0, 99))
def test_dict_replay_equal_sb3_and_host(n_envs, rows, chunk_len, T, seed):
    ref, host, dev = replay_trio("dict", rows * n_envs, DICT, n_envs=n_envs, chunk_len=chunk_len)
    drive3(ref, host, dev, random_transitions(DICT, ACT, T, n_envs, ep_len=4, seed=seed), every=3)
    assert {fs.frames.device.type for fs in dev.frame_stores.values() if fs.frames is not None} <= {"cpu"}
    assert all(isinstance(fs.frames, DeviceArray) for fs in dev.frame_stores.values() if fs.frames is not None)
    if dev.size():
        assert_views_equal(ref, dev)


# -- HER: the observation key on the device, the goals on the host ---------------------------------------
def test_her_equal_sb3_with_observations_on_the_device():
    venv = DummyVecEnv([lambda: BitFlippingEnv(n_bits=5, image_obs_space=True) for _ in range(2)])
    venv.seed(0)
    space = venv.observation_space
    kw = {"n_sampled_goal": 3, "goal_selection_strategy": "future"}
    ref = HerReplayBuffer(40, space, ACT, venv, "cpu", n_envs=2, **kw)
    host = CompressedHerReplayBuffer(40, space, ACT, venv, "cpu", n_envs=2, chunk_len=4, **kw)
    dev = CompressedHerReplayBuffer(40, space, ACT, venv, "cpu", n_envs=2, chunk_len=4, buffer_device="cpu", **kw)
    stores = dev.frame_stores
    assert stores["observation"].device == th.device("cpu")
    assert stores["achieved_goal"].device is None and stores["desired_goal"].device is None
    rng = np.random.default_rng(0)
    obs = venv.reset()
    for t in range(70):  # 40 rows: wraps and overwrites episodes
        actions = rng.integers(0, 5, 2)
        new_obs, rewards, dones, infos = venv.step(actions)
        nxt = {k: v.copy() for k, v in new_obs.items()}
        for e in np.flatnonzero(dones):
            for k in nxt:
                nxt[k][e] = infos[e]["terminal_observation"][k]
        for b in (ref, host, dev):
            b.add(obs, nxt, actions, rewards, dones, infos)
        obs = new_obs
        if t >= 6 and t % 5 == 0:
            assert_samples_equal(ref, dev, 24, seed=t, where=f"t={t}")
            assert_samples_equal(host, dev, 24, seed=t, where=f"t={t}")
            assert_device_sample(dev, 24, t)
    assert isinstance(stores["observation"].frames, DeviceArray)


# -- rollouts ---------------------------------------------------------------------------------------------
def rollout_steps(space, n_envs: int, T: int, seed: int, channels_last: bool = False):
    rng = np.random.default_rng(seed)
    if isinstance(space, spaces.Dict):
        obs_iter = (o for o, *_ in random_transitions(space, ACT, T, n_envs, ep_len=5, seed=seed))
    else:
        frame = (6, 5, 1) if channels_last else (1, 6, 5)
        obs_iter = (o for o, _ in frame_stack_stream(T, n_envs, frame=frame, channels_last=channels_last, seed=seed))
    for obs in obs_iter:
        yield (obs, rng.integers(0, 3, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32),
               (rng.random(n_envs) < 0.2).astype(np.float32), th.randn(n_envs), th.randn(n_envs))


def assert_rollouts_equal(bufs, batch: int, seed: int) -> None:
    outs = []
    for b in bufs:
        np.random.seed(seed)  # noqa: NPY002
        outs.append(list(b.get(batch)))
    for batches in zip(*outs, strict=True):
        for other in batches[1:]:
            for f in batches[0]._fields:
                assert_same(getattr(batches[0], f), getattr(other, f), f)


@SETTINGS
@given(n_envs=st.integers(1, 4), steps=st.integers(1, 12), chunk_len=st.sampled_from([1, 3, 4, 16]),
       channels_last=st.booleans(), dict_space=st.booleans(), seed=st.integers(0, 99))
def test_rollouts_equal_sb3_and_host(n_envs, steps, chunk_len, channels_last, dict_space, seed):
    space = DICT if dict_space else spaces.Box(0, 255, (6, 5, 4) if channels_last else (4, 6, 5), np.uint8)
    ref_cls, our_cls = (DictRolloutBuffer, CompressedDictRolloutBuffer) if dict_space else \
        (RolloutBuffer, CompressedRolloutBuffer)
    ref = ref_cls(steps, space, ACT, "cpu", n_envs=n_envs)
    host = our_cls(steps, space, ACT, "cpu", n_envs=n_envs, chunk_len=chunk_len)
    dev = our_cls(steps, space, ACT, "cpu", n_envs=n_envs, chunk_len=chunk_len, buffer_device="cpu")
    for rollout in range(2):  # reset() between rollouts reuses the device store
        for b in (ref, host, dev):
            b.reset()
        for step in rollout_steps(space, n_envs, steps, seed + rollout, channels_last):
            for b in (ref, host, dev):
                b.add(*step)
        for b in (ref, host, dev):
            b.compute_returns_and_advantage(th.zeros(n_envs), np.zeros(n_envs))
        assert_rollouts_equal([ref, host, dev], max(1, steps * n_envs // 3), seed)
        np.random.seed(seed)  # noqa: NPY002
        first = next(dev.get(4))
        obs = first.observations if isinstance(first.observations, dict) else {None: first.observations}
        assert all(isinstance(x, th.Tensor) and x.device == dev.device for x in obs.values())
    for b in (host, dev):
        b.close()


# -- state in and out: pickles and files -------------------------------------------------------------------
def filled(buffer_device, *, n_envs: int = 2, T: int = 50, **kw):
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    ref = ReplayBuffer(16 * n_envs, space, ACT, "cpu", n_envs=n_envs)
    ours = CompressedReplayBuffer(16 * n_envs, space, ACT, "cpu", n_envs=n_envs, chunk_len=4,
                                  buffer_device=buffer_device, **kw)
    for tr in stacked(T, n_envs, False, 5, 0):  # wraps: released chunks, open chunks at the end
        ref.add(*tr)
        ours.add(*tr)
    return ref, ours


def assert_same_buffer(ref, ours) -> None:
    for seed in range(4):
        assert_samples_equal(ref, ours, 12, seed)
    assert_views_equal(ref, ours)


@pytest.mark.parametrize("T", [3, 50])  # before and after the wrap (and the ring's growth)
def test_pickle_round_trip_stays_on_the_device(T):
    ref, dev = filled("cpu", T=T)
    back = pickle.loads(pickle.dumps(dev))
    assert back.buffer_device == th.device("cpu")
    assert all(isinstance(fs.frames, DeviceArray) for fs in back.frame_stores.values())
    assert_same_buffer(ref, back)
    for tr in stacked(20, 2, False, 5, 7):  # keeps training
        ref.add(*tr)
        back.add(*tr)
    assert_same_buffer(ref, back)


def test_pickled_frames_are_host_encoded_chunks():
    _, dev = filled("cpu")
    data = pickle.dumps(dev)
    assert len(data) < dev.device_nbytes / 10  # encoded chunks, not the device arena (segments, inbox)
    state = dev.frame_stores[None].__getstate__()
    frames = state["state"]["frames"]  # a host ChunkedArray's state: its codec's chunks
    assert isinstance(frames, dict) and frames["blobs"] and state["config"]["device"] == "cpu"
    assert str(frames["config"]["codec"].name).startswith("zstd")


@pytest.mark.parametrize(("save_on", "load_on"), [("cpu", "cpu"), ("cpu", None), (None, "cpu")])
def test_hdf5_round_trips_into_and_out_of_the_device_store(tmp_path, save_on, load_on):
    ref, ours = filled(save_on)
    path = tmp_path / "buf.h5"
    ours.save(path)
    loaded = CompressedReplayBuffer.load(path, device="cpu", buffer_device=load_on)
    on_device = {isinstance(fs.frames, DeviceArray) for fs in loaded.frame_stores.values()}
    assert on_device == {load_on is not None}
    assert loaded.buffer_device == (None if load_on is None else th.device("cpu"))
    assert_same_buffer(ref, loaded)
    for tr in stacked(20, 2, False, 5, 9):
        ref.add(*tr)
        loaded.add(*tr)
    assert_same_buffer(ref, loaded)
    loaded.close()


def test_gpu_replay_buffer_loads_back_onto_its_device(tmp_path):
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    ref = ReplayBuffer(32, space, ACT, "cpu", n_envs=2)
    gpu = GpuReplayBuffer(32, space, ACT, "cpu", n_envs=2, heap_bytes=1 << 20, chunk_len=4)
    for tr in stacked(30, 2, False, 5, 1):
        ref.add(*tr)
        gpu.add(*tr)
    gpu.save(tmp_path / "g.h5")
    loaded = GpuReplayBuffer.load(tmp_path / "g.h5", device="cpu")
    assert loaded.heap_bytes == 1 << 20 and loaded.buffer_device == th.device("cpu")
    assert all(isinstance(fs.frames, DeviceArray) for fs in loaded.frame_stores.values())
    assert_same_buffer(ref, loaded)


def test_dict_and_her_files_load_onto_the_device(tmp_path):
    ref, host, dev = replay_trio("dict", 20, DICT, n_envs=2, chunk_len=2)
    for tr in random_transitions(DICT, ACT, 25, 2, ep_len=4, seed=3):
        for b in (ref, host, dev):
            b.add(*tr)
    host.save(tmp_path / "d.h5")
    loaded = CompressedDictReplayBuffer.load(tmp_path / "d.h5", device="cpu", buffer_device="cpu")
    for seed in range(3):
        assert_samples_equal(ref, loaded, 10, seed)
    assert all(isinstance(fs.frames, DeviceArray) for fs in loaded.frame_stores.values())


def test_close_gives_device_memory_and_budget_back():
    _, dev = filled("cpu", heap_bytes=1 << 20)
    arrays = [fs.frames for fs in dev.frame_stores.values()]
    budget = arrays[0]._heap.budget
    assert budget.used > 0
    dev.close()
    assert budget.used == 0 and all(a._heap.arena is None for a in arrays)
    with pytest.raises(ValueError, match="closed"):
        dev.sample(4)
