"""The replay service on a local Ray instance (one instance for the whole module, loopback only).

Writers run in other processes (Ray tasks); the learner side runs here. Every check is
bit-exact against the transitions the writers were given.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
import warnings

import _ray_helpers as helpers
import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from sb3_integration import CompressedReplayBuffer
from sb3_integration.distributed import (
    DistributedReplayBuffer,
    GlobalSampler,
    LimiterClosed,
    RateLimiterTimeout,
    ReplayService,
    ReplayWriter,
    ShardUnavailableWarning,
)

ray = pytest.importorskip("ray")

OBS = spaces.Box(0, 255, (4, 8, 8), np.uint8)
ACT = spaces.Discrete(4)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    yield from helpers.local_ray_session(sys.modules[__name__])


_names = iter(range(10**6))


def service(**kw):
    kw.setdefault("capacity", 20_000)
    return ReplayService.create(f"t{next(_names)}", OBS, ACT, **kw)


@ray.remote
def write(name, seed, n_steps, n_envs, marker, flush_every=32):
    steps = helpers.stacked_steps(seed, n_steps, n_envs, marker=marker)
    with ReplayWriter(name, n_envs, flush_every=flush_every) as w:
        for s in steps:
            w.add(*s)
    return w.writer_id, w.transitions_sent, w.wire_bytes


def everything(svc, decode):
    """Every stored transition of every shard, as comparable records."""
    out = []
    for i in range(svc.n_shards):
        shard = svc.shard(i)
        rows = ray.get(shard.live_rows.remote())  # ring positions of the rows held
        n = len(rows)
        reply = ray.get(shard.read.remote(rows, decode))
        obs, nxt = _obs(svc, reply, decode)
        out += [helpers.key(obs[j], nxt[j], reply.actions[j], reply.rewards[j], reply.dones[j], reply.timeouts[j])
                for j in range(n)]
    return out


def _obs(svc, reply, decode):
    if decode:
        return reply.obs, reply.next_obs
    return GlobalSampler(svc, decode="learner")._decode_all([reply])


def test_every_transition_of_several_writers_comes_back_once_and_exactly():
    svc = service(n_shards=2)
    try:
        jobs = [(1, 150, 1, 11), (2, 90, 2, 22), (3, 120, 1, 33)]
        results = ray.get([write.remote(svc.name, seed, n, envs, m) for seed, n, envs, m in jobs])
        assert sorted(t for _, t, _ in results) == sorted(n * envs for _, n, envs, _ in jobs)
        want = collections.Counter(r for seed, n, envs, m in jobs
                                   for r in helpers.flat(helpers.stacked_steps(seed, n, envs, marker=m)))
        for decode in (True, False):
            got = collections.Counter(everything(svc, decode))
            assert got == want  # none missing, none duplicated, every byte equal
        assert sum(svc.sizes()) == sum(want.values())
    finally:
        svc.close()


def test_one_writer_samples_like_a_local_compressed_replay_buffer():
    svc = service(n_shards=1, capacity=500)
    steps = helpers.stacked_steps(5, 300, 1, marker=7)
    local = CompressedReplayBuffer(500, OBS, ACT, device="cpu")
    try:
        with ReplayWriter(svc, flush_every=16) as w:
            for s in steps:
                w.add(*s)
                local.add(*s)
        buf = DistributedReplayBuffer(500, OBS, ACT, device="cpu", service=svc.name)
        assert buf.size() == local.size() == 300
        rng = np.random.default_rng(0)
        inds = rng.integers(0, 300, 64)
        ref = local._get_samples(inds)
        reply = ray.get(svc.shard(0).read.remote(inds, False))
        obs, nxt = buf.sampler._decode_all([reply])
        assert np.array_equal(obs, ref.observations.numpy()) and np.array_equal(nxt, ref.next_observations.numpy())
        dones = reply.dones * (1 - reply.timeouts)
        assert np.array_equal(dones.reshape(-1, 1), ref.dones.numpy())
        assert np.array_equal(reply.rewards.reshape(-1, 1), ref.rewards.numpy())
        assert np.array_equal(reply.actions, ref.actions.numpy())
        # the SB3 buffer's own sample(): SB3's named tuple, on the buffer's device, rows it names
        for decode in ("learner", "shard"):
            buf.sampler.decode = decode
            th.manual_seed(0)
            np.random.seed(1)  # noqa: NPY002 - SB3 samples with the global generator
            batch = buf.sample(32)
            assert type(batch).__name__ == "ReplayBufferSamples" and batch.observations.device.type == "cpu"
            assert batch.observations.shape == (32, 4, 8, 8) and batch.dones.shape == (32, 1)
        for prefetch in (False, True):
            sampler = GlobalSampler(svc, prefetch=prefetch)
            for _ in range(3):  # with prefetch, batches 2 and 3 were asked for before they were wanted
                b = sampler.sample(32, np.random.RandomState(1))
                ref = local._get_samples(b["row"])
                assert np.array_equal(b["obs"], ref.observations.numpy())
                assert np.array_equal(b["next_obs"], ref.next_observations.numpy())
                assert np.array_equal(b["actions"], ref.actions.numpy())
    finally:
        svc.close()


def test_batches_are_drawn_over_all_shards_in_proportion_to_their_sizes():
    svc = service(n_shards=2)
    try:
        ray.get(write.remote(svc.name, 1, 300, 1, 1))  # first writer: shard 0
        ray.get(write.remote(svc.name, 2, 100, 1, 2))  # second writer: shard 1
        assert svc.sizes() == [300, 100]
        sampler = GlobalSampler(svc)
        rng = np.random.RandomState(0)
        shards, rows = [], []
        for _ in range(40):
            b = sampler.sample(64, rng)
            assert set(b["shard"].tolist()) == {0, 1}  # each batch spans both shards
            shards.append(b["shard"])
            rows.append(b["row"][b["shard"] == 0])
        share = np.concatenate(shards).mean()
        assert abs(share - 0.25) < 0.05  # binomial sd 0.009 over 2,560 draws
        counts = np.bincount(np.concatenate(rows), minlength=300)
        expected = counts.sum() / 300
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert chi2 < 299 + 5 * np.sqrt(2 * 299)  # uniform within a shard: 299 degrees of freedom
    finally:
        svc.close()


def test_the_rate_limiter_blocks_times_out_and_is_cancelled_on_close():
    svc = service(n_shards=1, min_size=50)
    try:
        sampler = GlobalSampler(svc, timeout=0.3)
        with pytest.raises(RateLimiterTimeout):
            sampler.sample(8)
        errors = []

        def blocked():
            try:
                GlobalSampler(svc, timeout=60).sample(8)
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.5)
        assert t.is_alive()
        t0 = time.monotonic()
        svc.coordinator.close.remote()
        t.join(20)
        assert not t.is_alive() and time.monotonic() - t0 < 20
        assert len(errors) == 1 and isinstance(errors[0], LimiterClosed)
    finally:
        svc.close()


def test_a_sample_to_insert_ratio_holds_writers_back_until_learners_sample():
    svc = service(n_shards=1, min_size=32, samples_per_insert=1.0, error_buffer=64,
                  max_insert_batch=16, max_sample_batch=32)
    try:
        w = ReplayWriter(svc, flush_every=16, timeout=0.5)
        steps = helpers.stacked_steps(3, 200, 1)
        with pytest.raises(RateLimiterTimeout):
            for s in steps:
                w.add(*s)
        state = svc.limiter_state()
        assert state["inserts"] == 32 + 64  # min_size, then the top of the band
        sampler = GlobalSampler(svc, timeout=5)
        for _ in range(3):
            sampler.sample(32)
        w.flush(wait=True)  # the held message goes now
        assert svc.limiter_state()["inserts"] > 96
        w.close()
        with pytest.raises(ValueError, match="deadlock"):
            service(n_shards=1, min_size=32, samples_per_insert=4.0, error_buffer=3)
    finally:
        svc.close()


def test_a_killed_shard_comes_back_from_its_checkpoint_and_writers_resend_the_rest(tmp_path):
    svc = service(n_shards=1, capacity=2000, checkpoint_dir=str(tmp_path), max_restarts=2)
    try:
        steps = helpers.stacked_steps(9, 400, 1, marker=5)
        w = ReplayWriter(svc, flush_every=16)
        for s in steps[:200]:
            w.add(*s)
        w.flush(wait=True)
        svc.checkpoint()
        for s in steps[200:300]:
            w.add(*s)
        w.flush(wait=True)  # acknowledged, not covered by the checkpoint
        before = svc.info()[0]
        ray.kill(svc.shard(0), no_restart=False)
        for s in steps[300:]:
            w.add(*s)
        w.close()
        after = svc.info()[0]
        assert after["restored"] and after["epoch"] != before["epoch"]
        assert w.resent >= 1
        assert collections.Counter(everything(svc, True)) == collections.Counter(helpers.flat(steps))
    finally:
        svc.close()


def test_losing_a_shard_leaves_sampling_from_the_others_with_one_warning():
    svc = service(n_shards=2)
    try:
        ray.get([write.remote(svc.name, 1, 100, 1, 1), write.remote(svc.name, 2, 100, 1, 2)])
        sampler = GlobalSampler(svc, timeout=10)
        sampler.sample(16)
        dead = svc.shard(1)
        ray.kill(dead, no_restart=True)
        # ray.kill returns before the actor is gone: until it is, the shard can still answer
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "shard 1 outlived ray.kill by a minute"
            try:
                ray.get(dead.pid.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                break
            time.sleep(0.05)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = [sampler.sample(16) for _ in range(5)]
        lost = [w for w in caught if issubclass(w.category, ShardUnavailableWarning)]
        assert len(lost) == 1 and "shard 1" in str(lost[0].message)
        assert all(len(b["obs"]) == 16 and set(b["shard"].tolist()) == {0} for b in batches)
    finally:
        svc.close()


def test_a_service_is_found_by_name_and_bad_input_fails_at_the_call():
    svc = service(n_shards=1)
    try:
        other = ReplayService.connect(svc.name)
        assert other.config == svc.config
        with pytest.raises(ValueError, match="no replay service"):
            ReplayService.connect("no-such-service")
        w = ReplayWriter(svc.name)
        with pytest.raises(ValueError, match="obs"):
            w.add(np.zeros((1, 4, 8, 9), np.uint8), np.zeros((1, 4, 8, 8), np.uint8), [0], [0.0], [0.0], [{}])
        with pytest.raises(ValueError, match="min_size"):
            service(n_shards=1, capacity=10, min_size=11)
        with pytest.raises(ValueError, match="stores observations"):
            DistributedReplayBuffer(10, spaces.Box(0, 255, (4, 8, 7), np.uint8), ACT, service=svc.name)
        import pickle

        with pytest.raises(TypeError, match="checkpoint the service"):
            pickle.dumps(DistributedReplayBuffer(10, OBS, ACT, service=svc.name))
        w.close()
    finally:
        svc.close()


def test_checkpoint_of_a_service_without_checkpoint_dir_is_a_value_error_at_the_call():
    """Not a RayTaskError from each shard (one raised, the others logged as unhandled)."""
    svc = service(n_shards=2)
    try:
        with pytest.raises(ValueError, match=r"has no checkpoint_dir") as err:
            svc.checkpoint()
        assert not isinstance(err.value, ray.exceptions.RayTaskError)
        assert "\n" not in str(err.value)
        assert svc.sizes() == [0, 0]  # the service still works
    finally:
        svc.close()
