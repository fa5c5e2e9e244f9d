"""Ctrl-C must never corrupt a buffer: an interrupt anywhere in a call leaves it as before or after.

A KeyboardInterrupt is injected at the N-th traced event (every call, line and return
in chunkstore, sb3_integration and SB3's HER code; see ``conftest.Interrupt``) of one
``add``, ``reset``, ``sample`` or ``save``, for many N. After each case the buffer must
equal SB3's buffer fed the same *accepted* transitions (an add is accepted when ``pos``
moved) on every row but the one being written, and after the next adds on every row,
with identical samples; it must keep working (no UnknownRefError, no held lock), and
its saved file must load equal. The default run samples the positions; the slow run
(``-m slow``) tries about five times as many, and interrupts real Pong stacks with real signals
(``signal.setitimer``) in subprocesses, where crashes and hangs would show.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch as th
from conftest import (
    Interrupt,
    assert_samples_equal,
    count_events,
    frame_stack_stream,
    interrupted,
    make_pair,
)
from gymnasium import spaces

from chunkstore import DiskTier, HybridTier, hdf5
from chunkstore.array import _training

REPO = Path(__file__).resolve().parent.parent
SPACE = spaces.Box(0, 255, (4, 6, 5), np.uint8)
ACT = spaces.Discrete(3)
ROWS, CHUNK = 16, 4


def transitions(T: int, n_envs: int = 1, seed: int = 0) -> list[tuple]:
    rng = np.random.default_rng(seed + 100)
    out = []
    for t, (obs, nxt) in enumerate(frame_stack_stream(T, n_envs, ep_len=5, seed=seed)):
        done = np.array([(t + e) % 5 == 4 for e in range(n_envs)])
        infos = [{"TimeLimit.truncated": bool(d and t % 2)} for d in done]
        out.append((obs, nxt, rng.integers(0, 3, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32),
                    done, infos))
    return out


def dict_tr(tr: tuple) -> tuple:
    obs, nxt, *rest = tr
    return ({"img": obs, "vec": obs[:, 0, 0, :3].astype(np.float32)},
            {"img": nxt, "vec": nxt[:, 0, 0, :3].astype(np.float32)}, *rest)


DICT_SPACE = spaces.Dict({"img": SPACE, "vec": spaces.Box(0, 255, (3,), np.float32)})


def tier_factory(kind: str, tmp_path: Path):
    if kind == "disk":
        return lambda: DiskTier(tmp_path, segment_bytes=1 << 10)
    if kind == "hybrid":
        return lambda: HybridTier(1 << 11, tmp_path, segment_bytes=1 << 10)
    return None


def build(kind: str, tier: str, tmp_path: Path, n_envs: int = 1):
    """SB3's buffer and ours; ``tier`` "device": frames on ``buffer_device="cpu"`` (a heap that spills)."""
    space = DICT_SPACE if kind == "dict" else SPACE
    kw = {"n_envs": n_envs, "chunk_len": CHUNK, "compression_method": "zstd3"}
    if tier in ("disk", "hybrid"):
        kw["tier"] = tier_factory(tier, tmp_path)
    if tier == "device":
        kw.update(buffer_device="cpu", heap_bytes=1 << 12)
    ref, ours = make_pair(kind, ROWS * n_envs, space, ACT, **kw)
    return ref, ours


def feed(bufs, trs, kind):
    for tr in trs:
        tr = dict_tr(tr) if kind == "dict" else tr
        for b in bufs:
            b.add(*tr)


def lazy_reload(ours, tmp_path: Path, name: str):
    """The buffer saved and loaded lazily: its chunks in a FileTier, new ones in RAM."""
    path = tmp_path / f"{name}.h5"
    ours.save(path)
    ours.close()
    return type(ours).load(path, device="cpu")


