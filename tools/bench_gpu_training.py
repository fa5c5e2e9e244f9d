"""DQN on real Atari with the model on a device: SB3's buffer against ours on the host and on the device (issue 37).

The question a GPU user asks: does DQN with ``device="cuda"`` train faster with our buffer than
with SB3's? Each arm runs in a fresh process of its own (``run_fresh``), one at a time, the arms
taking turns (their order alternates every round), ``--rounds`` rounds; a rate is the best over
the rounds and each round's ratio to SB3's arm of the same round is kept too. Arms, every one with
the model on ``--device``:

* ``sb3``: SB3's own ``ReplayBuffer`` (samples on the host, copied to the device by SB3);
* ``ours-host``: :class:`~sb3_integration.CompressedReplayBuffer`, frames in host memory;
* ``ours-device``: the same with ``buffer_device=--buffer-device`` (default: ``--device``):
  frames decoded and stacked on the device.

Scenarios: SB3's DQN, ``CnnPolicy``, ``train_freq`` 4, on real ``--games`` (``make_atari_env`` +
``VecFrameStack(4)``, ``tools/atari_data.py``) at each of ``--batches``; the same seed in every
arm, ``--learning-starts`` steps collected, ``--warmup`` steps trained untimed (first-use costs:
numba's compile, cuDNN's set-up), then ``--steps`` timed env steps. No prefetch: our
buffers draw SB3's indices, so with deterministic algorithms
(``torch.use_deterministic_algorithms``, cuDNN deterministic, ``CUBLAS_WORKSPACE_CONFIG``)
training must end with SB3's parameters bit for bit; the table says whether it did.

Reported per arm: steps/s (training phase), ratio to SB3, peak device memory
(``torch.cuda.max_memory_allocated``; ``n/a`` off CUDA), host RSS at the end and its peak, the
buffer's bytes (SB3: its arrays' ``nbytes``; ours: ``nbytes_held`` + ``device_nbytes``, the
device part beside it), bytes per stored transition (SB3: per slot) and their ratio to SB3's,
and whether the parameters equal SB3's.

On a machine without a GPU ``--device cpu`` runs the same arms (``ours-device`` then has
``buffer_device="cpu"``: the device code path, on the cpu); tests run it so at a tiny size.

Examples
--------
    PYTHONPATH=. python3 tools/bench_gpu_training.py --device cuda --out results/bench_gpu_training_h200.json
    PYTHONPATH=. python3 tools/bench_gpu_training.py --device cpu --games Pong --batches 32 --steps 40 \\
        --learning-starts 100 --buffer-size 1000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# cuBLAS is deterministic only with a fixed workspace; it is read when CUDA starts, so before torch
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

from _bench_common import GLIBC, ensure_importable, md_table, run_fresh, save_results

ensure_importable()

ARMS = ("sb3", "ours-host", "ours-device")
GAMES = ("Pong", "MsPacman")
MB = 1 << 20


# -- the child: one arm -----------------------------------------------------------------------
def _sb3_nbytes(rb: Any) -> int:
    """Bytes of SB3's buffer arrays (allocated in full at construction, whatever is added)."""
    import numpy as np

    return sum(v.nbytes for v in vars(rb).values() if isinstance(v, np.ndarray))


def _deterministic(device: str) -> None:
    import torch as th

    # warn_only: the device decode scatters with put_ into distinct destinations (deterministic in
    # fact, flagged by torch all the same); the parameters' hash is the real check
    th.use_deterministic_algorithms(True, warn_only=True)
    th.backends.cudnn.deterministic = True
    th.backends.cudnn.benchmark = False
    th.set_num_threads(1)  # one thread per arm: the arms take turns, none borrows another's cores
    if device.startswith("cuda") and not th.cuda.is_available():
        raise RuntimeError(f"--device {device}: torch {th.__version__} sees no CUDA device")


