"""``prefetch=k``: batches drawn ahead and read on a worker thread (sb3_integration.samplers.prefetch)."""

from __future__ import annotations

import gc
import pickle
import threading
import time
import weakref

import numpy as np
import pytest
import torch as th
from conftest import assert_same, make_pair, random_transitions
from gymnasium import spaces

from sb3_integration import CompressedHerReplayBuffer, CompressedReplayBuffer
from sb3_integration.buffers.prioritized import CompressedPrioritizedReplayBuffer
from sb3_integration.samplers import UniformSampler

VEC = spaces.Box(-1e6, 1e6, (3,), np.float32)
ACT = spaces.Box(-1e6, 1e6, (1,), np.float32)
IMG = spaces.Box(0, 255, (2, 4, 3), np.uint8)


def labelled(buf, start, count, n_envs):
    """Transitions whose fields all name (t, env): obs [t, e, 7], next obs [t + 1, e, 7], action t,
    reward t + e / 2; none ends. A sample is consistent when its fields agree on (t, e)."""
    for t in range(start, start + count):
        e = np.arange(n_envs, dtype=np.float32)
        obs = np.stack([np.full(n_envs, t, np.float32), e, np.full(n_envs, 7, np.float32)], 1)
        nxt = obs + np.array([1, 0, 0], np.float32)
        buf.add(obs, nxt, np.full((n_envs, 1), t, np.float32), t + e / 2, np.zeros(n_envs, bool),
                [{} for _ in range(n_envs)])


def check_consistent(s, low=-1, high=np.inf):
    o, n = s.observations.numpy(), s.next_observations.numpy()
    t, e = o[:, 0], o[:, 1]
    assert np.array_equal(o[:, 2], np.full(len(o), 7)) and np.array_equal(n[:, 0], t + 1)
    assert np.array_equal(n[:, 1], e) and np.array_equal(s.actions.numpy()[:, 0], t)
    assert np.array_equal(s.rewards.numpy()[:, 0], t + e / 2) and not s.dones.numpy().any()
    assert t.min() >= low and t.max() < high, (t.min(), t.max())
    return t


def prefetch_threads(buf):
    return set(buf._prefetcher._pool._threads)


# -- off: SB3's samples; on: reproducible, valid, not the global generator ----------------------
@pytest.mark.parametrize("prefetch", [None, 0])
def test_prefetch_off_is_sb3_bit_for_bit(prefetch):
    ref, ours = make_pair("replay", 40, IMG, spaces.Discrete(3), n_envs=2)
    ours.prefetch = prefetch
    for tr in random_transitions(IMG, spaces.Discrete(3), 30, 2):
        ref.add(*tr)
        ours.add(*tr)
    for seed in range(3):
        np.random.seed(seed)  # noqa: NPY002
        a = ref.sample(16)
        np.random.seed(seed)  # noqa: NPY002
        b = ours.sample(16)
        for f in a._fields:
            assert_same(getattr(a, f), getattr(b, f), f)
    assert "_prefetcher" not in ours.__dict__  # no worker


@pytest.mark.parametrize("k", [1, 3])
def test_same_seed_same_adds_same_batches(k):
    a, b = (CompressedReplayBuffer(64, VEC, ACT, "cpu", n_envs=2, prefetch=k, prefetch_seed=11) for _ in range(2))
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    for step in range(12):
        for buf in (a, b):
            labelled(buf, 5 * step, 5, 2)
        sa, sb = a.sample(8), b.sample(8)
        for f in sa._fields:
            assert_same(getattr(sa, f), getattr(sb, f), f"{step} {f}")
        check_consistent(sa, 0, 5 * step + 5)
    assert np.array_equal(np.random.get_state()[1], state)  # noqa: NPY002  sampling never drew from it
    a.close()
    b.close()