def assert_rows_equal(ref, ours, skip=None) -> None:
    """Every row SB3 can sample equal to SB3's, but row ``skip`` (the one written when interrupted)."""
    assert (ours.pos, ours.full) == (ref.pos, ref.full)
    live = ref.buffer_size if ref.full else ref.pos  # after reset() SB3 keeps stale rows it never reads
    rows = np.array([r for r in range(live) if r != skip], dtype=np.int64)
    for name in ("observations", "next_observations"):
        a, b = getattr(ref, name), getattr(ours, name)
        for key in (a if isinstance(a, dict) else [None]):
            x = a if key is None else a[key]
            y = np.asarray(b if key is None else b[key])
            assert np.array_equal(y[rows], x[rows]), f"{name}[{key}] differs on a row other than {skip}"
    for name in ("actions", "rewards", "dones", "timeouts"):
        assert np.array_equal(np.asarray(getattr(ours, name))[rows], getattr(ref, name)[rows]), name


def check_after_interrupt(ref, ours, before, tr, more, kind, tmp_path) -> None:
    accepted = (ours.pos, ours.full) != before
    if accepted:
        ref.add(*(dict_tr(tr) if kind == "dict" else tr))
    assert (ours.pos, ours.full) == (ref.pos, ref.full)
    assert_rows_equal(ref, ours, skip=None if accepted else ours.pos)
    feed([ref, ours], more, kind)  # keeps training: the torn row is rewritten
    assert_rows_equal(ref, ours)
    for seed in (1, 2):
        assert_samples_equal(ref, ours, 8, seed, where="after the interrupt")
    path = tmp_path / "after.h5"
    ours.save(path)
    assert hdf5.verify(path) == []
    loaded = type(ours).load(path, device="cpu")
    assert_rows_equal(ref, loaded)
    loaded.close()


def positions(total: int, budget: int | None, seed: int) -> list[int]:
    """Event positions to interrupt at: all of them, or ``budget`` spread over the whole call."""
    if budget is None or budget >= total:
        return list(range(1, total + 1))
    rng = np.random.default_rng(seed)
    return sorted({1, total, *rng.choice(np.arange(1, total + 1), budget - 2, replace=False).tolist()})


def run_add_cases(kind, tier, tmp_path, k, budget, n_envs=1) -> int:
    trs = transitions(k + 6, n_envs, seed=k)

    def prepared():
        ref, ours = build(kind, tier, tmp_path, n_envs)
        feed([ref, ours], trs[:k], kind)
        if tier == "file":
            ours = lazy_reload(ours, tmp_path, f"prefix{k}")
        return ref, ours

    ref, ours = prepared()
    total = count_events(lambda: ours.add(*(dict_tr(trs[k]) if kind == "dict" else trs[k])))
    ours.close()
    cases = 0
    for at in positions(total, budget, seed=k):
        ref, ours = prepared()
        before = (ours.pos, ours.full)
        tr = trs[k]
        # (a later add may take fewer events than the counted one, once caches are warm: then
        # the interrupt never lands and the add simply completes, which is checked all the same)
        interrupted(lambda ours=ours, tr=tr: ours.add(*(dict_tr(tr) if kind == "dict" else tr)), at)
        check_after_interrupt(ref, ours, before, tr, trs[k + 1:k + 6], kind, tmp_path)
        ours.close()
        cases += 1
    return cases


#: which add of a 16-row buffer is interrupted: the first (layout still undetected), the one that
#: decides the layout, a ring growth, the wrap, and later adds that release and reuse chunks
ADDS = (0, 1, 6, 15, 16, 23)


@pytest.mark.parametrize("tier", ["memory", "disk", "hybrid", "file", "device"])
@pytest.mark.parametrize("kind", ["replay", "dict", "nstep"])
def test_an_interrupt_anywhere_in_add_leaves_every_other_row_intact(kind, tier, tmp_path):
    budget = 40 if (kind, tier) == ("replay", "memory") else 5 if tier == "device" else 8
    cases = sum(run_add_cases(kind, tier, tmp_path, k, budget) for k in ADDS)
    assert cases >= min(budget, 6) * len(ADDS)


