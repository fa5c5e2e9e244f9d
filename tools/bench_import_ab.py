"""Import rates of two checkouts, interleaved: the DQN Replay Dataset import and the Minari import.

    python tools/bench_import_ab.py --trees /path/to/before . --out results/bench_import_bulk.json

The same input files for every run, made once with this checkout: a dopamine-layout run from real
ALE frames (``tools/bench_offline.py``'s ``make`` phase: ``--capacity`` transitions of real frames
cycled from ``--steps`` uniformly random steps, the files standing in for ``--copies`` checkpoints)
per ``--games`` entry, and a Minari dataset of ``--minari-steps`` real Pong steps made by Minari's
own ``DataCollector`` (SB3's ``AtariWrapper``, uniformly random policy, raw (84, 84, 1) frames).
Each import runs in a fresh process with ``PYTHONPATH`` set to one of ``--trees`` (the first is
the baseline); the trees take turns within a round and the first one alternates between rounds,
so a busy machine slows both alike. The table gives each tree's median rate and the median of the
per-round ratios to the baseline; the JSON keeps every run with the 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def phase_minari_make(work: Path, steps: int) -> dict:
    import ale_py
    import gymnasium as gym
    from minari import DataCollector
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    gym.register_envs(ale_py)
    env = DataCollector(AtariWrapper(gym.make("PongNoFrameskip-v4"), terminal_on_life_loss=False),
                        record_infos=False, jpeg_encoding=False)
    env.action_space.seed(0)
    t0, done, ep = time.perf_counter(), 0, 0
    while done < steps:
        env.reset(seed=ep)
        ep += 1
        while True:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done += 1
            if term or trunc or done >= steps:
                break
    ds = env.create_dataset("bench/pong-random-v0", algorithm_name="random")
    return {"minari_steps": int(ds.total_steps), "minari_episodes": int(ds.total_episodes),
            "minari_make_s": time.perf_counter() - t0}


def phase_minari_import(work: Path) -> dict:
    import minari

    from sb3_integration.offline.minari_io import import_minari

    ds = minari.load_dataset("bench/pong-random-v0")
    out = work / "minari.h5"
    t0 = time.perf_counter()
    import_minari(ds, out).close()
    return {"import_s": time.perf_counter() - t0, "steps": int(ds.total_steps), "file_bytes": out.stat().st_size}


def _run(cmd: list[str], tree: str, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, MINARI_DATASETS_PATH=str(work / "minari"))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed (PYTHONPATH={tree}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs="+", default=None, help="checkouts to compare; the first is the baseline")
    ap.add_argument("--games", nargs="*", default=["Pong", "MsPacman"])
    ap.add_argument("--capacity", type=int, default=250_000)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--minari-steps", type=int, default=20_000, help="0: no Minari import")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=None)
    ap.add_argument("--phase", default=None)
    ap.add_argument("--out", default="results/bench_import_bulk.json")
    args = ap.parse_args()
    if args.phase:
        work = Path(args.work)
        res = (phase_minari_make(work, args.minari_steps) if args.phase == "minari-make"
               else phase_minari_import(work))
        print(json.dumps(res))
        return
    if not args.trees:
        ap.error("--trees: give the checkouts to compare (the first is the baseline)")
    trees = [str(Path(t).resolve()) for t in args.trees]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_import_ab_"))
    me = str(HERE.parent)
    made: dict = {}
    for game in args.games:  # the inputs, made once with this checkout
        w = work / game.lower()
        w.mkdir(parents=True, exist_ok=True)
        if not (w / "replay_logs").exists():
            made[game] = _run([sys.executable, str(HERE / "bench_offline.py"), "--phase", "make", "--work", str(w),
                               "--game", game, "--capacity", str(args.capacity), "--copies", str(args.copies),
                               "--steps", str(args.steps)], me, work)
    if args.minari_steps and not (work / "minari").exists():
        made["minari"] = _run([sys.executable, __file__, "--phase", "minari-make", "--work", str(work),
                               "--minari-steps", str(args.minari_steps)], me, work)
    runs = []
    jobs = [(g, g) for g in args.games] + ([("Minari Pong", None)] if args.minari_steps else [])
    for r in range(args.rounds):
        for label, game in jobs:
            order = trees if r % 2 == 0 else trees[::-1]
            for tree in order:
                load = os.getloadavg()[0]
                if game is None:
                    d = _run([sys.executable, __file__, "--phase", "minari-import", "--work", str(work)], tree, work)
                    n = d["steps"]
                else:
                    d = _run([sys.executable, f"{tree}/tools/bench_offline.py", "--phase", "import", "--work",
                              str(work / game.lower())], tree, work)
                    n = args.capacity * args.copies
                row = {"round": r, "input": label, "tree": tree, "import_s": d["import_s"], "rows": n,
                       "rows_per_s": n / d["import_s"], "file_bytes": d["file_bytes"], "loadavg_1m": load}
                runs.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    summary = {}
    for label, _ in jobs:
        by_tree = {t: [x["rows_per_s"] for x in runs if x["input"] == label and x["tree"] == t] for t in trees}
        ratios = {t: [a / b for a, b in zip(by_tree[t], by_tree[trees[0]], strict=True)] for t in trees[1:]}
        summary[label] = {"median_rows_per_s": {t: statistics.median(v) for t, v in by_tree.items()},
                          "median_ratio_to_baseline": {t: statistics.median(v) for t, v in ratios.items()}}
    commits = {}
    for t in trees:  # what each checkout held (a dirty tree is marked)
        head = subprocess.run(["git", "-C", t, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", t, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        commits[t] = head + (" (modified)" if dirty else "")
    res = {"trees": trees, "commits": commits, "capacity": args.capacity, "copies": args.copies,
           "real_steps_cycled": args.steps, "policy": "uniformly random", "made": made, "summary": summary,
           "runs": runs, "loadavg_1m": [x["loadavg_1m"] for x in runs]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    print("| input | " + " | ".join(f"{Path(t).name} rows/s" for t in trees) + " | ratio to the first |")
    print("|---|" + "---|" * (len(trees) + 1))
    for label, s in summary.items():
        rates = " | ".join(f"{s['median_rows_per_s'][t]:,.0f}" for t in trees)
        ratio = ", ".join(f"{v:.2f}" for v in s["median_ratio_to_baseline"].values())
        print(f"| {label} | {rates} | {ratio} |")
    print(f"load average (1 min) during the runs: {min(res['loadavg_1m']):.1f} to {max(res['loadavg_1m']):.1f}")


if __name__ == "__main__":
    main()
