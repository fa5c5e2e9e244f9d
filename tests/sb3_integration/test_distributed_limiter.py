"""The rate limiter alone (no Ray): Reverb's rules, blocking, timeouts, cancellation, deadlock bands."""

from __future__ import annotations

import math
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sb3_integration.distributed import LimiterClosed, RateLimiter, RateLimiterTimeout


def test_min_size_gates_sampling_only():
    lim = RateLimiter.min_size_limiter(10, max_insert_batch=100, max_sample_batch=100)
    assert not lim.can_sample(1)
    lim.acquire_insert(9, timeout=0)
    assert not lim.can_sample(1)
    with pytest.raises(RateLimiterTimeout, match="sample of 1 items timed out"):
        lim.acquire_sample(1, timeout=0.05)
    lim.acquire_insert(1, timeout=0)
    for _ in range(50):  # no ratio: any number of samples
        lim.acquire_sample(100, timeout=0)
    assert lim.can_insert(100)


def test_sample_to_insert_ratio_holds_both_sides_within_the_band():
    # spi 2, min_size 4, error_buffer 10: the band is [8 - 10, 8 + 10] = [-2, 18]
    lim = RateLimiter.sample_to_insert_ratio(2.0, min_size=4, error_buffer=10, max_insert_batch=5,
                                             max_sample_batch=8)
    assert not lim.can_sample(1)
    lim.acquire_insert(4, timeout=0)  # up to min_size inserts are always allowed
    assert lim.diff == 8 and lim.can_sample(1)
    assert lim.can_insert(5) and not lim.can_insert(6)  # 9 * 2 = 18 is the top; 10 * 2 is over
    lim.acquire_insert(5, timeout=0)
    with pytest.raises(RateLimiterTimeout, match="insert of 1 items"):
        lim.acquire_insert(1, timeout=0.01)
    lim.acquire_sample(8, timeout=0)
    lim.acquire_sample(8, timeout=0)
    assert lim.diff == 2
    assert lim.can_sample(4) and not lim.can_sample(5)  # 2 - 4 = -2 is the bottom
    assert lim.state()["samples"] == 16


@pytest.mark.parametrize("spi, min_size, err", [(1.0, 10, 9), (4.0, 3, 20), (0.25, 8, 4)])
def test_the_band_is_reverbs(spi, min_size, err):
    lim = RateLimiter.sample_to_insert_ratio(spi, min_size, err, max_insert_batch=min_size)
    assert lim.min_diff == spi * min_size - err and lim.max_diff == spi * min_size + err
    lim.acquire_insert(min_size, timeout=0)
    while lim.can_insert(1):
        lim.acquire_insert(1, timeout=0)
    assert lim.diff <= lim.max_diff < lim.diff + spi  # stopped at the top of the band
    while lim.can_sample(1):
        lim.acquire_sample(1, timeout=0)
    assert lim.diff - 1 < lim.min_diff <= lim.diff  # and at the bottom


def test_bands_that_can_deadlock_are_refused():
    with pytest.raises(ValueError, match="can deadlock"):
        RateLimiter.sample_to_insert_ratio(4.0, 100, error_buffer=3.9)  # width 7.8 < 2 * 4
    RateLimiter.sample_to_insert_ratio(4.0, 100, error_buffer=4.0)  # width 8: Reverb's minimum
    with pytest.raises(ValueError, match="one insert batch and one sample batch"):
        RateLimiter.sample_to_insert_ratio(1.0, 100, error_buffer=100, max_insert_batch=256,
                                           max_sample_batch=256)
    with pytest.raises(ValueError, match="deadlock the start"):
        RateLimiter.sample_to_insert_ratio(1.0, 10, error_buffer=20, max_insert_batch=32)
    with pytest.raises(ValueError, match="samples_per_insert"):
        RateLimiter(0.0)
    with pytest.raises(ValueError, match="min_size"):
        RateLimiter.min_size_limiter(0)


def test_a_batch_larger_than_the_limiter_was_built_for_is_refused_at_the_call():
    lim = RateLimiter.min_size_limiter(1, max_insert_batch=8, max_sample_batch=4)
    with pytest.raises(ValueError, match=r"outside 0\.\.8"):
        lim.acquire_insert(9, timeout=0)
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        lim.acquire_sample(5, timeout=0)


def test_a_blocked_insert_proceeds_when_samples_make_room():
    lim = RateLimiter.sample_to_insert_ratio(1.0, min_size=2, error_buffer=4, max_insert_batch=2)
    for _ in range(3):
        lim.acquire_insert(2, timeout=0)  # diff 6 = max_diff
    assert not lim.can_insert(1)
    done = threading.Event()

    def insert():
        lim.acquire_insert(1, timeout=10)
        done.set()

    t = threading.Thread(target=insert)
    t.start()
    assert not done.wait(0.1)  # blocked
    lim.acquire_sample(1, timeout=0)
    assert done.wait(5)
    t.join(5)
    assert lim.inserts == 7 and lim.samples == 1


def test_timeouts_wait_about_as_long_as_asked():
    lim = RateLimiter.min_size_limiter(5)
    t0 = time.monotonic()
    with pytest.raises(RateLimiterTimeout):
        lim.acquire_sample(1, timeout=0.2)
    waited = time.monotonic() - t0
    assert 0.15 <= waited < 5  # bounded, not forever (no timing claim beyond that)


def test_close_cancels_every_waiter_and_later_calls():
    lim = RateLimiter.min_size_limiter(5)
    errors: list[BaseException] = []

    def sample():
        try:
            lim.acquire_sample(1, timeout=30)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=sample) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    lim.close()
    for t in threads:
        t.join(5)
    assert len(errors) == 3 and all(isinstance(e, LimiterClosed) for e in errors)
    with pytest.raises(LimiterClosed):
        lim.acquire_insert(1, timeout=0)


@settings(max_examples=200, deadline=None)
@given(spi=st.sampled_from([0.25, 0.5, 1.0, 2.0, 8.0]), min_size=st.integers(1, 50),
       n=st.integers(1, 16), m=st.integers(1, 16), slack=st.floats(0, 50),
       ops=st.lists(st.tuples(st.booleans(), st.integers(1, 16)), max_size=300))
def test_a_valid_band_never_blocks_both_sides(spi, min_size, n, m, slack, ops):
    """Whatever the history, a full insert batch or a full sample batch is allowed (no deadlock)."""
    err = max(max(1.0, spi), (n * spi + m) / 2, (n - 1) * spi) + slack
    lim = RateLimiter.sample_to_insert_ratio(spi, min_size, err, max_insert_batch=n,
                                             max_sample_batch=m)
    for insert, k in ops:
        if insert and lim.can_insert(min(k, n)):
            lim.acquire_insert(min(k, n), timeout=0)
        elif not insert and lim.can_sample(min(k, m)):
            lim.acquire_sample(min(k, m), timeout=0)
        assert lim.can_insert(n) or lim.can_sample(m), lim.state()
        assert math.isfinite(lim.diff)