@pytest.mark.parametrize("tier", ["memory", "device"])
@pytest.mark.parametrize("kind", ["replay", "dict", "nstep"])
def test_an_interrupt_anywhere_in_add_with_two_envs(kind, tier, tmp_path):
    """Two envs: a row is two streams per key; an interrupt between them tears only that row."""
    adds = (1, 6, 16, 23)
    cases = sum(run_add_cases(kind, tier, tmp_path, k, 4, n_envs=2) for k in adds)
    assert cases >= 4 * len(adds)


#: positions per interrupted add in the slow run (an add traces 150-3,100 events; a case costs
#: 0.2-2 s with its save and load, so every position of every add was 50 minutes of CI; these
#: budgets took 26 minutes at 80 / 40 / 15 on a loaded 2-core box)
@pytest.mark.slow
@pytest.mark.parametrize("kind, tier, budget", [
    ("replay", "memory", 50), ("dict", "memory", 50), ("nstep", "memory", 50),
    ("replay", "disk", 25), ("replay", "hybrid", 25), ("replay", "file", 25), ("dict", "file", 25),
    ("nstep", "hybrid", 25), ("dict", "device", 10), ("nstep", "device", 10)])
def test_many_interrupt_points_of_add(kind, tier, budget, tmp_path):
    for k in ADDS:
        run_add_cases(kind, tier, tmp_path, k, budget)


@pytest.mark.slow
def test_more_interrupt_points_of_a_dict_add_with_two_envs_on_the_device(tmp_path):
    for k in ADDS:
        run_add_cases("dict", "device", tmp_path, k, 6, n_envs=2)


def test_an_interrupt_while_the_codec_trains(monkeypatch, tmp_path):
    """The add that trains the dictionary re-encodes every chunk: interrupted anywhere, nothing is lost."""
    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", 30 * 6 * 5)
    trs = transitions(20)
    k = 12

    def prepared():
        ref, ours = make_pair("replay", ROWS, SPACE, ACT, chunk_len=CHUNK, compression_method="zstd3+dict")
        feed([ref, ours], trs[:k], "replay")
        return ref, ours

    ref, ours = prepared()
    total = count_events(lambda: [ours.add(*tr) for tr in trs[k:k + 4]])
    assert ours.frame_stores[None].frames.codec.name != "zstd/3+dict" or total  # trained (or kept plain)
    for at in positions(total, 60, seed=3):
        ref, ours = prepared()
        accepted = 0
        try:
            with Interrupt(at):
                for tr in trs[k:k + 4]:
                    before = (ours.pos, ours.full)
                    ours.add(*tr)
                    accepted += 1
        except KeyboardInterrupt:
            if (ours.pos, ours.full) != before:
                accepted += 1
        feed([ref], trs[k:k + accepted], "replay")
        check_after_interrupt(ref, ours, (ours.pos, ours.full), trs[0], trs[k + 4:k + 8], "replay", tmp_path)


# -- HER and the rollout buffers -----------------------------------------------------------------
def her_pair(image: bool = True, n_envs: int = 1, device: str | None = None):
    """SB3's HER buffer and ours on BitFlippingEnv: image observations (goals are vectors) or
    every key a float vector; ``device``: our observations on ``buffer_device``."""
    from stable_baselines3 import HerReplayBuffer
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    from sb3_integration import CompressedHerReplayBuffer

    env = DummyVecEnv([lambda: BitFlippingEnv(n_bits=6, continuous=True, image_obs_space=image, max_steps=5)
                       for _ in range(n_envs)])
    env.seed(0)
    kw = {"env": env, "device": "cpu", "n_sampled_goal": 2, "goal_selection_strategy": "future", "n_envs": n_envs}
    ref = HerReplayBuffer(24 * n_envs, env.observation_space, env.action_space, **kw)
    ours = CompressedHerReplayBuffer(24 * n_envs, env.observation_space, env.action_space, **kw, chunk_len=4,
                                     compression_method="zstd3", buffer_device=device)
    env.action_space.seed(0)
    obs, trs = env.reset(), []
    for _ in range(40):
        action = np.stack([env.action_space.sample() for _ in range(n_envs)])
        nxt, reward, done, infos = env.step(action)
        real = {k: v.copy() for k, v in nxt.items()}
        for e in np.flatnonzero(done):
            for k in real:
                real[k][e] = infos[e]["terminal_observation"][k]
        trs.append((obs, real, action, reward, done, infos))
        obs = nxt
    return ref, ours, trs


