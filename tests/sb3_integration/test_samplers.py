"""The sampler seam: SB3's draws, call for call; one priority-to-mass formula for host and shards."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_pair, random_transitions
from gymnasium import spaces

from sb3_integration import CompressedReplayBuffer
from sb3_integration.buffers.prioritized import CompressedPrioritizedReplayBuffer, checked_update
from sb3_integration.distributed.shard_priority import masses_of
from sb3_integration.samplers import Draw, PrioritizedSampler, UniformSampler, priority_masses

OBS = spaces.Box(0, 255, (2, 3), np.uint8)
ACT = spaces.Discrete(3)


def _filled(kind, size, n_envs, steps, **kw):
    ref, ours = make_pair(kind, size * n_envs, OBS if kind != "dict" else spaces.Dict({"a": OBS}), ACT,
                          n_envs=n_envs, **kw)
    for tr in random_transitions(ref.observation_space, ACT, steps, n_envs):
        ref.add(*tr)
        ours.add(*tr)
    return ref, ours


@pytest.mark.parametrize(("kind", "kw"), [("replay", {}), ("dict", {}), ("nstep", {}),
                                          ("replay", {"optimize_memory_usage": True,
                                                      "handle_timeout_termination": False})])
@pytest.mark.parametrize("steps", [5, 23])  # not full, wrapped
def test_uniform_draws_sb3s_rows_and_leaves_the_envs_to_sb3s_read(kind, kw, steps):
    ref, ours = _filled(kind, 8, 3, steps, **kw)
    np.random.seed(7)  # noqa: NPY002
    draw = UniformSampler().sample(ours, 16)
    assert draw.envs is None  # left to SB3's _get_samples, which draws them next
    envs = np.random.randint(0, high=ours.n_envs, size=(16,))  # noqa: NPY002
    after = np.random.get_state()[1].copy()  # noqa: NPY002
    np.random.seed(7)  # noqa: NPY002
    seen = {}  # SB3's sample() with a _get_samples that draws the envs as SB3's does and reads nothing
    ref._get_samples = lambda rows, env=None: seen.setdefault(  # type: ignore[method-assign]
        "rows", (rows, np.random.randint(0, high=ref.n_envs, size=(len(rows),))))  # noqa: NPY002
    ref.sample(16)
    assert np.array_equal(draw.rows, seen["rows"][0]) and np.array_equal(envs, seen["rows"][1])
    assert np.array_equal(np.random.get_state()[1], after)  # noqa: NPY002


def test_uniform_with_a_generator_draws_from_it_alone():
    _, ours = _filled("replay", 8, 2, 20)
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    a = UniformSampler().sample(ours, 32, np.random.default_rng(3))
    b = UniformSampler().sample(ours, 32, np.random.default_rng(3))
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.envs, b.envs)
    assert a.rows.max() < ours.buffer_size and a.envs.max() < 2 and a.weights is None


def test_prioritized_sampler_is_the_buffers_draw():
    buf = CompressedPrioritizedReplayBuffer(16, OBS, ACT, "cpu", n_envs=2, alpha=0.7, beta=0.5)
    for tr in random_transitions(OBS, ACT, 8, 2):
        buf.add(*tr)
    buf.update_priorities(np.arange(16), np.arange(16) + 1.0)
    np.random.seed(1)  # noqa: NPY002
    draw = PrioritizedSampler().sample(buf, 8)
    np.random.seed(1)  # noqa: NPY002
    s = buf.sample(8)
    assert np.array_equal(draw.rows * 2 + draw.envs, s.indices)
    assert np.array_equal(draw.weights, s.weights.numpy())
    assert draw.generations is not None and len(draw.generations) == 8


def test_one_mass_formula_for_host_and_shards():
    p = np.array([0.0, 0.5, 3.0, 1e3])
    host = checked_update(np.arange(4), p, 0.6, 1e-3)[2]
    assert np.array_equal(host, masses_of(p, 0.6, 1e-3))
    assert np.array_equal(host, priority_masses(p, 0.6, 1e-3))
    assert np.array_equal(priority_masses(p, 0.6, 1e-3), (p + 1e-3) ** 0.6)
    with pytest.raises(ValueError, match="fit in float32"):
        priority_masses([1e30], 2.0, 0.0)
    assert priority_masses([1e30, np.nan], 2.0, 0.0, clamp=True)[0] == np.finfo(np.float32).max
    assert np.isnan(priority_masses([np.nan], 1.0, 0.0)).all()


def test_sampler_state_names_the_sampler():
    u, p = UniformSampler(), PrioritizedSampler()
    u.load_state_dict(u.state_dict())
    p.load_state_dict(p.state_dict())
    with pytest.raises(ValueError, match="uniform"):
        u.load_state_dict(p.state_dict())
    assert CompressedReplayBuffer._sampler.name == "uniform"
    assert CompressedPrioritizedReplayBuffer._sampler.name == "prioritized"
    assert Draw(np.zeros(1), np.zeros(1)).generations is None