def _arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import resource
    import time

    import psutil
    import torch as th
    from atari_data import _make_vec_env
    from bench_training import _params_sha
    from stable_baselines3 import DQN

    device, arm = cfg["device"], cfg["arm"]
    _deterministic(device)
    buffer_class, kwargs = None, None
    if arm != "sb3":
        from sb3_integration import CompressedReplayBuffer

        buffer_class = CompressedReplayBuffer
        kwargs = {"buffer_device": cfg["buffer_device"]} if arm == "ours-device" else None
    env = _make_vec_env(cfg["game"], 1, cfg["seed"], 4)
    model = DQN("CnnPolicy", env, buffer_size=cfg["buffer_size"], batch_size=cfg["batch"], train_freq=4,
                learning_starts=cfg["learning_starts"], seed=cfg["seed"], device=device, verbose=0,
                replay_buffer_class=buffer_class, replay_buffer_kwargs=kwargs)
    cuda = th.device(device).type == "cuda"
    # collection, then --warmup steps of training: first-use costs (numba's compile of the native
    # read path, cuDNN's and cuBLAS's set-up) stay out of the timed phase, the same in every arm
    model.learn(cfg["learning_starts"] + cfg["warmup"])
    if cuda:
        th.cuda.synchronize()
        th.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    model.learn(cfg["steps"], reset_num_timesteps=False)
    if cuda:
        th.cuda.synchronize()
    wall = time.perf_counter() - t0
    rb = model.replay_buffer
    ours = arm != "sb3"
    # ours: host bytes (nbytes_held: chunks, tables, index, small arrays, slack) + the device's frames
    nbytes = rb.nbytes_held + rb.device_nbytes if ours else _sb3_nbytes(rb)
    return {
        "env": f"{cfg['game']} (NoFrameskip, AtariWrapper, 4 stacked)", "wall_s": wall,
        "steps_per_s": cfg["steps"] / wall, "n_updates": int(model._n_updates), "params_sha": _params_sha(model),
        "gpu_max_mb": th.cuda.max_memory_allocated() / MB if cuda else "n/a",
        "card": th.cuda.get_device_name() if cuda else "cpu",
        "rss_mb": psutil.Process().memory_info().rss / MB,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # Linux: KiB
        "buffer_mb": nbytes / MB, "buffer_device_mb": rb.device_nbytes / MB if ours else 0.0,
        # per transition: SB3's arrays cost the same per slot whatever is added; ours grow with what is
        # stored (their fixed costs shared by the transitions added so far, so small runs overstate them)
        "buffer_b_per_tr": nbytes / ((rb.size() if ours else rb.buffer_size) * rb.n_envs),
    }