def assert_her_equal(ref, ours, skip=None):
    rows = np.array([r for r in range(ref.buffer_size) if r != skip])
    for k in ref.observations:
        assert np.array_equal(np.asarray(ours.observations[k])[rows], ref.observations[k][rows]), k
        assert np.array_equal(np.asarray(ours.next_observations[k])[rows], ref.next_observations[k][rows]), k
    for name in ("ep_start", "ep_length"):
        assert np.array_equal(getattr(ours, name), getattr(ref, name)), name
    assert np.array_equal(ours._current_ep_start, ref._current_ep_start)


HER_CASES = [(k, True, 1, None) for k in (3, 9, 30)] + [
    (9, False, 1, None), (30, False, 2, None), (9, True, 1, "cpu"), (30, False, 1, "cpu"), (9, True, 2, "cpu")]


@pytest.mark.parametrize("k, image, n_envs, device", HER_CASES)
def test_her_add_interrupted_is_undone_or_completed(k, image, n_envs, device):
    _, ours0, trs = her_pair(image, n_envs, device)
    feed([ours0], trs[:k], "her")
    total = count_events(lambda: ours0.add(*trs[k]))
    for at in positions(total, 50 if (image, n_envs, device) == (True, 1, None) else 25, seed=k):
        ref, ours, _ = her_pair(image, n_envs, device)
        feed([ref, ours], trs[:k], "her")
        before = (ours.pos, ours.full)
        interrupted(lambda ours=ours: ours.add(*trs[k]), at)
        accepted = (ours.pos, ours.full) != before
        if accepted:
            ref.add(*trs[k])
        assert_her_equal(ref, ours, skip=None if accepted else ours.pos)
        feed([ref, ours], trs[k + 1:k + 4], "her")
        assert_her_equal(ref, ours)
        for seed in (1, 2):
            assert_samples_equal(ref, ours, 8, seed, where=f"HER at={at}")


def rollout_pair(dict_obs: bool = False, buffer_device=None):
    from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer

    from sb3_integration import CompressedDictRolloutBuffer, CompressedRolloutBuffer

    space = DICT_SPACE if dict_obs else SPACE
    ref_cls, our_cls = (DictRolloutBuffer, CompressedDictRolloutBuffer) if dict_obs else (
        RolloutBuffer, CompressedRolloutBuffer)
    ref = ref_cls(12, space, ACT, "cpu", 0.95, 0.99, 2)
    ours = our_cls(12, space, ACT, "cpu", 0.95, 0.99, 2, chunk_len=4, compression_method="zstd3",
                   buffer_device=buffer_device)
    return ref, ours


def rollout_steps(dict_obs: bool, T: int = 14) -> list[tuple]:
    rng = np.random.default_rng(5)
    out = []
    for obs, _ in frame_stack_stream(T, 2, ep_len=5, seed=5):
        o = {"img": obs, "vec": obs[:, 0, 0, :3].astype(np.float32)} if dict_obs else obs
        out.append((o, rng.integers(0, 3, (2, 1)), rng.standard_normal(2).astype(np.float32),
                    rng.random(2) < 0.2, th.tensor(rng.standard_normal(2).astype(np.float32)),
                    th.tensor(rng.standard_normal(2).astype(np.float32))))
    return out


def assert_rollout_equal(ref, ours, skip=None):
    rows = np.array([r for r in range(ref.buffer_size) if r != skip])
    obs = ref.observations
    for key in (obs if isinstance(obs, dict) else [None]):
        x = obs if key is None else obs[key]
        y = np.asarray(ours.observations if key is None else ours.observations[key])
        assert np.array_equal(y[rows], x[rows]), key
    for name in ("actions", "rewards", "episode_starts", "values", "log_probs"):
        assert np.array_equal(getattr(ours, name)[rows], getattr(ref, name)[rows]), name
    assert (ours.pos, ours.full) == (ref.pos, ref.full)


