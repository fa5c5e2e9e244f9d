"""One options object, one name per concept: the buffers' store options take one path to the frame stores.

* Replay and rollout buffers parse their keyword store options with one function: the same
  names mean the same thing, bad values give the same errors, and a keyword a buffer does not
  take is the TypeError Python (and SB3) raise, worded the same.
* The :class:`StoreOptions` a buffer builds reaches every frame store whole and unchanged.
* ``GpuReplayBuffer``/``GpuRolloutBuffer`` take exactly what their base takes, plus
  sb3-extra-buffers' GPU arguments (their signature is derived, not written out).
* Pickles from before the rename (0.1.0 buffers, version-2 frame store states) still load.
"""

from __future__ import annotations

import inspect
import pickle
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer

from chunkstore import MemoryTier
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedDictRolloutBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
)
from sb3_integration.buffers.options import STORE_OPTIONS, parse_store_options
from sb3_integration.buffers.rollout import ROLLOUT_STORE_OPTIONS
from sb3_integration.engine.frames import OBS, FrameStore
from sb3_integration.engine.options import StoreOptions
from sb3_integration.errors import UsageTypeError
from sb3_integration.interop.compat import GpuReplayBuffer, GpuRolloutBuffer

IMG = spaces.Box(0, 255, (4, 6, 5), np.uint8)
DICT = spaces.Dict({"img": IMG, "vec": spaces.Box(-1, 1, (3,), np.float32)})
ACT = spaces.Discrete(3)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPLAYS = (CompressedReplayBuffer, CompressedNStepReplayBuffer, GpuReplayBuffer)
ROLLOUTS = (CompressedRolloutBuffer, GpuRolloutBuffer)


def build(cls: type, space=IMG, **kw):
    return cls(8, space, ACT, "cpu", **kw)


def error_of(call) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


# -- one path: same names, same checks, same errors ---------------------------------------------------
@pytest.mark.parametrize("cls", [*REPLAYS, *ROLLOUTS, CompressedDictReplayBuffer, CompressedDictRolloutBuffer])
@pytest.mark.parametrize("keyword", ["frame_dedupe", "compresion_method"])
def test_an_unknown_keyword_is_pythons_typeerror_worded_as_sb3s(cls, keyword):
    space = DICT if "Dict" in cls.__name__ else IMG
    ours = error_of(lambda: build(cls, space, **{keyword: 1}))
    base = RolloutBuffer if cls in ROLLOUTS or "Rollout" in cls.__name__ else ReplayBuffer
    sb3 = error_of(lambda: base(8, IMG, ACT, "cpu", **{keyword: 1}))
    assert isinstance(ours, TypeError) and isinstance(ours, UsageTypeError)
    assert ours.sb3_message == str(sb3).replace(base.__name__, cls.__name__)  # SB3's words, our class
    assert f"{cls.__name__}'s store options are " in ours.hint


def test_replay_and_rollout_reject_a_keyword_in_the_same_words():
    replay = error_of(lambda: build(CompressedReplayBuffer, bufer_device="cpu"))
    rollout = error_of(lambda: build(CompressedRolloutBuffer, bufer_device="cpu"))
    assert type(replay) is type(rollout)
    assert str(replay).replace("CompressedReplayBuffer", "X").split(" [")[0] == \
        str(rollout).replace("CompressedRolloutBuffer", "X").split(" [")[0]
    # a replay-only option is a keyword the rollout buffer does not take: the same error
    tier = error_of(lambda: build(CompressedRolloutBuffer, tier=MemoryTier()))
    assert str(tier).startswith("CompressedRolloutBuffer.__init__() got an unexpected keyword argument 'tier'")
    assert set(ROLLOUT_STORE_OPTIONS) < set(STORE_OPTIONS)


@pytest.mark.parametrize(("kw", "exc"), [
    ({"chunk_len": 0}, ValueError), ({"chunk_len": 2.5}, ValueError), ({"frame_dedup": "no"}, TypeError),
    ({"threads": 0}, ValueError), ({"heap_bytes": 1024}, ValueError), ({"heap_bytes": -1}, ValueError),
    ({"buffer_device": "nowhere"}, ValueError), ({"heap_bytes": True, "buffer_device": "cpu"}, ValueError),
])
def test_a_bad_value_gives_replay_and_rollout_the_same_error(kw, exc):
    replay = error_of(lambda: build(CompressedReplayBuffer, **kw))
    rollout = error_of(lambda: build(CompressedRolloutBuffer, **kw))
    assert type(replay) is type(rollout) and isinstance(replay, exc)
    assert str(replay) == str(rollout)
    assert next(iter(kw)) in str(replay)  # names the argument


