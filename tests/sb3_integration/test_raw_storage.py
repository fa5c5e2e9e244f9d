"""Observation keys stored raw (SB3's arrays) by the ``observation_storage`` rule (issue 38, item 1).

Small or incompressible keys are one preallocated numpy array per kind of stack
(:mod:`sb3_integration.engine.raw`); these tests run with the rule as shipped
(``storage_rule``) and check the choice, SB3's samples bit for bit, the bytes held,
and every way a buffer's state leaves and comes back (pickle, file, state_dict).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pickle
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer

from chunkstore import FormatError
from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
    CompressedReplayBuffer,
)
from sb3_integration.engine.frames import FrameStore
from sb3_integration.engine.raw import RAW_ITEM_BYTES, RawStore
from sb3_integration.persistence.files import saved_state_problems

pytestmark = pytest.mark.storage_rule

VEC = spaces.Box(-10, 10, (17,), np.float32)
ACT = spaces.Box(-1, 1, (6,), np.float32)
IMG = spaces.Box(0, 255, (4, 84, 84), np.uint8)
DICT = spaces.Dict({"pixels": IMG, "state": spaces.Box(-1, 1, (5,), np.float32)})


def _obs(space, rng, n):
    if isinstance(space, spaces.Dict):
        return {k: _obs(s, rng, n) for k, s in space.spaces.items()}
    if space.dtype == np.uint8:  # frames that compress (a blank screen with a few dots)
        x = np.zeros((n, *space.shape), np.uint8)
        x[:, :, rng.integers(0, 84, 8), rng.integers(0, 84, 8)] = rng.integers(1, 255, 8, dtype=np.uint8)
        return x
    return rng.standard_normal((n, *space.shape)).astype(space.dtype)


def _fill(bufs, space, n_envs, steps, seed=0):
    rng = np.random.default_rng(seed)
    obs = _obs(space, rng, n_envs)
    for _ in range(steps):
        nxt = _obs(space, rng, n_envs)
        act = rng.standard_normal((n_envs, 6)).astype(np.float32)
        rew = rng.standard_normal(n_envs).astype(np.float32)
        done = rng.random(n_envs) < 0.1
        infos = [{"TimeLimit.truncated": bool(rng.random() < 0.3)} for _ in range(n_envs)]
        for b in bufs:
            b.add(obs, nxt, act, rew, done, infos)
        obs = nxt


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a.dtype == b.dtype and a.shape == b.shape and th.equal(a, b)


def _assert_samples_equal(ref, ours, batch=64, seeds=(0, 1, 2)):
    for seed in seeds:
        np.random.seed(seed)  # noqa: NPY002 - SB3 samples from the global legacy generator
        want = ref.sample(batch)
        np.random.seed(seed)  # noqa: NPY002
        got = ours.sample(batch)
        for name in want._fields:
            assert _same(getattr(want, name), getattr(got, name)), name


# -- the rule -------------------------------------------------------------------------------
def test_vector_observations_are_raw_numpy_arrays_by_default():
    buf = CompressedReplayBuffer(100, VEC, ACT, "cpu")
    assert buf.observation_storage == "raw"
    assert type(buf.observations) is np.ndarray and type(buf.next_observations) is np.ndarray
    assert isinstance(buf.frame_stores[None], RawStore)


def test_a_dict_buffer_compresses_the_image_only():
    buf = CompressedDictReplayBuffer(100, DICT, ACT, "cpu")
    assert buf.observation_storage == {"pixels": "auto", "state": "raw"}  # the image is measured on the first add
    _fill([buf], DICT, 1, 3)
    assert buf.observation_storage == {"pixels": "compressed", "state": "raw"}
    assert isinstance(buf.frame_stores["pixels"], FrameStore)
    assert type(buf.observations["state"]) is np.ndarray


def test_a_large_key_that_does_not_shrink_is_raw_after_its_first_add():
    noise = spaces.Box(-1, 1, (40, 40), np.float32)  # 6.4 KB of float noise: above RAW_ITEM_BYTES
    assert RAW_ITEM_BYTES < 40 * 40 * 4
    buf = CompressedReplayBuffer(50, noise, ACT, "cpu")
    assert buf.observation_storage == "auto"
    ref = ReplayBuffer(50, noise, ACT, "cpu")
    _fill([ref, buf], noise, 1, 60)
    assert buf.observation_storage == "raw"
    _assert_samples_equal(ref, buf)


def test_the_choice_is_overridable_per_key():
    buf = CompressedReplayBuffer(100, VEC, ACT, "cpu", observation_storage="compressed")
    assert buf.observation_storage == "compressed" and isinstance(buf.frame_stores[None], FrameStore)
    buf = CompressedDictReplayBuffer(100, DICT, ACT, "cpu", observation_storage={"pixels": "raw"})
    assert buf.observation_storage == {"pixels": "raw", "state": "raw"}
    buf = CompressedDictReplayBuffer(100, DICT, ACT, "cpu", observation_storage={"state": "compressed"})
    assert buf.observation_storage == {"pixels": "auto", "state": "compressed"}


@pytest.mark.parametrize(("space", "value", "error", "match"), [
    (VEC, "zip", ValueError, "must be 'auto', 'raw' or 'compressed'"),
    (VEC, {"a": "raw"}, TypeError, "a mapping names Dict keys"),
    (VEC, 3, TypeError, "observation_storage must be"),
    (DICT, {"nope": "raw"}, ValueError, "not in the observation space"),
    (DICT, {"state": "fast"}, ValueError, r"observation_storage\['state'\] must be"),
])
def test_bad_observation_storage_is_refused_at_the_call(space, value, error, match):
    cls = CompressedDictReplayBuffer if isinstance(space, spaces.Dict) else CompressedReplayBuffer
    with pytest.raises(error, match=match):
        cls(100, space, ACT, "cpu", observation_storage=value)


def test_with_buffer_device_auto_keeps_the_frames_on_the_device():
    buf = CompressedReplayBuffer(100, VEC, ACT, "cpu", buffer_device="cpu")
    assert buf.observation_storage == "compressed"
    raw = CompressedReplayBuffer(100, VEC, ACT, "cpu", buffer_device="cpu", observation_storage="raw")
    ref = ReplayBuffer(100, VEC, ACT, "cpu")
    _fill([ref, raw], VEC, 1, 130)
    _assert_samples_equal(ref, raw)


# -- SB3's samples, bit for bit -----------------------------------------------------------------
@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize(("opt", "timeouts"), [(False, True), (False, False), (True, False)])
def test_raw_samples_equal_sb3(n_envs, opt, timeouts):
    kw = {"n_envs": n_envs, "optimize_memory_usage": opt, "handle_timeout_termination": timeouts}
    ref, ours = ReplayBuffer(40 * n_envs, VEC, ACT, "cpu", **kw), CompressedReplayBuffer(40 * n_envs, VEC, ACT,
                                                                                         "cpu", **kw)
    _fill([ref, ours], VEC, n_envs, 25)  # before the wrap
    _assert_samples_equal(ref, ours)
    _fill([ref, ours], VEC, n_envs, 70, seed=1)  # after it
    _assert_samples_equal(ref, ours)
    np.testing.assert_array_equal(ours.observations, ref.observations)
    if not opt:
        np.testing.assert_array_equal(ours.next_observations, ref.next_observations)


def test_mixed_dict_and_nstep_samples_equal_sb3():
    ref, ours = DictReplayBuffer(30, DICT, ACT, "cpu", n_envs=2), CompressedDictReplayBuffer(30, DICT, ACT, "cpu",
                                                                                             n_envs=2)
    _fill([ref, ours], DICT, 2, 40)
    _assert_samples_equal(ref, ours)
    ref = NStepReplayBuffer(50, VEC, ACT, "cpu", n_envs=2, n_steps=3, gamma=0.9)
    ours = CompressedNStepReplayBuffer(50, VEC, ACT, "cpu", n_envs=2, n_steps=3, gamma=0.9)
    _fill([ref, ours], VEC, 2, 40)
    _assert_samples_equal(ref, ours)


def test_prioritized_buffer_reads_raw_keys_as_sb3():
    buf = CompressedPrioritizedReplayBuffer(64, VEC, ACT, "cpu")
    ref = ReplayBuffer(64, VEC, ACT, "cpu")
    _fill([buf, ref], VEC, 1, 80)
    s = buf.sample(16)
    rows = s.indices.numpy() if isinstance(s.indices, th.Tensor) else np.asarray(s.indices)
    np.testing.assert_array_equal(s.observations.numpy(), ref.observations[rows, 0])
    np.testing.assert_array_equal(s.next_observations.numpy(), ref.next_observations[rows, 0])
    buf.update_priorities(s.indices, np.ones(16))


# -- bytes ----------------------------------------------------------------------------------------
def test_an_all_raw_buffer_holds_what_sb3_holds():
    def held(make):
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        buf = make()
        _fill([buf], VEC, 1, 200)
        buf.sample(32)
        n = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return n, buf

    warm = CompressedReplayBuffer(10, VEC, ACT, "cpu")  # what a process loads once, before counting
    _fill([warm], VEC, 1, 3)
    warm.sample(2)
    sb3, _ = held(lambda: ReplayBuffer(20_000, VEC, ACT, "cpu"))
    ours, buf = held(lambda: CompressedReplayBuffer(20_000, VEC, ACT, "cpu"))
    assert ours <= sb3 * 1.05, (ours, sb3)
    assert buf.nbytes_held == 20_000 * (2 * 17 * 4 + 6 * 4 + 3 * 4)  # obs, next obs, actions, rewards/dones/timeouts


# -- state in and out -------------------------------------------------------------------------------
def test_pickle_keeps_raw_keys_and_samples():
    ref, ours = DictReplayBuffer(30, DICT, ACT, "cpu"), CompressedDictReplayBuffer(30, DICT, ACT, "cpu")
    _fill([ref, ours], DICT, 1, 40)
    back = pickle.loads(pickle.dumps(ours))
    assert back.observation_storage == {"pixels": "compressed", "state": "raw"}
    _assert_samples_equal(ref, back)
    _fill([ref, back], DICT, 1, 5, seed=3)  # and it goes on being written
    _assert_samples_equal(ref, back)


@pytest.mark.parametrize("opt", [False, True])
def test_file_round_trip_keeps_raw_keys(tmp_path, opt):
    kw = {"optimize_memory_usage": opt, "handle_timeout_termination": not opt}
    ref, ours = ReplayBuffer(60, VEC, ACT, "cpu", **kw), CompressedReplayBuffer(60, VEC, ACT, "cpu", **kw)
    _fill([ref, ours], VEC, 1, 75)
    ours.save(tmp_path / "b.h5")
    assert saved_state_problems(tmp_path / "b.h5") == []
    back = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cpu")
    assert back.observation_storage == "raw"
    _assert_samples_equal(ref, back)
    import h5py

    with h5py.File(tmp_path / "b.h5") as f:  # plain h5py reads a raw key's observations
        np.testing.assert_array_equal(f["observations/raw"][0], ref.observations)


def test_file_versions(tmp_path):
    from chunkstore import hdf5

    raw = CompressedReplayBuffer(20, VEC, ACT, "cpu")
    comp = CompressedReplayBuffer(20, VEC, ACT, "cpu", observation_storage="compressed")
    _fill([raw, comp], VEC, 1, 10)
    raw.save(tmp_path / "raw.h5")
    comp.save(tmp_path / "comp.h5")
    with hdf5.load(tmp_path / "raw.h5") as a, hdf5.load(tmp_path / "comp.h5") as b:
        assert a.attrs["buffer_format_version"] == 3  # older readers refuse it by its version
        assert b.attrs["buffer_format_version"] == 2  # a file without raw keys reads with older versions
    back = CompressedReplayBuffer.load(tmp_path / "comp.h5", device="cpu")
    assert back.observation_storage == "compressed"  # the state's kind, not the rule's


@pytest.mark.parametrize(("field", "value", "match"), [
    ("obs_shape", [18], "observations/raw is"),
    ("dtype", "<f8", "observations/raw is"),
    ("follow", "yes", "'follow' is"),
    ("n_rows", 7, "n_rows 7 differs"),
])
def test_a_damaged_raw_key_is_a_format_error(tmp_path, reseal, field, value, match):
    import h5py

    buf = CompressedReplayBuffer(20, VEC, ACT, "cpu")
    _fill([buf], VEC, 1, 5)
    path = tmp_path / "b.h5"
    buf.save(path)
    with h5py.File(path, "r+") as f:
        attrs = json.loads(f.attrs["attrs"])
        attrs["stores"][0][1][field] = value
        f.attrs["attrs"] = json.dumps(attrs)
    reseal(path)
    with pytest.raises(FormatError, match=match):
        CompressedReplayBuffer.load(path, device="cpu")
    assert saved_state_problems(path)


def test_state_dict_round_trip():
    ref, ours = DictReplayBuffer(30, DICT, ACT, "cpu"), CompressedDictReplayBuffer(30, DICT, ACT, "cpu")
    _fill([ref, ours], DICT, 1, 35)
    with ours.state_dict() as state:
        back = CompressedDictReplayBuffer.from_state_dict(state, device="cpu")
    _fill([ref, ours], DICT, 1, 3, seed=5)  # the state did not change with the buffer
    _fill([back], DICT, 1, 3, seed=5)
    _assert_samples_equal(ref, back)


# -- files from before ---------------------------------------------------------------------------------
R0_1 = Path(__file__).resolve().parent.parent / "fixtures" / "r0_1"


@pytest.mark.parametrize("name", ["dict_replay.pkl", "replay.pkl", "nstep.h5", "her.h5"])
def test_release_0_1_artifacts_load_identically_under_the_rule(name):
    spec = importlib.util.spec_from_file_location("r0_1_fixtures", R0_1 / "make_fixtures.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    want = json.loads((R0_1 / "expected.json").read_text())[name]
    buf = maker.load_fixture(R0_1 / name, want["kind"])
    assert maker.contents_digests(buf) == want["digests"]
    modes = buf.observation_storage
    assert set(modes.values() if isinstance(modes, dict) else [modes]) == {"compressed"}  # as they were saved
    assert hashlib.sha256((R0_1 / name).read_bytes()).hexdigest() == want["file_sha256"]


def test_small_arrays_stay_raw_when_every_key_is_raw():
    """DQN's default 1M buffer on a vector env: integer actions would be compressed (``small_arrays="auto"``),
    but with every observation key raw the buffer is SB3's size anyway and a sample is SB3's code alone."""
    disc = spaces.Discrete(2)
    buf = CompressedReplayBuffer(1_000_000, spaces.Box(-5, 5, (4,), np.float32), disc, "cpu")
    assert (buf.observation_storage, buf.small_arrays, buf._lean) == ("raw", "raw", True)
    img = CompressedReplayBuffer(1_000_000, spaces.Box(0, 255, (4, 84, 84), np.uint8), disc, "cpu")
    assert img.small_arrays == "compressed"


def test_close_gives_a_raw_key_back():
    buf = CompressedReplayBuffer(100, VEC, ACT, "cpu")
    _fill([buf], VEC, 1, 5)
    buf.close()
    assert buf.nbytes_stored == 0
    with pytest.raises(ValueError, match="closed"):
        buf.observations[np.array([0]), np.array([0])]


def test_raw_store_has_every_member_of_the_protocol():
    import inspect

    from sb3_integration.engine.api import FrameStoreAPI

    rs = RawStore((3,), np.float32, n_rows=4, n_envs=2)
    members = {n for n in vars(FrameStoreAPI) if not n.startswith("_")} | set(FrameStoreAPI.__annotations__)
    for name in members:
        assert hasattr(rs, name), name
        proto = getattr(FrameStoreAPI, name, None)
        if inspect.isfunction(proto):
            want = list(inspect.signature(proto).parameters)
            assert list(inspect.signature(getattr(RawStore, name)).parameters)[:len(want)] == want, name