@pytest.mark.parametrize("dict_obs", [False, True])
@pytest.mark.parametrize("k,buffer_device", [(0, None), (5, None), (11, None), (0, "cpu"), (11, "cpu")])
def test_rollout_add_interrupted_leaves_other_rows_and_get_exact(dict_obs, k, buffer_device):
    steps = rollout_steps(dict_obs)
    _, ours0 = rollout_pair(dict_obs, buffer_device)
    for s in steps[:k]:
        ours0.add(*s)
    total = count_events(lambda: ours0.add(*steps[k]))
    for at in positions(total, 30, seed=k):
        ref, ours = rollout_pair(dict_obs, buffer_device)
        for s in steps[:k]:
            ref.add(*s)
            ours.add(*s)
        before = (ours.pos, ours.full)
        interrupted(lambda ours=ours: ours.add(*steps[k]), at)
        accepted = (ours.pos, ours.full) != before
        if accepted:
            ref.add(*steps[k])
        assert_rollout_equal(ref, ours, skip=None if accepted else ours.pos)
        for s in steps[k + 1:]:
            if ref.full:
                break
            ref.add(*s)
            ours.add(*s)
        if ref.full:
            ref.compute_returns_and_advantage(th.zeros(2), np.zeros(2, bool))
            ours.compute_returns_and_advantage(th.zeros(2), np.zeros(2, bool))
            np.random.seed(at)  # noqa: NPY002
            a = list(ref.get(8))
            np.random.seed(at)  # noqa: NPY002
            b = list(ours.get(8))
            for x, y in zip(a, b, strict=True):
                for f in x._fields:
                    fx, fy = getattr(x, f), getattr(y, f)
                    if isinstance(fx, dict):
                        assert all(th.equal(fx[q], fy[q]) for q in fx)
                    else:
                        assert th.equal(fx, fy), f


def test_rollout_get_interrupted_while_flattening_flattens_once():
    steps = rollout_steps(False, 12)
    ref, ours = rollout_pair()
    for s in steps:
        ref.add(*s)
        ours.add(*s)
    ref.compute_returns_and_advantage(th.zeros(2), np.zeros(2, bool))
    ours.compute_returns_and_advantage(th.zeros(2), np.zeros(2, bool))
    total = count_events(lambda: pickle.loads(pickle.dumps(ours))._flatten())
    for at in positions(total, 20, seed=0):
        clone = pickle.loads(pickle.dumps(ours))
        interrupted(clone._flatten, at)
        np.random.seed(3)  # noqa: NPY002
        a = list(ref.get(6))
        np.random.seed(3)  # noqa: NPY002
        b = list(clone.get(6))
        for x, y in zip(a, b, strict=True):
            assert th.equal(x.observations, y.observations) and th.equal(x.actions, y.actions)