def test_public_names_become_one_internal_name_each():
    options, small = parse_store_options(CompressedReplayBuffer, "zstd3", {
        "chunk_len": 8, "cache_bytes": 1 << 20, "frame_dedup": False, "threads": 1, "buffer_device": "cpu",
        "heap_bytes": 4096, "small_arrays": "raw"})
    assert options == StoreOptions(codec="zstd3", chunk_len=8, cache_bytes=1 << 20, tier=None, threads=1,
                                   dedup=False, device=th.device("cpu"), budget_bytes=4096)
    assert small == "raw"
    assert parse_store_options(CompressedReplayBuffer, None, {})[0] == StoreOptions()  # the core's defaults
    assert StoreOptions() == StoreOptions(codec=DEFAULT_CODEC, chunk_len=DEFAULT_CHUNK_LEN)
    compact = parse_store_options(CompressedReplayBuffer, "lz4-block", {"preset": "compact"})[0]
    assert (compact.codec, compact.chunk_len) == ("lz4-block", 32)  # an explicit codec wins over the preset's


# -- passed down whole ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("cls", [CompressedReplayBuffer, CompressedDictReplayBuffer, CompressedRolloutBuffer,
                                 CompressedDictRolloutBuffer])
def test_the_buffers_options_reach_every_frame_store_unchanged(cls, device):
    space = DICT if "Dict" in cls.__name__ else IMG
    extra = {} if device is None else {"buffer_device": device, "heap_bytes": 1 << 20}
    buf = build(cls, space, chunk_len=8, frame_dedup=False, threads=1, compression_method="zstd1", **extra)
    assert (buf.store_options.codec, buf.store_options.chunk_len, buf.store_options.dedup) == ("zstd1", 8, False)
    assert buf.store_options.budget_bytes == (None if device is None else 1 << 20)
    assert buf.frame_stores
    for fs in buf.frame_stores.values():
        assert fs.options == buf.store_options
        assert (fs.codec, fs.chunk_len, fs.dedup, fs.threads, fs.device) == ("zstd1", 8, False, 1, buf.buffer_device)
    if device is not None:  # one device budget, shared by the keys, of heap_bytes
        budgets = {id(fs.budget) for fs in buf.frame_stores.values()}
        assert len(budgets) == 1 and next(iter(buf.frame_stores.values())).budget.limit == 1 << 20


def test_her_keeps_its_goals_on_the_host_with_the_same_options_otherwise():
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    from sb3_integration import CompressedHerReplayBuffer

    env = DummyVecEnv([lambda: BitFlippingEnv(n_bits=4, continuous=True, image_obs_space=True)])
    buf = CompressedHerReplayBuffer(32, env.observation_space, env.action_space, env, device="cpu",
                                    buffer_device="cpu", chunk_len=8)
    host = buf.store_options.replace(device=None, budget_bytes=None)
    assert buf.frame_stores["observation"].options == buf.store_options
    assert buf.frame_stores["achieved_goal"].options == host == buf.frame_stores["desired_goal"].options


def test_a_frame_store_takes_options_whole_and_old_keywords_still():
    opts = StoreOptions(codec="zstd1", chunk_len=4, threads=1, dedup=True)
    fs = FrameStore((4, 6, 5), np.uint8, 10, 2, options=opts)
    assert fs.options == opts and fs.cache == 0 and fs.budget is None
    old = FrameStore((4, 6, 5), np.uint8, 10, 2, chunk_len=4, codec="zstd1", threads=1, cache=0)  # the old call
    assert old.options == opts
    assert FrameStore((4, 6, 5), np.uint8, 10, options=opts, chunk_len=8).options == opts.replace(chunk_len=8)
    with pytest.raises(TypeError, match=r"FrameStore.__init__\(\) got an unexpected keyword argument 'codek'"):
        FrameStore((4, 6, 5), np.uint8, 10, codek="zstd1")
    with pytest.raises(TypeError, match="options must be a StoreOptions"):
        FrameStore((4, 6, 5), np.uint8, 10, options={"codec": "zstd1"})
    with pytest.raises(ValueError, match="chunk_len must be >= 1"):
        FrameStore((4, 6, 5), np.uint8, 10, options=opts.replace(chunk_len=0))
    with pytest.raises(TypeError, match="StoreOptions has no field 'compression_method'"):
        opts.replace(compression_method="zstd3")


# -- the GPU names: exactly their base's arguments, plus sb3-extra-buffers' GPU ones ----------------------
@pytest.mark.parametrize(("gpu", "base"), [(GpuReplayBuffer, CompressedReplayBuffer),
                                           (GpuRolloutBuffer, CompressedRolloutBuffer)])
