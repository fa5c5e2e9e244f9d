"""A Ctrl-C at any point of the prioritized buffers' calls (injected at every traced event)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import count_events, interrupted, random_transitions
from gymnasium import spaces

from sb3_integration import (
    CompressedPrioritizedNStepReplayBuffer,
    CompressedPrioritizedReplayBuffer,
)

OBS = spaces.Box(0, 255, (2, 3, 3), np.uint8)
ACT = spaces.Discrete(3)


def _state(buf):  # type: ignore[no-untyped-def]
    st = buf.priority_index.state_dict()
    return st["masses"].copy(), st["generations"].copy(), st["max"], buf.priority_index.total


def _filled(cls=CompressedPrioritizedReplayBuffer, **kw):  # type: ignore[no-untyped-def]
    buf = cls(16, OBS, ACT, "cpu", n_envs=2, chunk_len=2, **kw)
    for tr in random_transitions(OBS, ACT, 11, 2):  # wrapped
        buf.add(*tr)
    return buf


def test_update_priorities_interrupted_is_all_or_nothing() -> None:
    probe = _filled()
    s = probe.sample(8)
    td = np.arange(8.0) * 3
    n = count_events(lambda: probe.update_priorities(s.indices, td))
    assert n > 10
    for at in range(1, n + 1):
        buf = _filled()
        np.random.seed(0)  # noqa: NPY002
        s = buf.sample(8)
        before = _state(buf)
        hit = interrupted(lambda b=buf, s=s: b.update_priorities(s.indices, td), at)
        after = _state(buf)
        done = _filled()
        np.random.seed(0)  # noqa: NPY002
        ref = done.sample(8)
        done.update_priorities(ref.indices, td)
        full = _state(done)
        same_as = [all(np.array_equal(x, y) for x, y in zip(after, other, strict=True)) for other in (before, full)]
        assert any(same_as), f"event {at}: a half-applied update"
        if not hit:
            assert same_as[1]


@pytest.mark.parametrize("cls", [CompressedPrioritizedReplayBuffer, CompressedPrioritizedNStepReplayBuffer])
def test_add_interrupted_then_repeated_leaves_priorities_as_one_add(cls) -> None:  # type: ignore[no-untyped-def]
    extra = list(random_transitions(OBS, ACT, 14, 2, seed=5))[-1]
    clean = _filled(cls)
    clean.update_priorities(np.arange(16), np.linspace(0, 4, 16))
    clean.add(*extra)
    want = _state(clean)
    probe = _filled(cls)
    n = count_events(lambda: probe.add(*extra))
    hits = 0
    for at in range(1, n + 1, max(1, n // 60)):
        buf = _filled(cls)
        buf.update_priorities(np.arange(16), np.linspace(0, 4, 16))
        pos = buf.pos
        if interrupted(lambda b=buf: b.add(*extra), at):
            hits += 1
            if buf.pos == pos:  # not committed (an interrupt after the commit leaves a whole add)
                buf.add(*extra)  # the add again, as a training loop would on the next step
            masses, _, mx, total = _state(buf)
            np.testing.assert_array_equal(masses, want[0])
            assert mx == want[2] and total == pytest.approx(want[3])
            assert buf.pos == clean.pos
            np.random.seed(1)  # noqa: NPY002
            s = buf.sample(16)
            assert (buf.priorities()[s.indices] > 0).all()
    assert hits > 30


@pytest.mark.parametrize("n_envs", [1, 2])
def test_sample_between_an_interrupted_add_and_its_retry_returns_only_stored_rows(n_envs) -> None:  # type: ignore[no-untyped-def]
    trs = list(random_transitions(OBS, ACT, 6, n_envs, seed=3))
    probe = CompressedPrioritizedReplayBuffer(16, OBS, ACT, "cpu", n_envs=n_envs, chunk_len=2)
    for tr in trs[:5]:
        probe.add(*tr)
    n = count_events(lambda: probe.add(*trs[5]))
    hits = 0
    for at in range(1, n + 1, max(1, n // 40)):
        buf = CompressedPrioritizedReplayBuffer(16, OBS, ACT, "cpu", n_envs=n_envs, chunk_len=2)
        for tr in trs[:5]:
            buf.add(*tr)
        if not interrupted(lambda b=buf: b.add(*trs[5]), at) or buf.pos != 5:
            continue  # completed, or interrupted after its commit
        hits += 1
        stored = buf.pos * n_envs
        for seed in range(5):
            np.random.seed(seed)  # noqa: NPY002
            s = buf.sample(64)
            assert s.indices.max() < stored, f"event {at}: a row that is not stored was drawn"
            buf.update_priorities(s.indices, np.ones(64))  # the sample's indices are all accepted
        buf.add(*trs[5])  # the retry stores the row with a mass again
        assert buf.pos == 6 and (buf.priorities()[: 6 * n_envs] > 0).all()
    assert hits > 10
