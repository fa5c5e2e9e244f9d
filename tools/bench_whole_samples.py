"""What a sample taken under the writer's lock costs (issue 34): one tree against another.

``sample()`` of the replay buffers now draws and reads under the buffer's lock, and a
prioritized sample finds its late update's generations by the indices object. This script
times, for each ``--trees`` path (a checkout of this repository: the code before and after),
in a fresh process per arm, the arms of all trees taking turns for ``--rounds`` rounds:

- ``sample(256)`` of the uniform and the prioritized buffer and ``sample(256)`` +
  ``update_priorities(256)`` of the prioritized one, one thread (ms: the least over rounds of
  the minimum of group medians, ``robust_ms``);
- one thread adding while the main thread samples (256) for ``--seconds``: adds/s and
  samples/s (the best round), the setting where the lock can make one side wait.

Frames: ``(4, 84, 84)`` uint8 stacks of a moving smooth pattern with noise (compressible as
game frames are, not Atari itself), ``--capacity`` transitions, one env.

Examples
--------
    .venv/bin/python tools/bench_whole_samples.py --trees /tmp/old . --out results/bench_whole_samples.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

FRAME = (4, 84, 84)


def _frames(n: int, seed: int = 0) -> np.ndarray:
    """``n + 4`` single frames of a drifting pattern with a little noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:84, 0:84]
    out = np.empty((n + 4, 84, 84), np.uint8)
    for t in range(n + 4):
        base = 100 + 60 * np.sin((x + t) / 9.0) * np.cos((y - t) / 13.0)
        out[t] = np.clip(base + rng.integers(0, 3, (84, 84)), 0, 255).astype(np.uint8)
    return out


def _arm(cfg: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, cfg["tree"])  # the tree under test, before anything of this repository loads
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    from _bench_common import robust_ms
    from gymnasium import spaces

    import sb3_integration
    from sb3_integration import CompressedPrioritizedReplayBuffer, CompressedReplayBuffer

    assert Path(sb3_integration.__file__).resolve().is_relative_to(Path(cfg["tree"]).resolve())
    obs_space, act = spaces.Box(0, 255, FRAME, np.uint8), spaces.Discrete(6)
    cls = CompressedPrioritizedReplayBuffer if cfg["kind"] == "prioritized" else CompressedReplayBuffer
    buf = cls(cfg["capacity"], obs_space, act, "cpu")
    frames = _frames(512)
    rng = np.random.default_rng(1)

    def step(t: int) -> tuple:
        t %= 512
        return (frames[t:t + 4][None], frames[t + 1:t + 5][None], np.array([[t % 6]]),
                np.array([1.0], np.float32), np.array([t % 97 == 96]), [{}])

    for t in range(cfg["capacity"]):
        buf.add(*step(t))
    np.random.seed(0)  # noqa: NPY002 - the buffers draw with SB3's global RNG
    out: dict[str, Any] = {"tree": cfg["tree"], "kind": cfg["kind"]}
    out["sample_ms"] = robust_ms(lambda: buf.sample(256), n=cfg["reps"])["ms"]
    if cfg["kind"] == "prioritized":
        def sample_update() -> None:
            s = buf.sample(256)
            buf.update_priorities(s.indices, rng.exponential(1.0, 256))
        out["sample_update_ms"] = robust_ms(sample_update, n=cfg["reps"])["ms"]

    stop, adds = threading.Event(), [0]

    def writer() -> None:
        t = cfg["capacity"]
        while not stop.is_set():
            buf.add(*step(t))
            t += 1
            adds[0] += 1

    th = threading.Thread(target=writer, daemon=True)
    samples, t0 = 0, time.perf_counter()
    th.start()
    while time.perf_counter() - t0 < cfg["seconds"]:
        buf.sample(256)
        samples += 1
    stop.set()
    th.join()
    dt = time.perf_counter() - t0
    out.update(concurrent_adds_per_s=adds[0] / dt, concurrent_samples_per_s=samples / dt)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", nargs="+", default=["."], help="repository checkouts to compare (first: baseline)")
    p.add_argument("--capacity", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None, help="JSON path")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(_arm(json.loads(args.config))))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bench_common import env_info, run_fresh

    trees = [str(Path(t).resolve()) for t in args.trees]
    arms = [(tree, kind) for kind in ("uniform", "prioritized") for tree in trees]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {arm: [] for arm in arms}
    for r in range(args.rounds):
        for tree, kind in arms:
            res = run_fresh(__file__, {"tree": tree, "kind": kind, "capacity": args.capacity, "reps": args.reps,
                                       "seconds": args.seconds}, timeout=1800)
            print(f"round {r}: {res}", file=sys.stderr)
            if "error" not in res:
                results[(tree, kind)].append(res)
    rows = []
    for (tree, kind), rs in results.items():
        if not rs:
            continue
        row: dict[str, Any] = {"tree": tree, "kind": kind, "rounds": len(rs)}
        for key in rs[0]:
            if key.endswith("_ms"):
                row[key] = min(x[key] for x in rs)
            elif key.endswith("_per_s"):
                row[key] = max(x[key] for x in rs)
        rows.append(row)
    for row in rows:
        print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps({"env": env_info(), "args": vars(args), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