# -- the parent ---------------------------------------------------------------------------------
def _summary(scenario: str, runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    sb3 = runs["sb3"]
    good_sb3 = [r for r in sb3 if "error" not in r]
    best_sb3 = max((r["steps_per_s"] for r in good_sb3), default=None)
    sb3_shas = {r["params_sha"] for r in good_sb3}
    rows = []
    for arm, rs in runs.items():
        good = [r for r in rs if "error" not in r]
        best = max((r["steps_per_s"] for r in good), default=None)
        ratios = [r["steps_per_s"] / s["steps_per_s"] for r, s in zip(rs, sb3, strict=True)
                  if "error" not in r and "error" not in s]
        same = None
        if arm != "sb3" and good and sb3_shas:
            same = {r["params_sha"] for r in good} == sb3_shas
        last = good[-1] if good else {}
        rows.append({
            "scenario": scenario, "arm": arm, "env": last.get("env"), "card": last.get("card"),
            "rounds": len(good), "steps_per_s": best,
            "ratio": best / best_sb3 if best and best_sb3 else None,
            "round_ratios": " / ".join(f"{x:.2f}" for x in ratios) if arm != "sb3" else "",
            "gpu_max_mb": max((r["gpu_max_mb"] for r in good), default=None) if last.get("card") != "cpu"
            else "n/a",
            "rss_peak_mb": max((r["rss_peak_mb"] for r in good), default=None),
            "rss_mb": last.get("rss_mb"), "buffer_mb": last.get("buffer_mb"),
            "buffer_device_mb": last.get("buffer_device_mb"),
            "buffer_b_per_tr": last.get("buffer_b_per_tr"),
            "buffer_vs_sb3": last["buffer_b_per_tr"] / good_sb3[-1]["buffer_b_per_tr"] if last and good_sb3 else None,
            "params_equal_sb3": {None: "", True: "yes", False: "no"}[same],
            "errors": [r["error"] for r in rs if "error" in r],
        })
    return rows


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="the model's device (and the default buffer_device)")
    p.add_argument("--buffer-device", default=None, help="the ours-device arm's buffer_device (default: --device)")
    p.add_argument("--games", nargs="+", default=list(GAMES), choices=GAMES)
    p.add_argument("--batches", nargs="+", type=_positive, default=[32, 256])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="sb3 always runs (the baseline)")
    p.add_argument("--steps", type=_positive, default=2000, help="timed env steps per arm")
    p.add_argument("--learning-starts", type=_positive, default=1000, help="env steps collected before training")
    p.add_argument("--warmup", type=int, default=200, help="untimed training steps after --learning-starts")
    p.add_argument("--buffer-size", type=_positive, default=100_000)
    p.add_argument("--rounds", type=_positive, default=2, help="runs of each arm, arms taking turns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--glibc", choices=("default", "spared", "both"), default="default",
                   help=f"malloc settings of the arms' processes (spared: {GLIBC['spared']}; a scenario "
                        "named ...-spared); a claim should hold under both")
    p.add_argument("--timeout", type=float, default=600, help="seconds per arm process")
    p.add_argument("--out", default=None, help="JSON path (a .md is written beside it)")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(_arm(json.loads(args.config))))
        return 0
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    arms = ["sb3"] + [a for a in ARMS[1:] if a in args.arms]
    base = {"device": args.device, "buffer_device": args.buffer_device or args.device, "seed": args.seed,
            "steps": args.steps, "learning_starts": args.learning_starts, "warmup": args.warmup,
            "buffer_size": args.buffer_size}
    rows, raw = [], {}
    settings = ("default", "spared") if args.glibc == "both" else (args.glibc,)
    for glibc, game, batch in ((g, game, b) for g in settings for game in args.games for b in args.batches):
        scenario = f"dqn-{game}-{batch}" + ("" if glibc == "default" else f"-{glibc}")
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
        for r in range(args.rounds):
            for arm in arms if r % 2 == 0 else arms[::-1]:
                res = run_fresh(__file__, {**base, "game": game, "batch": batch, "arm": arm},
                                timeout=args.timeout, glibc=glibc)
                print(f"{scenario} {arm} round {r}: {json.dumps(res)}", file=sys.stderr)
                runs[arm].append(res)
        raw[scenario] = runs
        rows += _summary(scenario, runs)
        md = _markdown(args, base, rows)
        # written after every scenario: a run stopped by a timeout keeps the scenarios it finished
        save_results(args.out, {"config": {**base, "rounds": args.rounds, "card": _card(rows)}, "rows": rows,
                                "runs": raw}, md)
    print(md)
    return 0 if not any(r["errors"] for r in rows) else 1


def _card(rows: list[dict[str, Any]]) -> str | None:
    return next((r["card"] for r in rows if r.get("card")), None)


def _markdown(args: argparse.Namespace, base: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    card = _card(rows)
    md = (f"DQN (CnnPolicy) training steps/s on {card}, model on `{args.device}`, SB3's buffer against ours "
          f"(host frames; frames on `{base['buffer_device']}`): {args.rounds} rounds, arms alternating, each arm "
          f"a fresh process, torch 1 thread, deterministic algorithms; {args.steps} timed steps after "
          f"{args.learning_starts} collected and {args.warmup} trained, buffer_size {args.buffer_size}, "
          f"seed {args.seed}. steps/s: best round; "
          f"x SB3: best over SB3's best; device MB: torch.cuda.max_memory_allocated in the timed phase; "
          f"buffer MB: SB3's arrays (allocated in full) / our nbytes_held + device_nbytes (the device part beside it); "
          f"buffer x SB3: bytes per stored transition against SB3's per slot.\n\n")
    md += md_table(rows, [("scenario", "scenario"), ("arm", "arm"), ("steps_per_s", "steps/s"),
                          ("ratio", "x SB3"), ("round_ratios", "rounds x SB3"), ("gpu_max_mb", "device MB (peak)"),
                          ("rss_peak_mb", "host RSS MB (peak)"), ("buffer_mb", "buffer MB"),
                          ("buffer_device_mb", "of it on device MB"), ("buffer_b_per_tr", "buffer B/transition"),
                          ("buffer_vs_sb3", "buffer x SB3"),
                          ("params_equal_sb3", "params = SB3")])
    return md


if __name__ == "__main__":
    sys.exit(main())