def test_without_a_seed_one_global_draw_at_construction_seeds_it():
    np.random.seed(5)  # noqa: NPY002
    a = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2)
    np.random.seed(5)  # noqa: NPY002
    b = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2)
    for buf in (a, b):
        labelled(buf, 0, 20, 1)
    assert th.equal(a.sample(8).observations, b.sample(8).observations)
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["replay", "dict", "nstep"])
def test_each_batch_is_what_sb3_reads_for_the_drawn_rows(kind):
    # n_envs 1: SB3's _get_samples draws no env, so the draw's rows alone fix SB3's batch
    obs = spaces.Dict({"img": IMG, "vec": VEC}) if kind == "dict" else IMG
    ref, ours = make_pair(kind, 24, obs, spaces.Discrete(3))
    ours.prefetch, ours._prefetch_rng = 2, np.random.default_rng(4)
    for tr in random_transitions(obs, spaces.Discrete(3), 40, 1):
        ref.add(*tr)
        ours.add(*tr)
    shadow = np.random.default_rng(4)
    for _ in range(5):
        got = ours.sample(8)
        want = ref._get_samples(UniformSampler().sample(ref, 8, shadow).rows)
        for f in want._fields:
            assert_same(getattr(want, f), getattr(got, f), f)
    ours.close()


def test_a_batch_holds_the_transitions_present_when_it_was_drawn():
    buf = CompressedReplayBuffer(8, VEC, ACT, "cpu", prefetch=2, prefetch_seed=0)
    labelled(buf, 0, 8, 1)  # t 0..7, full
    read = buf._read_draw
    buf._read_draw = lambda d, e: (time.sleep(0.1), read(d, e))[1]  # reads slower than the adds below
    check_consistent(buf.sample(4), 0, 8)  # draws this batch and the next two from t 0..7
    labelled(buf, 8, 8, 1)  # overwrites every row: waits for the two reads first
    for _ in range(2):
        check_consistent(buf.sample(4), 0, 8)
    check_consistent(buf.sample(4), 8, 16)  # drawn after the adds
    buf.close()


def test_a_new_batch_size_or_env_drops_the_queue():
    buf = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    assert len(buf.sample(4).observations) == 4
    assert len(buf.sample(7).observations) == 7 and buf._prefetcher.pending == 2
    assert len(buf.sample(0).observations) == 0
    buf.close()


def test_returned_batches_are_not_overwritten_by_later_ones():
    buf = CompressedReplayBuffer(64, IMG, spaces.Discrete(3), "cpu", prefetch=2, prefetch_seed=0)
    for tr in random_transitions(IMG, spaces.Discrete(3), 60, 1):
        buf.add(*tr)
    held = [buf.sample(16) for _ in range(6)]
    copies = [s.observations.clone() for s in held]
    more = [buf.sample(16) for _ in range(6)]
    for s, c in zip(held, copies, strict=True):
        assert th.equal(s.observations, c)
    assert all(not np.shares_memory(a.observations.numpy(), b.observations.numpy()) for a in held for b in more)
    buf.close()


# -- errors ---------------------------------------------------------------------------------------
def test_a_read_error_surfaces_at_the_next_sample():
    buf = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    read, calls = buf._read_draw, []

    def failing(d, e):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("decode failed")
        return read(d, e)

    buf._read_draw = failing
    check_consistent(buf.sample(4))  # read 1; reads 2 and 3 scheduled
    buf._prefetcher.quiesce()
    with pytest.raises(RuntimeError, match="decode failed"):
        buf.sample(4)
    check_consistent(buf.sample(4))  # the queue was dropped: afresh
    buf.close()


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_prefetch_is_refused_at_the_call(value, error):
    with pytest.raises(error, match="prefetch"):
        CompressedReplayBuffer(8, VEC, ACT, "cpu", prefetch=value)
    buf = CompressedReplayBuffer(8, VEC, ACT, "cpu")
    with pytest.raises(error, match="prefetch"):
        buf.prefetch = value
    with pytest.raises(ValueError, match="prefetch_seed"):
        CompressedReplayBuffer(8, VEC, ACT, "cpu", prefetch=1, prefetch_seed=-3)


def test_her_refuses_prefetch():
    from stable_baselines3.common.envs import BitFlippingEnv

    env = BitFlippingEnv(n_bits=4)
    with pytest.raises(ValueError, match="prefetch"):
        CompressedHerReplayBuffer(32, env.observation_space, env.action_space, env=None, prefetch=2)


