"""check_replay_add's common-call path returns exactly what its general path returns, and steps aside otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_integration import CompressedReplayBuffer
from sb3_integration.buffers.sb3_checks import (
    _lossless,
    _replay_checks,
    _replay_common,
    check_replay_add,
)

ACTION_SPACES = [spaces.Discrete(5), spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3, 4])]


def general(buf, *args):
    obs_in, next_in, rows = _replay_checks(buf, *args)
    return _lossless(buf, obs_in, "obs"), _lossless(buf, next_in, "next_obs"), rows


def assert_same(a, b):
    for x, y in zip(a[:2], b[:2], strict=True):
        assert list(x) == list(y)
        for k in x:
            assert x[k].shape == y[k].shape and x[k].dtype == y[k].dtype
            np.testing.assert_array_equal(x[k], y[k])
    assert len(a[2]) == len(b[2])
    for x, y in zip(a[2], b[2], strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@settings(max_examples=40, deadline=None)
@given(n_envs=st.integers(1, 3), space_i=st.integers(0, 2), timeouts=st.booleans(), seed=st.integers(0, 2**16),
       done_dtype=st.sampled_from([bool, np.float32, np.int64]), truncated=st.lists(st.booleans(), min_size=3))
def test_common_path_equals_general_path(n_envs, space_i, timeouts, seed, done_dtype, truncated):
    act_space = ACTION_SPACES[space_i]
    act_space.seed(seed)
    buf = CompressedReplayBuffer(16, spaces.Box(0, 255, (2, 6, 6), np.uint8), act_space, "cpu", n_envs=n_envs,
                                 handle_timeout_termination=timeouts)
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (n_envs, 2, 6, 6), dtype=np.uint8)
    nxt = rng.integers(0, 256, (n_envs, 2, 6, 6), dtype=np.uint8)
    action = np.array([act_space.sample() for _ in range(n_envs)])
    reward = rng.normal(size=n_envs).astype(np.float32)
    done = (rng.random(n_envs) < 0.5).astype(done_dtype)
    infos = [{"TimeLimit.truncated": truncated[e]} if e % 2 else {} for e in range(n_envs)]
    args = (obs, nxt, action, reward, done, infos)
    fast = _replay_common(buf, *args)
    assert fast is not None
    assert_same(fast, general(buf, *args))
    assert_same(check_replay_add(buf, *args), fast)


def test_other_calls_take_the_general_path():
    buf = CompressedReplayBuffer(16, spaces.Box(0, 255, (2, 6, 6), np.uint8), spaces.Discrete(3), "cpu")
    obs = np.zeros((1, 2, 6, 6), np.uint8)
    ok = (obs, obs, np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}])
    assert _replay_common(buf, *ok) is not None
    odd = [
        (obs.astype(np.int64), *ok[1:]),  # a cast to check for loss
        (obs[0], *ok[1:]),  # no env axis
        (obs.tolist(), *ok[1:]),  # a list
        (*ok[:5], [{"TimeLimit.truncated": np.bool_(True)}]),  # a numpy flag
        (*ok[:5], ({},)),  # a tuple of infos
        (*ok[:2], [1], *ok[3:]),  # a list action
        (*ok[:3], 0.5, *ok[4:]),  # a scalar reward
    ]
    for args in odd:
        assert _replay_common(buf, *args) is None
        try:
            want = general(buf, *args)
        except Exception as e:  # SB3's error (a list action has no reshape): the same from the check
            with pytest.raises(type(e)) as got:
                check_replay_add(buf, *args)
            assert str(got.value) == str(e)
            continue
        assert_same(check_replay_add(buf, *args), want)
    with pytest.raises(Exception, match="infos"):
        check_replay_add(buf, *ok[:5], [{}, {}])


def test_signature_follows_the_frame_store():
    buf = CompressedReplayBuffer(16, spaces.Box(0, 255, (2, 6, 6), np.uint8), spaces.Discrete(3), "cpu")
    obs = np.zeros((1, 2, 6, 6), np.uint8)
    args = (obs, obs, np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}])
    assert _replay_common(buf, *args) is not None
    assert buf.__dict__["_add_signature"][0] is buf._stores[None]
    disc = CompressedReplayBuffer(16, spaces.Discrete(4), spaces.Discrete(3), "cpu")  # SB3 reshapes it first
    assert _replay_common(disc, np.array([[2]]), np.array([[3]]), *args[2:]) is None


def test_the_remembered_signature_stays_out_of_pickles():
    """It refers to the live frame store: pickled, it would carry the frames a second time."""
    import pickle

    space = spaces.Box(0, 255, (4, 8, 8), np.uint8)
    buf = CompressedReplayBuffer(64, space, spaces.Discrete(3), "cpu", chunk_len=4)
    rng = np.random.default_rng(0)
    for _ in range(40):
        obs = rng.integers(0, 255, (1, 4, 8, 8), dtype=np.uint8)
        buf.add(obs, obs, np.array([[1]]), np.array([0.5], np.float32), np.array([0.0], np.float32),
                [{"TimeLimit.truncated": False}])
    assert "_add_signature" in buf.__dict__  # the fast path ran
    blob = pickle.dumps(buf)
    assert "_add_signature" not in pickle.loads(blob).__dict__
    without = buf.__dict__.pop("_add_signature")
    try:
        assert len(blob) == len(pickle.dumps(buf))  # the signature adds nothing to the pickle
    finally:
        buf.__dict__["_add_signature"] = without
