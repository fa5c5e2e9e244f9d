"""Fixtures and helpers shared by the test modules (which never import each other)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
)

# imported here, not in a helper: the module defines @given tests, and importing it first
# inside a @given test trips Hypothesis' nested_given health check
from sb3_integration.testing import stack_stream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))  # the one Atari collector
from atari_data import collect_stacked


@pytest.fixture(autouse=True)
def _frame_engine_for_small_observations(request, monkeypatch):
    """Keep ``observation_storage="auto"`` compressing every key, except in tests marked ``storage_rule``.

    The tests of the frame engine, persistence and bit-exactness use tiny observations
    (a (4, 6, 5) stack, a 3-float vector) to exercise the compressed store; under the real
    rule (:mod:`sb3_integration.engine.raw`) such keys would be stored raw and those tests
    would no longer reach the code they test. Tests of the rule itself, and SB3's own suite
    with our classes, are marked ``storage_rule`` and run with the rule as shipped.
    ``CHUNKSTORE_TESTS_STORAGE_RULE=1`` runs every test with the rule as shipped.
    """

    if request.node.get_closest_marker("storage_rule") is None and not os.environ.get("CHUNKSTORE_TESTS_STORAGE_RULE"):
        from sb3_integration.engine import raw

        monkeypatch.setattr(raw, "RAW_ITEM_BYTES", -1)
        monkeypatch.setattr(raw, "RAW_BELOW_RATIO", 0.0)
    yield


@pytest.fixture
def one_torch_thread():
    """Small nets train faster on one thread on a busy 2-core box; compared runs share the setting."""
    before = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(before)


@pytest.fixture(params=["native", "python"])
def read_path(request):
    """Run a test on the native read path and again with it forced off (the Python fallback)."""
    from chunkstore import native

    if request.param == "python":
        with native.disabled():
            yield request.param
    else:
        yield request.param


def reseal_checksums(path) -> None:
    """Recompute a chunkstore file's metadata checksums after a test edited it.

    Whoever crafts a file also writes its checksums: tests of what lies beneath the
    checksums (sizes, ranges, chunk tables) edit a file, then reseal it.
    """
    import json

    import h5py

    from chunkstore.hdf5._layout import (
        META,
        array_record,
        extra_record,
        header_record,
        index_record,
    )
    from chunkstore.hdf5.checksum import crc32, record_crc

    with h5py.File(path, "r+") as f:
        sums = {"arrays": {}, "extras": {}}
        version = int(f.attrs["format_version"])
        for name in json.loads(f.attrs["arrays"]):
            dset, group = f[name], f[f"{META}/arrays/{name}"]
            config = dset.attrs["codec_config"] if "codec_config" in dset.attrs else (
                group["codec_config"][()].tobytes().decode())
            tail = (int(group["tail"].shape[0]), int(group["tail"].attrs["crc32"])) if "tail" in group else None
            sizes = group["nbytes"][()] if version >= 3 else None  # format 3 lists chunk sizes
            sums["arrays"][name] = {
                "meta": record_crc(array_record(dset, version)), "codec": crc32(config.encode()),
                "index": record_crc(index_record(group["chunks"][()], group["crc32"][()], tail, sizes))}
        for name in json.loads(f.attrs["extras"]):
            sums["extras"][name] = record_crc(extra_record(f[name]))
        sums["header"] = record_crc(header_record(f))
        f.attrs["checksums"] = json.dumps(sums)


@pytest.fixture
def reseal():
    """:func:`reseal_checksums`, for tests that craft files."""
    return reseal_checksums



# == shared helpers (tests import them from conftest; test modules never import each other) =====
@functools.lru_cache(maxsize=8)
def collect_atari(game, n_steps, n_envs=1, seed=0, channels_last=False, max_episode_steps=1000):
    """Real Atari transitions as SB3 hands them to ``add()`` (cached on disk under ./data and per process)."""
    return collect_stacked(game, n_steps, n_envs, seed, channels_last=channels_last,
                           max_episode_steps=max_episode_steps)


def frame_stack_stream(T, n_envs, k=4, frame=(1, 6, 5), channels_last=False, ep_len=11, dtype=np.uint8, seed=0):
    """(obs, next_obs) pairs as VecFrameStack + SB3's _store_transition produce them."""
    return stack_stream(T, n_envs, k=k, frame=frame, channels_last=channels_last, ep_len=ep_len, dtype=dtype,
                        seed=seed, high=200)


PAIRS = {
    "replay": (ReplayBuffer, CompressedReplayBuffer),
    "dict": (DictReplayBuffer, CompressedDictReplayBuffer),
    "nstep": (NStepReplayBuffer, CompressedNStepReplayBuffer),
}

def assert_same(a, b, where=""):
    if a is None or b is None:
        assert a is None and b is None, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k}]")
    else:
        assert a.dtype == b.dtype, f"{where}: {a.dtype} != {b.dtype}"
        assert a.shape == b.shape and th.equal(a, b), where

def assert_samples_equal(ref, ours, batch_size, seed, env=None, where=""):
    # SB3 samples from numpy's global legacy RNG: seed it the same way before each buffer
    np.random.seed(seed)  # noqa: NPY002
    sa = ref.sample(batch_size, env=env)
    np.random.seed(seed)  # noqa: NPY002
    sb = ours.sample(batch_size, env=env)
    assert type(sa) is type(sb)
    for field in sa._fields:
        assert_same(getattr(sa, field), getattr(sb, field), f"{where} {field}")

