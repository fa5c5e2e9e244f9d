"""Real Ctrl-C at random moments: the harness ``tests/test_interrupts_signals.py`` runs in subprocesses.

``python tests/signal_harness.py <scenario> <tier> <seconds> <seed>`` feeds real Pong stacks to
one of our buffers and to SB3's, with a ``signal.setitimer`` timer whose handler raises
KeyboardInterrupt armed at a random delay before every call, so interrupts land anywhere in
``add``, ``sample``, ``save`` and ``load``. An add counts as accepted when ``pos`` moved (the
add's commit); SB3's buffer gets exactly the accepted transitions. It checks, after every
interrupt, that every row but the current one equals SB3's, and at the end that every row,
samples and a saved file equal SB3's. ``spill <n_envs> <seconds> <seed> <heap_bytes>``
(:func:`run_spill`) does the same for adds and samples of a device buffer whose heap spills, on
synthetic stacks. It prints one ``RESULT {json}`` line; a crash, an abort
or a hang shows as a missing line or a non-zero exit to the test that runs it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))


class Timer:
    """A one-shot SIGALRM that raises KeyboardInterrupt, armed before each call."""

    def __init__(self, seed: int, max_us: float) -> None:
        self.rng = random.Random(seed)
        self.max_s = max_us * 1e-6
        self.min_s = 1e-6
        self.fired = 0
        signal.signal(signal.SIGALRM, self._handler)

    def _handler(self, signum: int, frame: object) -> None:
        self.fired += 1
        raise KeyboardInterrupt

    def arm(self) -> None:
        # log-uniform: as many interrupts early in a call as late (an interrupted call is followed by
        # slower ones: a stream marked stale stores fresh frames), some landing after it returned
        signal.setitimer(signal.ITIMER_REAL, self.min_s * (self.max_s / self.min_s) ** self.rng.random())

    def disarm(self) -> None:
        """Stop the timer; an interrupt landing meanwhile is swallowed here (outside the buffer)."""
        while True:
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                return
            except KeyboardInterrupt:
                continue


def guarded(timer: Timer, fn) -> bool:
    """``fn()`` with the timer armed; True if a KeyboardInterrupt interrupted it.

    Any other exception is raised after the timer is disarmed (the harness counts it).
    """
    hit = False
    try:
        try:
            timer.arm()
            fn()
        except KeyboardInterrupt:
            hit = True
        finally:
            timer.disarm()
    except KeyboardInterrupt:  # landed in the finally, before the disarm took
        hit = True
        timer.disarm()
    return hit


def rows_equal(ref, ours, skip=None) -> bool:
    live = ref.buffer_size if ref.full else ref.pos
    rows = np.array([r for r in range(live) if r != skip], dtype=np.int64)
    if (ours.pos, ours.full) != (ref.pos, ref.full):
        return False
    for name in ("observations", "next_observations"):
        a, b = getattr(ref, name), getattr(ours, name)
        for key in (a if isinstance(a, dict) else [None]):
            x = a if key is None else a[key]
            y = np.asarray(b if key is None else b[key])
            if not np.array_equal(y[rows], x[rows]):
                return False
    return all(np.array_equal(np.asarray(getattr(ours, n))[rows], getattr(ref, n)[rows])
               for n in ("actions", "rewards", "dones", "timeouts"))


def samples_equal(ref, ours, seed: int) -> bool:
    import torch as th

    np.random.seed(seed)  # noqa: NPY002 - SB3 samples from the global generator
    a = ref.sample(64)
    np.random.seed(seed)  # noqa: NPY002
    b = ours.sample(64)
    def same(x, y) -> bool:
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(th.equal(x[k], y[k]) for k in x)
        return (x is None and y is None) or th.equal(x, y)

    return all(same(getattr(a, f), getattr(b, f)) for f in a._fields)


def make(kind: str, tier: str, tmp: Path):
    from gymnasium import spaces
    from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer

    from chunkstore import DiskTier, HybridTier
    from sb3_integration import (
        CompressedDictReplayBuffer,
        CompressedNStepReplayBuffer,
        CompressedReplayBuffer,
    )

    img = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    space = spaces.Dict({"img": img, "vec": spaces.Box(-1, 1, (2,), np.float32)}) if kind == "dict" else img
    ref_cls, our_cls = {"replay": (ReplayBuffer, CompressedReplayBuffer),
                        "dict": (DictReplayBuffer, CompressedDictReplayBuffer),
                        "nstep": (NStepReplayBuffer, CompressedNStepReplayBuffer)}[kind]
    kw: dict = {"tier": {"disk": lambda: DiskTier(tmp, segment_bytes=1 << 16),
                         "hybrid": lambda: HybridTier(1 << 17, tmp, segment_bytes=1 << 16)}.get(tier)}
    if tier == "device":  # frames on buffer_device="cpu", a heap of 1 MiB: the oldest segments spill
        kw = {"buffer_device": "cpu", "heap_bytes": 1 << 20}
    # the frame engine under interrupts: every key compressed (the dict's small float key too, which the
    # shipped observation_storage rule would keep raw)
    kw["observation_storage"] = "compressed"
    act = spaces.Discrete(6)
    rows = 256 if kind == "dict" else 1000  # dict: several laps of the ring in a run
    return ref_cls(rows, space, act, "cpu"), our_cls(rows, space, act, "cpu", **kw)


def transitions(kind: str, n: int):
    from atari_data import collect_stacked

    tr = collect_stacked("Pong", n, 1, 0)
    rng = np.random.default_rng(0)
    for t in range(n):
        obs, nxt = tr.obs[t], tr.next_obs[t]
        if kind == "dict":  # a float vector key, fresh in every observation: two new frames per add, so the
            # frame ring runs at its worst-case bound and a frame left behind by an interrupt overflows it
            vec = rng.uniform(-1, 1, (2, 1, 2)).astype(np.float32)
            obs, nxt = {"img": obs, "vec": vec[0]}, {"img": nxt, "vec": vec[1]}
        yield obs, nxt, tr.actions[t], tr.rewards[t], tr.dones[t], tr.infos[t]


def run_adds(kind: str, tier: str, seconds: float, seed: int) -> dict:
    tmp = Path(tempfile.mkdtemp())
    ref, ours = make(kind, tier, tmp)
    if tier == "file":  # chunks of a lazily loaded file, new ones in RAM
        for step in transitions(kind, 600):
            ours.add(*step)
            ref.add(*step)
        ours.save(tmp / "start.h5")
        ours = type(ours).load(tmp / "start.h5", device="cpu")
    steps = transitions(kind, 6000)
    took = []
    for step in (next(steps) for _ in range(50)):  # uninterrupted: how long an add takes here
        t0 = time.perf_counter()
        ours.add(*step)
        took.append(time.perf_counter() - t0)
        ref.add(*step)
    timer = Timer(seed, 30e6 * float(np.median(took)))  # delays over the whole add and past it
    out = {"adds": 0, "interrupted": 0, "accepted_interrupted": 0, "mismatches": 0, "errors": 0,
           "median_add_us": round(1e6 * float(np.median(took)), 1)}
    deadline = time.monotonic() + seconds
    torn = None  # the step of an interrupted add that was not accepted (its row is torn, as SB3's would be)
    for step in steps:
        if time.monotonic() > deadline:
            break
        before = (ours.pos, ours.full)
        try:
            hit = guarded(timer, lambda step=step: ours.add(*step))
        except Exception as e:
            out["errors"] += 1
            print("ERROR", type(e).__name__, e, file=sys.stderr)
            if out["errors"] == 1:
                import traceback

                traceback.print_exc()
            continue
        out["adds"] += 1
        accepted = (ours.pos, ours.full) != before
        torn = None if accepted else step
        if accepted:
            ref.add(*step)
        if hit:
            out["interrupted"] += 1
            out["accepted_interrupted"] += accepted
            if not rows_equal(ref, ours, skip=None if accepted else ours.pos):
                out["mismatches"] += 1
    if torn is not None:  # the run ended on an interrupted add: the user's next step retries it
        ours.add(*torn)
        ref.add(*torn)
    out["final_equal"] = rows_equal(ref, ours) and samples_equal(ref, ours, seed)
    ours.save(tmp / "end.h5")
    loaded = type(ours).load(tmp / "end.h5", device="cpu")
    out["file_equal"] = rows_equal(ref, loaded)
    out["leftover_temporaries"] = len([p for p in tmp.iterdir() if p.name.endswith(".chunkstore-tmp")])
    return out


def run_samples(threads: int, seconds: float, seed: int) -> dict:
    tmp = Path(tempfile.mkdtemp())
    ref, ours = make("replay", "memory", tmp)
    for step in transitions("replay", 1500):
        ref.add(*step)
        ours.add(*step)
    ours.frame_stores[None].frames.threads = threads
    ours.sample(32)  # every kernel compiled (or loaded from numba's cache) before the first interrupt
    t0 = time.perf_counter()
    for _ in range(20):
        ours.sample(256)
    timer = Timer(seed, 3e6 * (time.perf_counter() - t0) / 20)
    out = {"samples": 0, "interrupted": 0, "mismatches": 0, "errors": 0}
    deadline = time.monotonic() + seconds
    k = 0
    while time.monotonic() < deadline:
        k += 1
        try:
            hit = guarded(timer, lambda k=k: ours.sample(256 if k % 2 else 32))
        except Exception as e:
            out["errors"] += 1
            print("ERROR", type(e).__name__, e, file=sys.stderr)
            if out["errors"] == 1:
                import traceback

                traceback.print_exc()
            continue
        out["samples"] += 1
        out["interrupted"] += hit
        if hit and not samples_equal(ref, ours, k):
            out["mismatches"] += 1
    return out


def run_saves(seconds: float, seed: int) -> dict:
    from chunkstore import hdf5

    tmp = Path(tempfile.mkdtemp())
    ref, ours = make("replay", "memory", tmp)
    for step in transitions("replay", 1200):
        ref.add(*step)
        ours.add(*step)
    path = tmp / "buffer.h5"
    t0 = time.perf_counter()
    ours.save(path)
    timer = Timer(seed, 3e6 * (time.perf_counter() - t0))
    out = {"saves": 0, "interrupted": 0, "bad_files": 0, "loads_interrupted": 0, "errors": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        hit = guarded(timer, lambda: ours.save(path))
        out["saves"] += 1
        out["interrupted"] += hit
        if hdf5.verify(path) != []:
            out["bad_files"] += 1
        loaded = []
        if guarded(timer, lambda loaded=loaded: loaded.append(type(ours).load(path, device="cpu"))):
            out["loads_interrupted"] += 1
        elif not rows_equal(ref, loaded[0]):
            out["bad_files"] += 1
    ours.save(path)  # removes this process's leftovers
    out["leftover_temporaries"] = len([p for p in tmp.iterdir() if p.name.endswith(".chunkstore-tmp")])
    out["buffer_equal"] = rows_equal(ref, ours)
    return out


def synthetic_stacks(n_envs: int, seed: int):
    """Endless Atari-like transitions of ``n_envs`` envs: 4-frame 84x84 stacks that shift by one frame a
    step (zeros after a reset). A new frame repeats the last (40%: its record is 0 bytes, encoded as
    its reference), changes 200 pixels of it (20%) or is new noise (40%: records near their bound, so
    a small heap fills a segment every few adds)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (n_envs, 84, 84), np.uint8)
    stacks = np.zeros((n_envs, 4, 84, 84), np.uint8)
    while True:
        obs, nxt = stacks.copy(), np.empty_like(stacks)
        dones = rng.random(n_envs) < 0.02
        for e in range(n_envs):
            u = rng.random()
            if u >= 0.6:
                frames[e] = rng.integers(0, 256, (84, 84), np.uint8)
            elif u >= 0.4:
                frames[e].reshape(-1)[rng.integers(0, 84 * 84, 200)] = rng.integers(0, 256, 200, np.uint8)
            nxt[e] = np.concatenate([stacks[e, 1:], frames[e][None]])
            stacks[e] = 0 if dones[e] else nxt[e]
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in dones]
        yield obs, nxt, rng.integers(0, 6, (n_envs, 1)), rng.random(n_envs).astype(np.float32), dones, infos


