"""Prioritized replay across shards on a local Ray instance (loopback only, one instance per module).

Per-shard sample counts are checked against the shards' priority masses with a chi-square
test at the 0.999 quantile (10.83 for 1 degree of freedom); importance weights against an
fp64 reference computed from every shard's masses; updates routed back by index, stale
ones dropped, bad ones refused before anything is sent. The first batch after a change is
left out of the counts: masses travel with replies, one round trip old.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings

import _ray_helpers as helpers
import numpy as np
import pytest
from gymnasium import spaces

from sb3_integration.distributed import (
    PrioritizedDistributedReplayBuffer,
    ReplayService,
    ReplayWriter,
    ShardUnavailableWarning,
)
from sb3_integration.distributed.prioritized import decode_indices, encode_indices

ray = pytest.importorskip("ray")

OBS = spaces.Box(0, 255, (4, 8, 8), np.uint8)
ACT = spaces.Discrete(4)
CHI2_999_DF1 = 10.828


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    yield from helpers.local_ray_session(sys.modules[__name__])


_names = iter(range(10**6))


def service(**kw):
    kw.setdefault("capacity", 20_000)
    kw.setdefault("alpha", 0.6)
    return ReplayService.create(f"p{next(_names)}", OBS, ACT, **kw)


@ray.remote
def write(name, seed, n_steps, scale):
    """One writer; its transitions' initial priorities are ``scale`` times exponential draws."""
    rng = np.random.default_rng(seed)
    with ReplayWriter(name, 1, flush_every=32) as w:
        for s in helpers.stacked_steps(seed, n_steps, 1):
            w.add(*s, priorities=[scale * rng.exponential()])
    return w.shard_index


def buffer(svc, **kw):
    return PrioritizedDistributedReplayBuffer(100, OBS, ACT, device="cpu", service=svc.name, timeout=30, **kw)


def state(svc):
    """Every shard's masses by ring position: {shard: {row: mass}}."""
    out = {}
    for i in range(svc.n_shards):
        rows = ray.get(svc.shard(i).live_rows.remote())
        masses = ray.get(svc.shard(i).priority_masses.remote())
        out[i] = dict(zip(rows.tolist(), masses.tolist(), strict=True))
    return out


def shard_counts(buf, k, batch=256):
    got = np.zeros(buf.service.n_shards)
    for _ in range(k):
        s = buf.sample(batch)
        shard, _, _ = decode_indices(s.indices)
        got += np.bincount(shard, minlength=len(got))
    return got


def check_mass_split(svc, got):
    mass = np.array([i["weight"] for i in svc.info()])
    expected = got.sum() * mass / mass.sum()
    stat = float(((got - expected) ** 2 / expected).sum())
    assert stat < CHI2_999_DF1, (got, expected)


def test_shards_of_unequal_mass_weights_updates_and_bad_input():
    svc = service(n_shards=2, epsilon=1e-3)
    try:
        assert ray.get(write.remote(svc.name, 1, 300, 1.0)) == 0
        assert ray.get(write.remote(svc.name, 2, 200, 4.0)) == 1  # fewer transitions, more mass
        buf = buffer(svc, beta=0.5)
        buf.sample(8)  # the masses' first round trip
        got = shard_counts(buf, 30)
        check_mass_split(svc, got)
        sizes = svc.sizes()
        assert got[1] / got.sum() > sizes[1] / sum(sizes) + 0.1  # by mass, not by size
        # weights: an fp64 reference from the whole service's state
        s = buf.sample(256)
        st = state(svc)
        shard, gen, row = decode_indices(s.indices)
        m = np.array([st[a][b] for a, b in zip(shard.tolist(), row.tolist(), strict=True)])
        low = min(min(v.values()) for v in st.values())
        n_stored = sum(len(v) for v in st.values())
        total = sum(sum(v.values()) for v in st.values())
        p = m / total
        ref = (n_stored * p) ** -0.5 / (n_stored * low / total) ** -0.5
        np.testing.assert_allclose(s.weights.numpy(), ref, rtol=1e-6)
        assert s.weights.dtype.is_floating_point and s.observations.shape == (256, 4, 8, 8)
        # updates go back to their shards; the last entry for a slot wins
        td = np.random.default_rng(0).exponential(size=256)
        buf.update_priorities(s.indices, td)
        assert buf.flush_priorities(timeout=30) == 256
        after = state(svc)
        last = {(a, b): t for a, b, t in zip(shard.tolist(), row.tolist(), td.tolist(), strict=True)}
        for (a, b), t in last.items():
            assert after[a][b] == pytest.approx(float(np.float32((t + 1e-3) ** 0.6)), rel=1e-6)
        # an index whose generation moved on is dropped, the others applied
        stale = encode_indices(shard[:4], (gen[:4] + 1) % 65536, row[:4])
        fresh = encode_indices(shard[4:8], gen[4:8], row[4:8])
        buf.update_priorities(np.concatenate([stale, fresh]), np.full(8, 50.0))
        applied, dropped = buf.updates.applied, buf.updates.dropped
        buf.flush_priorities(timeout=30)
        assert buf.updates.applied - applied == 4 and buf.updates.dropped - dropped == 4
        # bad input: ValueError, nothing sent
        before, sent = state(svc), len(buf.updates._in_flight)
        for idx, pri, match in [(s.indices[:4], [1.0, 2.0], "same length"),
                                (s.indices[:2], [1.0, -1.0], "finite and >= 0"),
                                (s.indices[:2], [1.0, np.nan], "finite and >= 0"),
                                (s.indices[:2].astype(float), [1.0, 1.0], "integers"),
                                (encode_indices([2, 0], [0, 0], [0, 0]), [1.0, 1.0], "shard < 2"),
                                (np.array([-1, 0]), [1.0, 1.0], "indices must come"),
                                (s.indices[:2].reshape(1, 2), [[1.0, 1.0]], "1-D")]:
            with pytest.raises(ValueError, match=match):
                buf.update_priorities(idx, np.array(pri))
        assert len(buf.updates._in_flight) == sent and state(svc) == before
        buf.beta = 0.0
        assert (buf.sample(16).weights.numpy() == 1.0).all()
        with pytest.raises(ValueError, match="beta"):
            buf.beta = -1.0
        assert buf.alpha == 0.6 and buf.epsilon == 1e-3
    finally:
        svc.close()