# -- prioritized -------------------------------------------------------------------------------
def test_prioritized_with_prefetch_updates_priorities():
    buf = CompressedPrioritizedReplayBuffer(32, VEC, ACT, "cpu", n_envs=2, alpha=0.6, beta=0.4,
                                            prefetch=2, prefetch_seed=1)
    labelled(buf, 0, 16, 2)
    for _ in range(10):
        s = buf.sample(8)
        t = check_consistent(s)
        e = s.observations.numpy()[:, 1]
        assert np.array_equal(s.indices, t.astype(np.int64) * 2 + e.astype(np.int64))
        assert s.weights.shape == (8,) and (s.weights <= 1).all()
        buf.update_priorities(s.indices, np.abs(t) + 1.0)
    p = buf.priorities()
    assert p.max() > 1.0 and len(np.unique(p)) > 2  # the updates landed
    buf.close()


def test_prioritized_prefetched_batch_keeps_its_draws_generations():
    # the second batch is drawn at the first call; its slots are then overwritten: its update is stale
    buf = CompressedPrioritizedReplayBuffer(8, VEC, ACT, "cpu", alpha=1.0, prefetch=1, prefetch_seed=2)
    labelled(buf, 0, 8, 1)
    buf.sample(4)
    labelled(buf, 8, 8, 1)
    before = buf.priorities().copy()
    s = buf.sample(4)
    check_consistent(s, 0, 8)
    buf.update_priorities(s.indices, np.full(4, 50.0))
    assert np.array_equal(buf.priorities(), before)
    buf.close()


# -- lifetime: close, del, pickle, save with a live worker ---------------------------------------
def test_close_stops_the_worker():
    buf = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=3, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    buf.sample(8)
    threads = prefetch_threads(buf)
    assert threads and all(t.is_alive() for t in threads)
    buf.close()
    assert not any(t.is_alive() for t in threads)


def test_del_stops_the_worker():
    buf = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=3, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    buf.sample(8)
    threads, ref = prefetch_threads(buf), weakref.ref(buf)
    buf._prefetcher.quiesce()  # the queued reads hold the buffer until they finish
    del buf
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ref() is None and not any(t.is_alive() for t in threads)


def test_pickle_with_a_live_worker():
    buf = CompressedPrioritizedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    buf.sample(8)
    data = pickle.dumps(buf)
    a, b = pickle.loads(data), pickle.loads(data)
    assert a.prefetch == 2 and "_prefetcher" not in a.__dict__
    for _ in range(3):
        sa, sb = a.sample(8), b.sample(8)
        check_consistent(sa)
        assert th.equal(sa.observations, sb.observations) and np.array_equal(sa.indices, sb.indices)
    check_consistent(buf.sample(8))  # the original goes on with its queue
    for x in (a, b, buf):
        x.close()


def test_save_and_state_dict_with_a_live_worker(tmp_path):
    buf = CompressedReplayBuffer(64, VEC, ACT, "cpu", prefetch=2, prefetch_seed=0)
    labelled(buf, 0, 30, 1)
    buf.sample(8)
    buf.save(tmp_path / "b.h5")
    loaded = CompressedReplayBuffer.load(tmp_path / "b.h5")
    assert loaded.prefetch == 0 and loaded.pos == buf.pos
    loaded.prefetch = 2
    check_consistent(loaded.sample(8), 0, 30)
    check_consistent(buf.sample(8), 0, 30)
    buf.close()
    loaded.close()


def test_reads_of_the_views_from_another_thread_during_a_prefetched_read():
    buf = CompressedReplayBuffer(64, IMG, spaces.Discrete(3), "cpu", prefetch=2, prefetch_seed=0)
    trs = list(random_transitions(IMG, spaces.Discrete(3), 40, 1))
    for tr in trs:
        buf.add(*tr)
    store = buf._stores[None]
    gather = store.gather
    worker = []

    def slow(*args):  # the worker's reads take a while, with the batch's plan set
        if threading.current_thread() is not threading.main_thread():
            worker.append(1)
            time.sleep(0.005)
        return gather(*args)

    store.gather = slow
    for i in range(20):
        buf.sample(8)
        assert np.array_equal(buf.observations[i % 40, 0], trs[i % 40][0][0])
    assert worker
    buf.close()
