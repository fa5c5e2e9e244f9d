"""DistributedReplayBuffer fails as CompressedReplayBuffer fails, side by side, without Ray.

Both go through SB3's checks (:mod:`sb3_integration.buffers.sb3_checks`; the distributed
buffer through :class:`~sb3_integration.buffers.sb3_front.SB3ReplayFront`): the same bad
``add()`` / ``sample()`` / constructor arguments raise the same exception type with the same
message, before the distributed buffer calls its service. The service handle here is
built from its config (no Ray); its writer is replaced by one that fails the test if an
argument got through to it.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_integration import CompressedReplayBuffer
from sb3_integration.distributed import DistributedReplayBuffer
from sb3_integration.distributed import sampler as sampler_mod
from sb3_integration.distributed.actors import ServiceConfig
from sb3_integration.distributed.service import ReplayService, _spec
from sb3_integration.errors import DataLossError

OBS = spaces.Box(0, 255, (4, 8, 8), np.uint8)
ACT = spaces.Discrete(3)
N = 2
LIMITER = {"kind": "min_size", "min_size": 1, "max_insert_batch": 64, "max_sample_batch": 1024}


class NoWriter:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a bad argument reached the service's writer")


@pytest.fixture(autouse=True)
def no_service_calls(monkeypatch):
    monkeypatch.setattr(sampler_mod, "ReplayWriter", NoWriter)


def service(obs_space=OBS, act_space=ACT):
    return ReplayService("errors", ServiceConfig("errors", _spec(obs_space, act_space, 100, 4, None), 1, "zstd3",
                                                 LIMITER))


def pair(*args, **kwargs):
    return (CompressedReplayBuffer(100, OBS, ACT, "cpu", *args, **kwargs),
            DistributedReplayBuffer(100, OBS, ACT, "cpu", *args, service=service(), **kwargs))


def outcome(call):
    try:
        call()
    except Exception as e:  # the exception's type and message are what is compared
        return type(e), str(e).replace("DistributedReplayBuffer", "<buffer>").replace("CompressedReplayBuffer",
                                                                                        "<buffer>")
    return None


GOOD = {"obs": np.zeros((N, 4, 8, 8), np.uint8), "next_obs": np.ones((N, 4, 8, 8), np.uint8),
        "action": np.zeros((N, 1)), "reward": np.zeros(N), "done": np.zeros(N), "infos": [{}] * N}
BAD_ADDS = {
    "obs of another shape": {"obs": np.zeros((N, 4, 8, 7), np.uint8)},
    "next_obs of another shape": {"next_obs": np.zeros((N, 4, 9, 8), np.uint8)},
    "obs with fractions": {"obs": np.full((N, 4, 8, 8), 0.5)},
    "obs out of uint8's range": {"obs": np.full((N, 4, 8, 8), 300)},
    "one env's obs for two": {"obs": np.zeros((1, 4, 8, 8), np.uint8)},
    "a ragged list": {"obs": [[1, 2], [3]]},
    "obs None": {"obs": None},
    "action of another size": {"action": np.zeros((N, 2))},
    "action a list": {"action": [0, 1]},
    "reward of another shape": {"reward": np.zeros(3)},
    "reward text": {"reward": np.array(["a", "b"])},
    "done of another shape": {"done": np.zeros(3)},
    "infos None": {"infos": None},
    "infos not dicts": {"infos": [1, 2]},
}


@pytest.mark.parametrize("bad", list(BAD_ADDS), ids=list(BAD_ADDS))
def test_a_bad_add_fails_the_same_way(bad):
    ours, dist = pair(n_envs=N)
    want = outcome(lambda: ours.add(**{**GOOD, **BAD_ADDS[bad]}))
    got = outcome(lambda: dist.add(**{**GOOD, **BAD_ADDS[bad]}))
    assert want is not None and got == want
    assert issubclass(got[0], ValueError) or issubclass(got[0], (TypeError, AttributeError))


def test_lossy_observations_are_data_loss_errors_in_both():
    ours, dist = pair(n_envs=N)
    for buf in (ours, dist):
        with pytest.raises(DataLossError, match="obs"):
            buf.add(**{**GOOD, "obs": np.full((N, 4, 8, 8), 0.5)})


@pytest.mark.parametrize("batch_size", [-1, 2.5, "a", None, (2, 3)], ids=repr)
def test_a_bad_batch_size_fails_the_same_way(batch_size):
    ours, dist = pair(n_envs=N)
    ours.add(**GOOD)  # with data: SB3's own sample() runs
    got = outcome(lambda: dist.sample(batch_size))
    assert got is not None
    if batch_size is None or batch_size == (2, 3):  # SB3 fails further on, or draws a 2-D batch: an int is required
        assert got == (TypeError, f"batch_size must be an int, got {type(batch_size).__name__} {batch_size!r}")
        assert batch_size is not None or outcome(lambda: ours.sample(batch_size))[0] is TypeError
        return
    sb3 = ReplayBuffer(100, OBS, ACT, "cpu", n_envs=N)
    sb3.add(**GOOD)
    assert got == outcome(lambda: ours.sample(batch_size)) == outcome(lambda: sb3.sample(batch_size))


def test_an_empty_batch_needs_no_service():
    _, dist = pair(n_envs=N)
    batch = dist.sample(0)
    assert batch.observations.shape == (0, 4, 8, 8) and batch.actions.shape == (0, 1)


@pytest.mark.parametrize("kwargs", [{"n_envs": 0}, {"optimize_memory_usage": True},
                                    {"n_envs": 1.5}], ids=repr)
def test_sb3s_constructor_checks_fail_the_same_way(kwargs):
    want = outcome(lambda: CompressedReplayBuffer(100, OBS, ACT, "cpu", **kwargs))
    got = outcome(lambda: DistributedReplayBuffer(100, OBS, ACT, "cpu", service=service(), **kwargs))
    assert want is not None and got == want


def test_optimize_memory_usage_alone_is_refused_as_before():
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        DistributedReplayBuffer(100, OBS, ACT, "cpu", optimize_memory_usage=True, handle_timeout_termination=False,
                                service=service())


def test_good_input_reaches_the_writer_as_sb3_stores_it(monkeypatch):
    sent = []

    class Recorder:
        def __init__(self, *args, **kwargs):
            pass

        def add(self, *args):
            sent.append(args)

    monkeypatch.setattr(sampler_mod, "ReplayWriter", Recorder)
    _, dist = pair(n_envs=N)
    obs = np.arange(N * 4 * 8 * 8).reshape(N, 4, 8, 8) % 200  # int64 values that fit uint8: stored as uint8
    dist.add(obs, obs, np.array([[1], [2]]), [0.5, 1.5], [True, False],
             [{"TimeLimit.truncated": True}, {}])
    (o, x, a, r, d, infos), = sent
    assert o.dtype == np.uint8 and np.array_equal(o, obs) and x.shape == (N, 4, 8, 8)
    assert a.dtype == np.int64 and a.shape == (N, 1) and r.dtype == np.float32 and d.tolist() == [1.0, 0.0]
    assert infos[0]["TimeLimit.truncated"] is True
