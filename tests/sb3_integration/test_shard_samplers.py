"""The Ray learner's split of a batch over shards (sb3_integration.samplers.shards)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_integration.samplers import PrioritizedShardSampler, UniformShardSampler

weights_st = st.lists(st.floats(0.0, 1e6), min_size=1, max_size=8).filter(lambda w: sum(w) > 0)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 600), weights=weights_st, seed=st.integers(0, 2**32 - 1))
def test_a_stratified_split_gives_each_shard_its_share_within_two(n, weights, seed) -> None:
    w = np.array(weights)
    counts = PrioritizedShardSampler().counts(n, w, np.random.default_rng(seed))
    share = n * w / w.sum()
    assert counts.sum() == n
    assert (np.abs(counts - share) < 2).all()
    assert (counts[w == 0] == 0).all()


@pytest.mark.parametrize("scale", [5e-324, 1e-310, 1e-300, 1.0, 1e300])
def test_a_stratified_split_does_not_depend_on_the_scale_of_the_masses(scale) -> None:
    """Found by the property above: two subnormal masses sent a whole batch to the first shard."""
    counts = PrioritizedShardSampler().counts(4, np.array([scale, scale]), np.random.default_rng(0))
    assert counts.tolist() == [2, 2]


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 600), weights=weights_st, seed=st.integers(0, 2**32 - 1))
def test_a_uniform_split_sums_to_n_and_skips_empty_shards(n, weights, seed) -> None:
    w = np.array(weights)
    counts = UniformShardSampler().counts(n, w, np.random.default_rng(seed))
    assert counts.sum() == n and (counts >= 0).all() and (counts[w == 0] == 0).all()


def test_a_uniform_split_is_multinomial_by_size() -> None:
    """Over many batches, each shard's mean share is n * size / total (4 sigma)."""
    sampler, rng = UniformShardSampler(), np.random.default_rng(0)
    sizes = np.array([sampler.weight(s, 123.0) for s in (100, 300, 600)])
    draws = np.stack([sampler.counts(32, sizes, rng) for _ in range(4000)])
    p = sizes / sizes.sum()
    sigma = np.sqrt(32 * p * (1 - p) / len(draws))
    assert np.abs(draws.mean(0) - 32 * p).max() < 4 * sigma.max()


@pytest.mark.parametrize(("sampler", "expected"), [(UniformShardSampler(), 7.0), (PrioritizedShardSampler(), 2.5)])
def test_the_weight_is_the_size_or_the_mass(sampler, expected) -> None:
    assert sampler.weight(7, 2.5) == expected