def test_gpu_signatures_are_their_bases_plus_the_gpu_arguments(gpu, base):
    ours, theirs = inspect.signature(gpu), inspect.signature(base)
    named = [p for p in theirs.parameters.values() if p.kind is not p.VAR_KEYWORD]
    rest = [p for p in theirs.parameters.values() if p.kind is p.VAR_KEYWORD]
    assert list(ours.parameters.values()) == [*named, *[
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        for n in ("buffer_device", "heap_bytes", "max_slot_bytes")], *rest]


def test_gpu_buffers_take_their_bases_arguments_by_position_and_store_options_by_name():
    pos = (1, False, True, None, False, "zstd1", None, None, "raw")  # n_envs .. output_dtype, as the base
    buf = GpuReplayBuffer(8, IMG, ACT, "cpu", *pos, "cpu", 4096, 64, chunk_len=8, frame_dedup=False,
                          cache_bytes=1 << 20, small_arrays="raw", threads=1)
    assert (buf.buffer_device, buf.heap_bytes, buf.max_slot_bytes) == (th.device("cpu"), 4096, 64)
    assert buf.store_options == StoreOptions(codec="zstd1", chunk_len=8, cache_bytes=1 << 20, threads=1,
                                             dedup=False, device=th.device("cpu"), budget_bytes=4096)
    roll = GpuRolloutBuffer(8, IMG, ACT, "cpu", 0.95, 0.9, 1, None, False, None, None, None, None, None, 7,
                            chunk_len=8, frame_dedup=False, threads=1)
    assert (roll.gae_lambda, roll.gamma, roll.max_slot_bytes, roll.buffer_device) == (0.95, 0.9, 7, th.device("cpu"))
    assert roll.store_options.replace(device=None) == StoreOptions(codec="none", chunk_len=8, cache_bytes=0,
                                                                   threads=1, dedup=False)
    for gpu, base, kw in [(GpuReplayBuffer, CompressedReplayBuffer, {"frame_dedupe": 1}),
                          (GpuRolloutBuffer, CompressedRolloutBuffer, {"tier": MemoryTier()})]:
        ours, theirs = error_of(partial(build, gpu, **kw)), error_of(partial(build, base, **kw))
        assert type(ours) is type(theirs)
        assert ours.sb3_message == theirs.sb3_message.replace(base.__name__, gpu.__name__)
    with pytest.raises(TypeError, match="multiple values for argument 'device'"):
        GpuReplayBuffer(8, IMG, ACT, "cpu", device="cpu")
    with pytest.raises(ValueError, match="max_slot_bytes"):
        GpuRolloutBuffer(8, IMG, ACT, "cpu", max_slot_bytes=0)


# -- state written before the rename ------------------------------------------------------------------
def test_store_options_pickled_under_the_old_names_load_under_the_new():
    buf = pickle.loads((FIXTURES / "r0_1" / "replay.pkl").read_bytes())  # 0.1.0: compression_method, no device
    assert buf.store_options == StoreOptions(codec="zstd3+dict", chunk_len=4, cache_bytes=0)
    assert buf.store_options.device is None and buf.store_options.budget_bytes is None
    old = StoreOptions.__new__(StoreOptions)
    old.__setstate__({"compression_method": "zstd1", "chunk_len": 8, "cache_bytes": 0, "tier": None, "threads": 2,
                      "buffer_device": "cpu", "heap_bytes": 64})  # 0.2's fields
    assert old == StoreOptions(codec="zstd1", chunk_len=8, threads=2, device="cpu", budget_bytes=64)


def test_a_version_2_frame_store_pickle_loads():
    """Version 2 held FrameStore's keywords of then (codec, chunk_len, cache, device_budget...) as its config."""
    fs = FrameStore((4, 6, 5), np.uint8, 10, 2, chunk_len=4, codec="zstd1")
    rng = np.random.default_rng(0)
    for row in range(10):
        fs.put(OBS, row, rng.integers(0, 255, (2, 4, 6, 5), dtype=np.uint8))
    data = fs.__getstate__()
    assert data["version"] == 3
    cfg = data["config"]
    data["version"] = 2
    data["config"] = {"obs_shape": cfg["obs_shape"], "dtype": cfg["dtype"], "n_rows": 10, "n_envs": 2,
                      "stacks_per_row": 2, "chunk_len": 4, "codec": "zstd1", "tier": None, "cache": 0,
                      "threads": None, "dedup": True, "axis_order": (-1, 0), "name": "observations",
                      "device": None, "device_budget": None}
    back = FrameStore.__new__(FrameStore)
    back.__setstate__(data)
    assert back.options == fs.options
    rows, envs = np.arange(10).repeat(2), np.tile(np.arange(2), 10)
    np.testing.assert_array_equal(back.gather([(OBS, rows)], envs)[0], fs.gather([(OBS, rows)], envs)[0])