def make_pair(kind, buffer_size, obs_space, act_space, **kw):
    ours_kw = {k: kw.pop(k) for k in ("chunk_len", "compression_method", "cache_bytes", "small_arrays", "tier",
                                      "buffer_device", "heap_bytes", "observation_storage") if k in kw}
    ref_cls, our_cls = PAIRS[kind]
    ours_kw.setdefault("chunk_len", 8)
    return (ref_cls(buffer_size, obs_space, act_space, "cpu", **kw),
            our_cls(buffer_size, obs_space, act_space, "cpu", **kw, **ours_kw))

def random_transitions(obs_space, act_space, T, n_envs, ep_len=9, seed=0):
    """next_obs[t] == obs[t+1] except at episode ends, with some time-limit truncations."""
    obs_space.seed(seed)
    act_space.seed(seed + 1)
    rng = np.random.default_rng(seed)

    def batch():
        samples = [obs_space.sample() for _ in range(n_envs)]
        if isinstance(obs_space, spaces.Dict):
            return {k: np.stack([s[k] for s in samples]) for k in obs_space.spaces}
        return np.stack([np.asarray(s) for s in samples])

    def put(dst, e, src):
        if isinstance(dst, dict):
            for k in dst:
                dst[k][e] = src[k][e]
        else:
            dst[e] = src[e]

    obs = batch()
    for t in range(T):
        nxt = batch()
        done = (t + 1 + np.arange(n_envs)) % ep_len == 0
        trunc = done & (rng.random(n_envs) < 0.5)
        infos = [{"TimeLimit.truncated": bool(x)} for x in trunc]
        actions = np.stack([np.asarray(act_space.sample()) for _ in range(n_envs)])
        yield obs, nxt, actions, rng.standard_normal(n_envs).astype(np.float32), done, infos
        following = {k: v.copy() for k, v in nxt.items()} if isinstance(nxt, dict) else nxt.copy()
        fresh = batch()
        for e in np.flatnonzero(done):
            put(following, e, fresh)
        obs = following

def drive(ref, ours, transitions, every=7, batch_size=32, env=None):
    n = 0
    for t, tr in enumerate(transitions):
        ref.add(*tr)
        ours.add(*tr)
        if t % every == every - 1:
            for seed in (t, t + 1):
                assert_samples_equal(ref, ours, batch_size, seed, env=env, where=f"t={t}")
        n += 1
    assert ref.pos == ours.pos and ref.full == ours.full
    for name in ("actions", "rewards", "dones", "timeouts"):  # raw arrays or compressed columns
        assert np.array_equal(np.asarray(getattr(ours, name)), getattr(ref, name)), name
    return n

def assert_views_equal(ref, ours):
    if isinstance(ref.observations, dict):
        for k in ref.observations:
            assert np.array_equal(np.asarray(ours.observations[k]), ref.observations[k])
            assert np.array_equal(np.asarray(ours.next_observations[k]), ref.next_observations[k])
    else:
        assert np.array_equal(np.asarray(ours.observations), ref.observations)
        if not ref.optimize_memory_usage:
            assert np.array_equal(np.asarray(ours.next_observations), ref.next_observations)


# == Ctrl-C at a chosen point: deterministic interrupts for the crash-safety tests =============
_TRACED = tuple(str(Path(m.__file__).resolve().parent) for m in
                (__import__("chunkstore"), __import__("sb3_integration"),
                 __import__("stable_baselines3.her", fromlist=["her"])))


@functools.cache
def _with_line(filename: str, lineno: int) -> bool:
    import linecache

    return linecache.getline(filename, lineno).lstrip().startswith(("with ", "async with ", "try:"))


def _is_with(frame) -> bool:
    """A line event on a ``with`` statement: the tracer sees one as the block is left, before
    ``__exit__`` runs, where no signal can land (CPython checks for signals only after the
    ``__exit__`` call); an exception there would skip the exit as no Ctrl-C can. Likewise a
    ``try:`` line: its NOP is where no signal is checked, and CPython 3.11's exception table
    leaves a nested ``try:``'s NOP outside the enclosing ``try``, so an exception raised there
    skips the enclosing ``finally`` as no Ctrl-C can."""
    return _with_line(frame.f_code.co_filename, frame.f_lineno)


class Interrupt:
    """Raise KeyboardInterrupt at the ``at``-th traced event (call, line, return) in chunkstore,
    sb3_integration and SB3's HER code, as a Ctrl-C landing there would; ``at=0`` only counts.

    A 'return' event raising means "interrupted just after that function returned" (after a tier
    released a chunk, say), which is where an asynchronous exception does the most harm.

    Examples
    --------
    >>> with Interrupt(0) as counter:
    ...     buffer.add(*transition)           # doctest: +SKIP
    >>> counter.events                          # doctest: +SKIP
    """

    def __init__(self, at: int = 0, also: tuple[str, ...] = ()) -> None:
        self.at, self.events, self.fired = at, 0, False
        self.traced = _TRACED + tuple(also)  # more source directories or files to interrupt in

    def _global(self, frame, event, arg):
        return self._local if frame.f_code.co_filename.startswith(self.traced) else None

    def _local(self, frame, event, arg):
        if not self.fired and not (event == "line" and _is_with(frame)):
            self.events += 1
            if self.events == self.at:
                self.fired = True
                raise KeyboardInterrupt(f"injected at event {self.at}")
        return self._local

    def __enter__(self) -> Interrupt:
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def interrupted(fn, at: int, also: tuple[str, ...] = ()) -> bool:
    """Run ``fn()`` with a KeyboardInterrupt injected at event ``at``; True if it was raised."""
    try:
        with Interrupt(at, also):
            fn()
    except KeyboardInterrupt:
        return True
    return False


def count_events(fn, also: tuple[str, ...] = ()) -> int:
    with Interrupt(0, also) as counter:
        fn()
    return counter.events