def test_a_learner_before_any_data_and_a_restarted_shard_sample_in_proportion(tmp_path):
    svc = service(n_shards=2, checkpoint_dir=str(tmp_path), max_restarts=2)
    try:
        buf = buffer(svc)
        first = {}

        def sample_first():  # blocks until data arrives
            first["s"] = buf.sample(32)

        t = threading.Thread(target=sample_first)
        t.start()
        assert ray.get(write.remote(svc.name, 1, 300, 1.0)) == 0
        t.join(60)
        assert not t.is_alive() and set(decode_indices(first["s"].indices)[0].tolist()) == {0}
        assert ray.get(write.remote(svc.name, 2, 150, 5.0)) == 1  # joins after the learner's first batch
        buf.sample(8)
        check_mass_split(svc, shard_counts(buf, 20))
        # shard 1's priorities change, are checkpointed, and survive its restart
        s = buf.sample(256)
        on1 = decode_indices(s.indices)[0] == 1
        buf.update_priorities(s.indices[on1], np.full(int(on1.sum()), 20.0))
        buf.flush_priorities(timeout=30)
        before = state(svc)[1]
        svc.checkpoint()
        epoch = svc.info()[1]["epoch"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ShardUnavailableWarning)
            ray.kill(svc.shard(1), no_restart=False)
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "shard 1 never came back into the batches"
                s = buf.sample(64)
                info = svc.info()[1]
                if info["epoch"] != epoch and 1 in decode_indices(s.indices)[0].tolist():
                    break
        assert svc.info()[1]["restored"] and state(svc)[1] == before
        buf.sample(8)
        check_mass_split(svc, shard_counts(buf, 20))
    finally:
        svc.close()


def test_per_transition_frequencies_across_shards_match_p_alpha():
    svc = service(n_shards=2, capacity=100, alpha=0.8, epsilon=0.0)
    try:
        ray.get([write.remote(svc.name, 5, 12, 1.0), write.remote(svc.name, 6, 8, 10.0)])
        assert svc.sizes() == [12, 8] or svc.sizes() == [8, 12]
        buf = buffer(svc)
        buf.sample(8)
        counts: dict = {}
        n = 0
        for _ in range(40):
            shard, _, row = decode_indices(buf.sample(250).indices)
            for key in zip(shard.tolist(), row.tolist(), strict=True):
                counts[key] = counts.get(key, 0) + 1
            n += 250
        st = state(svc)
        keys = [(a, b) for a in st for b in st[a]]
        mass = np.array([st[a][b] for a, b in keys])
        assert mass.max() / mass.min() > 10 and set(counts) <= set(keys)
        got = np.array([counts.get(k, 0) for k in keys])
        expected = n * mass / mass.sum()
        stat = float(((got - expected) ** 2 / expected).sum())
        assert stat < 43.82, (got, expected)  # the chi-square 0.999 quantile, 19 degrees of freedom
    finally:
        svc.close()