# -- reset, sample, save --------------------------------------------------------------------------
def test_reset_interrupted_is_before_or_after(tmp_path):
    trs = transitions(40)
    _, ours0 = build("replay", "memory", tmp_path)
    feed([ours0], trs[:20], "replay")
    total = count_events(ours0.reset)
    for at in positions(total, 40, seed=1):
        ref, ours = build("replay", "memory", tmp_path)
        feed([ref, ours], trs[:20], "replay")
        interrupted(ours.reset, at)
        if (ours.pos, ours.full) == (0, False):
            ref.reset()
        else:  # not reset: unchanged
            assert_rows_equal(ref, ours)
        feed([ref, ours], trs[20:30], "replay")
        assert_rows_equal(ref, ours)
        assert_samples_equal(ref, ours, 8, 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_sample_interrupted_releases_every_lock_and_leaves_data(threads, monkeypatch):
    from chunkstore import native

    monkeypatch.setattr(native, "PARALLEL_MIN_ITEMS", 1)  # two threads even for small samples
    monkeypatch.setattr(native, "PARALLEL_MIN_BYTES", 0)
    ref, ours = make_pair("replay", ROWS, SPACE, ACT, chunk_len=CHUNK, compression_method="zstd3")
    fs = ours.frame_stores[None]
    fs.options = fs.options.replace(threads=threads)
    feed([ref, ours], transitions(30), "replay")
    arr = ours.frame_stores[None].frames
    arr.threads = threads
    total = count_events(lambda: ours.sample(16))
    for at in positions(total, 60, seed=threads):
        np.random.seed(at)  # noqa: NPY002
        interrupted(lambda: ours.sample(16), at)
        assert not arr.tier._lock.locked(), f"the tier lock is held after an interrupt at event {at}"
        assert_samples_equal(ref, ours, 16, at)


def test_wait_all_outlives_an_interrupt():
    """A caller interrupted while its workers run waits for them: none outlives the output it writes."""
    from chunkstore import _threads

    pool = _threads.pool("test-wait", 2)
    done = []

    def work(i: int) -> None:
        time.sleep(0.2)
        done.append(i)

    futures: list = []
    for i in range(2):
        _threads.submit(pool, futures, work, i)
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            _threads.wait_all(futures)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert all(f.done() for f in futures) and sorted(done) == [0, 1]


def test_submit_and_wait_all_interrupted_anywhere_never_hang_nor_lose_a_task():
    """Every event of submit + wait_all, in chunkstore and in the standard library they call
    (queue, threading): no hang, every task that ran is waited for.

    (With ThreadPoolExecutor, real signals hung sample(): concurrent.futures.wait() interrupted
    while acquiring its futures' locks left one held, so the worker finishing that future
    blocked forever; a submit interrupted as Condition.__enter__ returned left the pool's idle
    semaphore locked; a submit interrupted before the pool queued the task left a future nobody
    would run. This test, run against that pool, hung at the second.)
    """
    import faulthandler
    import queue

    from chunkstore import _threads

    stdlib = (queue.__file__, threading.__file__)
    pool = _threads.pool("test-every-point", 2)

    def work(out: np.ndarray, i: int) -> None:
        time.sleep(0.001)
        out[i] = i + 1

    def call(log: list) -> None:
        out = np.zeros(3)
        futures: list = []
        log.append((out, futures))
        try:
            for i in range(3):
                _threads.submit(pool, futures, work, out, i)
        finally:
            _threads.wait_all(futures)

    total = count_events(lambda: call([]), also=stdlib)
    assert total > 30  # the hand-over and the waits are traced
    faulthandler.dump_traceback_later(120, exit=True)  # a hang fails the run instead of blocking it
    try:
        for at in range(1, total + 1):
            log: list = []
            hit = interrupted(lambda log=log: call(log), at, also=stdlib)
            out, futures = log[0]
            # an interrupt on wait_all's first instruction (before its try) skips the wait: the
            # tasks then run on memory they hold themselves, and must still finish
            deadline = time.monotonic() + 10
            while not all(f.done() for f in futures):
                assert time.monotonic() < deadline, f"a task never finished (event {at})"
                time.sleep(0.001)
            ran = [i for i, f in enumerate(futures) if not f.cancelled()]
            assert all(out[i] == i + 1 for i in ran), f"a task that ran is not done (event {at})"
            if not hit:
                assert out.tolist() == [1, 2, 3]
    finally:
        faulthandler.cancel_dump_traceback_later()
    tasks: list = []
    _threads.submit(pool, tasks, sum, (1, 2))  # the pool still works after all that
    _threads.wait_all(tasks)
    assert tasks[0].result() == 3


# an interrupt injected inside a snapshot's __del__ (while the collector runs it) is reported, not raised
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_save_interrupted_leaves_the_old_file_and_no_temporary(tmp_path):
    trs = transitions(40)
    ref, ours = build("replay", "memory", tmp_path)
    feed([ref, ours], trs[:20], "replay")
    path = tmp_path / "buf.h5"
    ours.save(path)
    old = path.read_bytes()
    feed([ref, ours], trs[20:25], "replay")
    total = count_events(lambda: ours.save(tmp_path / "count.h5"))
    for at in positions(total, 80, seed=2):
        interrupted(lambda: ours.save(path), at)
        assert path.read_bytes() == old or hdf5.verify(path) == []  # the old file, or a whole new one
        assert_rows_equal(ref, ours)  # a save changes nothing in the buffer
    ours.save(path)  # cleans this process's leftovers, if any
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".chunkstore-tmp")]
    assert leftovers == []
    loaded = type(ours).load(path, device="cpu")
    assert_rows_equal(ref, loaded)