def device_books(ours) -> bool:
    """The device store's counts cover their users: every reference row counts at least the items
    encoded against it, every heap segment at least the bytes of its items' records, and no item's
    record lies in a freed segment (a count below its users recycles a row or segment still read)."""
    arr = ours.frame_stores[None].frames
    items, pool, heap = arr._table.items, arr._pool, arr._heap
    users = np.bincount(items["ref"][items["ref"] > 0], minlength=pool.count.size)
    has = items["addr"] >= 0
    held = np.bincount(items["addr"][has] // heap.segment_bytes, weights=arr._record_sizes(items)[has],
                       minlength=heap._segs.live.size)
    return bool((pool.count >= users).all() and (heap._segs.live >= held).all()
                and heap._segs.used[np.unique(items["addr"][has] // heap.segment_bytes)].all())


def run_spill(n_envs: int, heap_bytes: int, seconds: float, seed: int) -> dict:
    """Adds and samples of a device buffer whose heap spills, each interrupted at a random delay;
    every interrupted add is retried (with the same transition) until ``pos`` moves, as the README
    says, the 51st try uninterrupted (it must move ``pos``: else ``stuck``); SB3's buffer gets each
    transition once. Checked bit for bit against SB3's buffer: every
    row and a seeded sample (every 10 adds), at the end all of them."""
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    img, act, rows = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), 16
    ref = ReplayBuffer(rows, img, act, "cpu", n_envs=n_envs)
    ours = CompressedReplayBuffer(rows, img, act, "cpu", n_envs=n_envs, buffer_device="cpu", heap_bytes=heap_bytes)
    steps = synthetic_stacks(n_envs, seed)
    add_s, sample_s = [], []
    for _ in range(40):  # uninterrupted: how long an add and a sample take here
        step = next(steps)
        t0 = time.perf_counter()
        ours.add(*step)
        add_s.append(time.perf_counter() - t0)
        ref.add(*step)
        t0 = time.perf_counter()
        ours.sample(8)
        sample_s.append(time.perf_counter() - t0)
    add_max, sample_max = 30 * float(np.median(add_s)), 3 * float(np.median(sample_s))
    timer = Timer(seed, 1e6 * add_max)
    out = {"adds": 0, "interrupted": 0, "samples": 0, "samples_interrupted": 0, "mismatches": 0,
           "sample_mismatches": 0, "errors": 0, "stuck": 0, "books_bad": 0, "calm_retries": 0,
           "calm_retry_ms": 0.0,
           "median_add_us": round(1e6 * float(np.median(add_s)), 1)}
    deadline = time.monotonic() + seconds
    k = 0
    while time.monotonic() < deadline:
        step = next(steps)
        for attempt in range(51):  # the retry: the same transition until pos moves
            before = (ours.pos, ours.full)
            timer.max_s = add_max
            try:
                if attempt == 50:  # a retry the timer always cut short (a loaded machine): one uninterrupted
                    t0 = time.perf_counter()
                    ours.add(*step)
                    out["calm_retries"] += 1
                    out["calm_retry_ms"] = max(out["calm_retry_ms"], round(1e3 * (time.perf_counter() - t0), 1))
                    hit = False
                else:
                    hit = guarded(timer, lambda step=step: ours.add(*step))
            except Exception as e:
                out["errors"] += 1
                print("ERROR", type(e).__name__, e, file=sys.stderr)
                hit = True
            out["adds"] += 1
            out["interrupted"] += hit
            if (ours.pos, ours.full) != before:
                ref.add(*step)
                break
        else:
            out["stuck"] += 1
            break
        k += 1
        timer.max_s = sample_max
        for _ in range(2):
            try:
                out["samples_interrupted"] += guarded(timer, lambda: ours.sample(8))
            except Exception as e:
                out["errors"] += 1
                print("ERROR sample", type(e).__name__, e, file=sys.stderr)
            out["samples"] += 1
        if k % 10 == 0:
            out["mismatches"] += not rows_equal(ref, ours)
            out["sample_mismatches"] += not samples_equal(ref, ours, k)
            out["books_bad"] += not device_books(ours)
    out["accepted"] = k
    out["final_equal"] = rows_equal(ref, ours) and samples_equal(ref, ours, seed) and device_books(ours)
    out["spills"] = ours.frame_stores[None].frames.info()["heap"]["spills"]
    return out


def main() -> None:
    import torch as th

    th.set_num_threads(1)
    scenario, tier, seconds, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    if scenario in ("replay", "dict", "nstep"):
        result = run_adds(scenario, tier, seconds, seed)
    elif scenario == "spill":  # spill <n_envs> <seconds> <seed> <heap_bytes>
        result = run_spill(int(tier), int(sys.argv[5]), seconds, seed)
    elif scenario == "sample":
        result = run_samples(int(tier), seconds, seed)
    else:
        result = run_saves(seconds, seed)
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # no interpreter teardown under a still-armed timer


if __name__ == "__main__":
    main()
