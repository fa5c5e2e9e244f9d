"""The replay service on a local Ray instance: what learners sample when shards join, fail and come back.

Every case checks the batches against what the shards store with a chi-square test of
the per-shard and the per-writer sample counts (writers mark their frames, so a sampled
observation names its writer). The statistic is compared with the chi-square 0.999
quantile of its degrees of freedom (10.83 for 1, 13.82 for 2, 16.27 for 3: a correct
sampler fails one check in a thousand). The first batch after a change is left out:
weights travel with replies, so a batch is split by weights one round trip old.
Also here: our errors through Ray, odd calls, the eviction rule with writers spread
unevenly, and the loss count of a shard restarted without checkpoints.
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
from gymnasium import spaces

from sb3_integration.distributed import (
    DataLossWarning,
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
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    yield from helpers.local_ray_session(sys.modules[__name__])


_names = iter(range(10**6))


def service(**kw):
    kw.setdefault("capacity", 20_000)
    return ReplayService.create(f"f{next(_names)}", OBS, ACT, **kw)


@ray.remote
def write(name, seed, n_steps, marker, flush_every=32):
    with ReplayWriter(name, 1, flush_every=flush_every) as w:
        for s in helpers.stacked_steps(seed, n_steps, 1, marker=marker):
            w.add(*s)
    return w.writer_id, w.shard_index


def chi2(counts, expected):
    counts, expected = np.asarray(counts, float), np.asarray(expected, float)
    return float(((counts - expected) ** 2 / expected).sum())


def check_frequencies(svc, batches):
    """Per-shard and per-writer counts of ``batches`` against the stored counts (chi-square, p = 0.001)."""
    info = svc.info()
    sizes = np.array([i["size"] for i in info], float)
    held = collections.Counter()
    for i in info:
        held.update(i["held"])
    shard = np.concatenate([b["shard"] for b in batches])
    marker = np.concatenate([b["obs"][:, -1, 0, 0] for b in batches]).astype(int)  # the writer's mark
    n = len(shard)
    live = sizes > 0
    got = np.bincount(shard, minlength=len(sizes))
    assert not got[~live].any()
    if live.sum() > 1:
        stat = chi2(got[live], n * sizes[live] / sizes.sum())
        assert stat < CHI2_999[int(live.sum()) - 1], (got, sizes)
    writers = sorted(held)
    marks = {w: MARK[(svc.name, w)] for w in writers}
    got_w = [int((marker == marks[w]).sum()) for w in writers]
    assert sum(got_w) == n  # every sample is some writer's
    total = sum(held.values())
    if len(writers) > 1:
        stat = chi2(got_w, [n * held[w] / total for w in writers])
        assert stat < CHI2_999[len(writers) - 1], (got_w, dict(held))
    return got, got_w


MARK: dict = {}  # (service, writer id) -> the marker its frames carry


def add_writer(svc, seed, n_steps, marker):
    wid, shard = ray.get(write.remote(svc.name, seed, n_steps, marker))
    MARK[(svc.name, wid)] = marker
    return shard


def draw(sampler, k, batch=256, rng=None):
    rng = rng or np.random.RandomState(0)
    return [sampler.sample(batch, rng) for _ in range(k)]


def test_a_learner_started_before_any_writer_samples_writers_that_join_later():
    svc = service(n_shards=2)
    try:
        # the first sample waits for a writer actor to start and insert: on a loaded 2-core box that took
        # over 30 s once (RateLimiterTimeout in the thread), so the wait is generous
        learner = DistributedReplayBuffer(100, OBS, ACT, device="cpu", service=svc.name, timeout=150)
        sampler = learner.sampler
        th_batch = {}

        def first():  # blocks until data arrives (nothing is stored yet)
            th_batch["b"] = sampler.sample(32, np.random.RandomState(1))

        t = threading.Thread(target=first)
        t.start()
        assert add_writer(svc, 1, 300, 11) == 0
        t.join(180)
        assert not t.is_alive() and set(th_batch["b"]["shard"].tolist()) == {0}
        draw(sampler, 2)
        assert add_writer(svc, 2, 150, 22) == 1  # joins after the learner's first batches
        assert add_writer(svc, 3, 100, 33) == 0
        draw(sampler, 1)  # splits by weights one round trip old; from here on, current ones
        got, got_w = check_frequencies(svc, draw(sampler, 40))
        assert got[1] > 0 and min(got_w) > 0
        batch = learner.sample(64)  # SB3's call: tensors; the learner never called size()
        assert batch.observations.shape == (64, 4, 8, 8)
    finally:
        svc.close()


def _outage(svc, sampler, sample_during):
    """Kill shard 1 (Ray restarts it from its checkpoint); returns the warnings seen."""
    before = svc.info()[1]["epoch"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ray.kill(svc.shard(1), no_restart=False)
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "shard 1 never came back into the batches"
            if sample_during:
                b = sampler.sample(64, np.random.RandomState(2))
                assert len(b["obs"]) == 64
                if 1 in b["shard"].tolist() and any(issubclass(w.category, ShardUnavailableWarning)
                                                    for w in caught):
                    break
            else:
                info = svc.info()[1]  # retried through the restart, never ActorUnavailableError
                if info["epoch"] != before:
                    assert info["restored"]
                    break
                time.sleep(0.2)
    return [w for w in caught if issubclass(w.category, ShardUnavailableWarning)]


@pytest.mark.parametrize("sample_during", [True, False], ids=["while-sampling", "learner-made-before"])
def test_a_shard_restarted_from_its_checkpoint_is_sampled_again(tmp_path, sample_during):
    svc = service(n_shards=2, checkpoint_dir=str(tmp_path), max_restarts=2)
    try:
        assert add_writer(svc, 1, 300, 11) == 0
        assert add_writer(svc, 2, 200, 22) == 1
        svc.checkpoint()
        sampler = GlobalSampler(svc, timeout=30)
        check_frequencies(svc, draw(sampler, 2))
        lost = _outage(svc, sampler, sample_during)
        assert len(lost) == (1 if sample_during else 0)
        assert svc.info()[1]["restored"] and svc.sizes() == [300, 200]
        draw(sampler, 1)
        got, _ = check_frequencies(svc, draw(sampler, 40))
        assert got[1] > 0
    finally:
        svc.close()


def test_our_errors_reach_the_caller_as_themselves_with_one_line():
    svc = service(n_shards=1, min_size=50, samples_per_insert=1.0, error_buffer=64,
                  max_insert_batch=16, max_sample_batch=32)
    try:
        with pytest.raises(RateLimiterTimeout) as e:
            GlobalSampler(svc, timeout=0.3).sample(8)
        assert type(e.value) is RateLimiterTimeout and "\n" not in str(e.value)
        assert str(e.value).startswith("sample of 8 items timed out after 0.3 s")
        w = ReplayWriter(svc, flush_every=16, timeout=0.3)
        with pytest.raises(RateLimiterTimeout) as e:
            for s in helpers.stacked_steps(3, 200, 1):
                w.add(*s)
        assert type(e.value) is RateLimiterTimeout and str(e.value).startswith("insert of 16 items timed out")
        assert "\n" not in str(e.value)
    finally:
        svc.close()
    svc = service(n_shards=1, min_size=50)
    try:
        errors = []

        def blocked():  # waits for min_size
            try:
                GlobalSampler(svc.name, timeout=60).sample(32)
            except BaseException as err:
                errors.append(err)

        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.5)
        assert t.is_alive()
        svc.coordinator.close.remote()
        t.join(20)
        assert not t.is_alive() and len(errors) == 1
        assert type(errors[0]) is LimiterClosed and errors[0].args == ("the rate limiter was closed",)
    finally:
        svc.close()


def test_calls_after_close_fail_at_once_and_sample_0_is_sb3s():
    svc = service(n_shards=2)
    try:
        add_writer(svc, 1, 50, 11)
        buf = DistributedReplayBuffer(100, OBS, ACT, device="cpu", service=svc.name, timeout=60)
        empty = buf.sample(0)
        from stable_baselines3.common.buffers import ReplayBuffer

        ref = ReplayBuffer(10, OBS, ACT, device="cpu").sample(0)
        for ours, theirs in zip(empty, ref, strict=True):
            if theirs is None:
                assert ours is None
            else:
                assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        assert buf.sample(16).observations.shape == (16, 4, 8, 8)
    finally:
        svc.close()
    t0 = time.monotonic()
    with pytest.raises(LimiterClosed, match="closed"):
        buf.sample(16)  # another handle (by name): the shards and the coordinator are gone
    with pytest.raises(LimiterClosed, match="closed"):
        svc.info()  # the handle that closed it
    with pytest.raises(LimiterClosed, match="closed"):
        svc.limiter_state()
    assert time.monotonic() - t0 < 10  # at once, not after the 60 s timeout


def test_bad_options_fail_at_the_call():
    with pytest.raises(ValueError, match="n_shards must be a whole number"):
        service(n_shards=2.5)
    with pytest.raises(TypeError, match="n_shards must be an int"):
        service(n_shards="2")
    with pytest.raises(TypeError, match="capacity must be an int"):
        service(capacity=True)
    with pytest.raises(ValueError, match="chunk_len must be >= 1"):
        service(chunk_len=0)
    with pytest.raises(ValueError, match="checkpoint_every_s needs checkpoint_dir"):
        service(checkpoint_every_s=5)
    svc = service(n_shards=2.0)  # a whole float is its int
    try:
        assert svc.n_shards == 2
        with pytest.raises(ValueError, match="flush_every must be >= 1"):
            ReplayWriter(svc, flush_every=0)
        with pytest.raises(ValueError, match="timeout must be a finite number >= 0"):
            GlobalSampler(svc, timeout=-1)
        with pytest.raises(ValueError, match="n must be >= 0"):
            GlobalSampler(svc).sample(-1)
    finally:
        svc.close()


def test_writers_spread_unevenly_keep_what_one_buffer_keeps():
    """Three writers at one rate, two of them sharing shard 0: each keeps about its newest third."""
    capacity, steps, flush = 1200, 1000, 20
    svc = service(n_shards=2, capacity=capacity)
    try:
        ws = [ReplayWriter(svc, flush_every=flush) for _ in range(3)]
        assert [w.shard_index for w in ws] == [0, 1, 0]
        data = [helpers.stacked_steps(s, steps, 1, marker=10 * (s + 1)) for s in range(3)]
        for t in range(steps):
            for w, d in zip(ws, data, strict=True):
                w.add(*d[t])
        for w in ws:
            w.close()
        held = collections.Counter()
        for i in svc.info():
            held.update(i["held"])
        per_writer = [held[w.writer_id] for w in ws]
        tol = capacity // 64 + 3 * flush  # docs/guide/ray.md's rule: a telling interval and a message per writer
        assert abs(sum(per_writer) - capacity) <= tol, per_writer
        for n in per_writer:  # split capacity kept 600 / 1200 / 600 here
            assert abs(n - capacity / 3) <= tol, per_writer
    finally:
        svc.close()


def test_a_shard_restarted_without_checkpoints_counts_what_was_lost():
    svc = service(n_shards=1, capacity=500, max_restarts=2)
    try:
        w = ReplayWriter(svc, flush_every=50)
        steps = helpers.stacked_steps(4, 1200, 1)
        for s in steps[:700]:  # 700 sent, the newest 500 held
            w.add(*s)
        w.flush(wait=True)
        restart(svc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for s in steps[700:750]:
                w.add(*s)  # the 750th add sends; its ack says the shard is empty
            w.flush(wait=True)
        lost = [x for x in caught if issubclass(x.category, DataLossWarning)]
        assert len(lost) == 1 and w.lost == 550 and " 550 transitions" in str(lost[0].message)
        for s in steps[750:850]:  # the new stream: 100 held
            w.add(*s)
        w.flush(wait=True)
        assert svc.sizes() == [100]
        restart(svc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for s in steps[850:900]:
                w.add(*s)
            w.flush(wait=True)
        lost = [x for x in caught if issubclass(x.category, DataLossWarning)]
        assert len(lost) == 1 and " 150 transitions" in str(lost[0].message)  # 100 held + 50 in flight
    finally:
        svc.close()


def restart(svc):
    """Kill shard 0 and wait until Ray has restarted it."""
    before = svc.info()[0]["epoch"]
    ray.kill(svc.shard(0), no_restart=False)
    deadline = time.monotonic() + 60
    while svc.info()[0]["epoch"] == before:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_start_local_ray_keeps_the_users_pythonpath(monkeypatch):
    import os

    from sb3_integration.distributed import local

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/user/a", "/user/b"]))
    monkeypatch.setattr(ray, "init", lambda **kw: kw)
    kw = local.start_local_ray(num_cpus=1)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(local.__file__))))
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [root, "/user/a", "/user/b"]  # ours first, theirs kept
    assert kw["address"] == "local"