def test_a_newer_frame_store_pickle_is_refused_by_name():
    data = FrameStore((4,), np.uint8, 4).__getstate__()
    data["version"] = 99
    with pytest.raises(ValueError, match="pickled by a newer sb3_integration"):
        FrameStore.__new__(FrameStore).__setstate__(data)


# -- one source of defaults -----------------------------------------------------------------------------
def test_the_offline_importers_default_to_the_cores_chunks_and_codec():
    from sb3_integration.offline.dqn_import import import_dqn_replay
    from sb3_integration.offline.minari_io import _array

    params = inspect.signature(import_dqn_replay).parameters
    assert (params["chunk_len"].default, params["codec"].default) == (DEFAULT_CHUNK_LEN, DEFAULT_CODEC)
    image = _array(10, (84, 84), np.uint8, "obs")
    assert image.chunk_len == DEFAULT_CHUNK_LEN and image.codec == __import__("chunkstore").get_codec(DEFAULT_CODEC)


@pytest.mark.parametrize("action_space, buffer_size, n_envs, expect", [
    (spaces.Discrete(4), 1_000_000, 1, "compressed"),  # integer actions: ~10x smaller, from 1M transitions on
    (spaces.MultiBinary(3), 500_000, 2, "compressed"),  # transitions count all envs
    (spaces.Discrete(4), 999_999, 1, "raw"),
    (spaces.Box(-1, 1, (6,), np.float32), 1_000_000, 1, "raw"),  # SAC's default: 36 MB raw, ~1.3x smaller compressed
    (spaces.Box(-1, 1, (6,), np.float32), 8_000_000, 1, "compressed"),  # 288 MB raw: past 256 MiB
    (spaces.Box(-1, 1, (1,), np.float32), 16_000_000, 1, "raw"),  # 16 B a row: 256 MB, under 256 MiB
])
def test_small_arrays_auto_compresses_what_compresses_or_what_is_large(action_space, buffer_size, n_envs, expect):
    """``small_arrays="auto"``: integer actions from 1M transitions on, any once the raw arrays would
    take 256 MiB; a float-action buffer at SAC's default size keeps SB3's arrays (a sampled row of a
    compressed one decodes a whole chunk of 64 rows, for ~8 MB saved)."""
    obs = spaces.Box(-1, 1, (3,), np.float32)
    buf = CompressedReplayBuffer(buffer_size * n_envs, obs, action_space, "cpu", n_envs=n_envs)
    try:
        assert buf.small_arrays == expect
        assert isinstance(buf.rewards, np.ndarray) == (expect == "raw")
    finally:
        buf.close()
    explicit = CompressedReplayBuffer(1000, obs, action_space, "cpu", small_arrays="compressed")
    assert explicit.small_arrays == "compressed"
    explicit.close()


def _atari_rows(n, seed=0):
    """``n`` transitions of random (1, 4, 84, 84) uint8 stacks: every add a fresh stack."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        obs, nxt = (rng.integers(0, 255, (1, 4, 84, 84), dtype=np.uint8) for _ in range(2))
        yield obs, nxt, np.array([i % 3]), np.array([float(i)]), np.array([0.0]), [{}]


def test_a_tier_factory_that_returns_no_tier_is_named_at_the_add_that_calls_it():
    """The factory is called once the stacking layout is known (within the first 32 adds): that
    add, and every later add or read of the observations, raises a TypeError naming the factory."""
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    ours = CompressedReplayBuffer(64, space, spaces.Discrete(3), tier=dict)
    named = r"observations: the tier factory <class 'dict'> returned dict \{\}; it must return a chunkstore Tier"
    rows = list(_atari_rows(40))
    with pytest.raises(TypeError, match=named):
        for tr in rows:
            ours.add(*tr)
    assert 0 < ours.pos < 33
    with pytest.raises(TypeError, match=named):
        ours.add(*rows[ours.pos])
    with pytest.raises(TypeError, match=named):
        ours.observations[0]


def test_a_tier_factory_that_fails_once_loses_nothing_when_the_add_is_retried():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return MemoryTier()

    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    ours = CompressedReplayBuffer(64, space, spaces.Discrete(3), tier=flaky)
    ref = ReplayBuffer(64, space, spaces.Discrete(3))
    failed = 0
    for tr in _atari_rows(80, seed=1):
        try:
            ours.add(*tr)
        except OSError:
            failed += 1
            ours.add(*tr)  # the same add again, as a caller retrying after freeing space would
        ref.add(*tr)
    assert failed == 1 and ours.pos == ref.pos and ours.full == ref.full
    for i in range(64):
        assert np.array_equal(ours.observations[i], ref.observations[i])
        assert np.array_equal(ours.next_observations[i], ref.next_observations[i])
        assert ours.rewards[i] == ref.rewards[i] and ours.actions[i] == ref.actions[i]