# -- a checkpoint thread: saves and pickles while another thread adds ------------------------------
def test_saves_and_pickles_while_a_writer_adds_capture_one_moment(tmp_path):
    """Every file a save reports as written verifies, loads, and is the buffer at one moment."""
    rows = 64
    trs = transitions(700, seed=9)
    ours = make_pair("replay", rows, SPACE, ACT, chunk_len=CHUNK, compression_method="zstd3")[1]
    progress = [0]

    def writer():
        for tr in trs:
            ours.add(*tr)
            progress[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    captured = []
    while thread.is_alive() or len(captured) < 4:
        lo = progress[0]
        if len(captured) % 2 == 0:
            path = tmp_path / f"ckpt{len(captured)}.h5"
            ours.save(path)
            assert hdf5.verify(path) == [], path
            snap = type(ours).load(path, device="cpu", lazy=False)
        else:
            snap = pickle.loads(pickle.dumps(ours))
        captured.append((lo, progress[0], snap))
    thread.join()
    for lo, hi, snap in captured:
        candidates = [k for k in range(lo, hi + 1) if (k % rows, k >= rows) == (snap.pos, snap.full)]
        assert any(_equals_after(snap, trs[:k], rows) for k in candidates), (lo, hi, snap.pos, snap.full)


def _equals_after(buf, trs, rows) -> bool:
    ref = make_pair("replay", rows, SPACE, ACT)[0]
    feed([ref], trs, "replay")
    try:
        assert_rows_equal(ref, buf)
    except AssertionError:
        return False
    return True


# -- fork ---------------------------------------------------------------------------------------
FORK_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, sys, numpy as np
    sys.path.insert(0, {tests!r})
    from conftest import frame_stack_stream, make_pair
    from gymnasium import spaces
    from chunkstore import native
    native.PARALLEL_MIN_ITEMS = 1
    native.PARALLEL_MIN_BYTES = 0
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    ref, ours = make_pair("replay", 64, space, spaces.Discrete(3), chunk_len=4, compression_method="zstd3",
                          observation_storage="compressed")  # the frame engine's thread pool, which a raw key has not
    for t, (o, n) in enumerate(frame_stack_stream(80, 1, ep_len=7)):
        for b in (ref, ours):
            b.add(o, n, np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1), [{{}}])
    ours.frame_stores[None].frames.threads = 2
    ours.sample(32)  # a threaded sample: the pool's threads exist in the parent only

    def child(q=None):
        np.random.seed(1); a = ours.sample(32)
        np.random.seed(1); b = ref.sample(32)
        ok = all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in a._fields)
        o, n = next(iter(frame_stack_stream(1, 1, seed=3)))
        ours.add(o, n, np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1), [{{}}])
        ours.sample(32)
        if q is not None:
            q.put(ok)
        return ok

    how = sys.argv[1]
    if how == "os.fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0 if child() else 3)
        _, status = os.waitpid(pid, 0)
        ok = os.waitstatus_to_exitcode(status) == 0
    elif how == "process":
        ctx = mp.get_context("fork"); q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,)); p.start(); ok = q.get(timeout=60); p.join(60)
    else:
        ctx = mp.get_context("fork")
        with ctx.Pool(2) as pool:
            ok = all(pool.map(child, [None, None], chunksize=1))
    print("CHILD_OK" if ok else "CHILD_WRONG")
""")


@pytest.mark.parametrize("how", ["os.fork", "process", "pool"])
def test_a_forked_child_samples_and_adds_after_a_threaded_sample(how):
    script = FORK_SCRIPT.format(tests=str(REPO / "tests"))
    done = subprocess.run([sys.executable, "-c", script, how], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert "CHILD_OK" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
