"""Import a DQN Replay Dataset-layout run and sample it: rate, bytes, RSS, lazy load, sample time.

    python tools/bench_offline.py --out results/bench_offline.json

1. Real Atari frames (``--game``, default Pong) (ale-py through SB3's AtariWrapper, uniformly
   random policy), cycled into one dopamine checkpoint of ``--capacity`` transitions written
   exactly as dopamine writes them (``tools/dopamine_ckpt.py``; gzip level 1 here, dopamine
   uses 9: same format); the same files stand in for ``--copies`` checkpoints (hard links
   under other suffixes).
2. ``import_dqn_replay`` in a fresh process: transitions/s, its peak RSS, file bytes per transition.
3. In a fresh process: lazy load time, RSS after ``--lazy-samples`` sample(256) calls from the lazily
   loaded file alone, then sample(32) / sample(256) from the lazily loaded file
   against the same buffer loaded into RAM (interleaved blocks, median of per-block ratios), and
   that process's peak RSS. A run of more than 1M transitions is also sampled against a 1M buffer
   of the same frames (its first checkpoints, imported the same way) in RAM: the issue's baseline.
TorchRL's ``AtariDQNExperienceReplay`` keeps every checkpoint as uncompressed memory-mapped tensors:
its bytes per transition are *computed* from the dataset's element sizes (one frame + action +
reward + terminal), a lower bound of its layout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


#: a run larger than this is also sampled against a buffer of this many transitions in RAM
REF_TRANSITIONS = 1_000_000


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_make(args: argparse.Namespace) -> dict:
    from dopamine_ckpt import collect_run, write_checkpoints

    t0 = time.perf_counter()
    run = collect_run(args.game, args.steps, seed=0)
    collect_s = time.perf_counter() - t0
    src = Path(args.work) / "replay_logs"
    t0 = time.perf_counter()
    write_checkpoints(run, src, args.capacity, every=args.capacity, steps=args.capacity)
    for k in range(1, args.copies):  # the same files stand in for more checkpoints
        for f in list(src.glob("*_ckpt.0.gz")):
            os.link(f, src / f.name.replace("_ckpt.0.gz", f"_ckpt.{k}.gz"))
    obs_gz = (src / "$store$_observation_ckpt.0.gz").stat().st_size
    return {"collect_s": collect_s, "write_s": time.perf_counter() - t0, "observation_gz_bytes": obs_gz}


def phase_import(args: argparse.Namespace) -> dict:
    from sb3_integration.offline import import_dqn_replay

    out = Path(args.work) / "run.h5"
    t0 = time.perf_counter()
    import_dqn_replay(Path(args.work), out, progress=False)
    s = time.perf_counter() - t0
    res = {"import_s": s, "file_bytes": out.stat().st_size, "import_peak_rss_mb": _peak_rss_mb()}
    if _ref_checkpoints(args):  # the baseline of the target: a 1M buffer of the same frames in RAM
        import_dqn_replay(Path(args.work), Path(args.work) / "ref1m.h5", progress=False,
                          suffixes=list(range(_ref_checkpoints(args))))
    return res


def _ref_checkpoints(args: argparse.Namespace) -> int:
    """Checkpoints of the 1M-transition reference buffer; 0 when the run itself is 1M or less."""
    if args.capacity * args.copies <= REF_TRANSITIONS:
        return 0
    return max(1, REF_TRANSITIONS // args.capacity)


def phase_sample(args: argparse.Namespace) -> dict:
    import psutil

    from sb3_integration.offline import DQNReplayBuffer

    out = Path(args.work) / "run.h5"
    proc = psutil.Process()
    lazy_only: dict = {"lazy_samples_256": args.lazy_samples}
    # verify=False first (no chunk CRCs), then the default (CRC32 of each chunk on its first read,
    # computed by the native read on the bytes it pread)
    for label, verify in (("noverify", False), ("default", None)):
        t0 = time.perf_counter()
        buf = DQNReplayBuffer.load(out, lazy=True, device="cpu", verify=verify)
        lazy_only[f"lazy_load_s_{label}"] = time.perf_counter() - t0
        rss = [proc.memory_info().rss / 2**20]
        np.random.seed(1)  # noqa: NPY002
        for _ in range(20):  # warm-up: the native kernels load (~110 MB), torch's first tensors
            buf.sample(256)
        rss.append(proc.memory_info().rss / 2**20)
        for _ in range(args.lazy_samples):  # random reads all over the file
            buf.sample(256)
        rss.append(proc.memory_info().rss / 2**20)
        lazy_only[f"lazy_rss_mb_{label}"] = rss
        if label == "noverify":
            lazy_only["lazy_only_peak_rss_mb"] = _peak_rss_mb()
            noverify = buf
        else:
            lazy = buf
    load_s = lazy_only["lazy_load_s_default"]
    t0 = time.perf_counter()
    eager = DQNReplayBuffer.load(out, lazy=False, device="cpu")
    eager_s = time.perf_counter() - t0
    res: dict = {"lazy_load_s": load_s, "load_into_ram_s": eager_s, "positions": lazy.n_positions,
                 "valid": lazy.size(), **lazy_only}
    np.random.seed(0)  # noqa: NPY002
    bufs = {"lazy": lazy, "lazy_noverify": noverify, "ram": eager}
    if _ref_checkpoints(args):  # the baseline: 1M transitions of the same frames, in RAM
        bufs["ram1m"] = DQNReplayBuffer.load(Path(args.work) / "ref1m.h5", lazy=False, device="cpu")
        res["ref_transitions"] = _ref_checkpoints(args) * args.capacity
    for batch in (32, 256):
        for b in bufs.values():
            for _ in range(5):
                b.sample(batch)  # warm-up
        times: dict[str, list[float]] = {k: [] for k in bufs}
        for _ in range(args.blocks):  # interleaved blocks: the ratio is the median of per-block ratios
            for k, b in bufs.items():
                t0 = time.perf_counter()
                for _ in range(args.reps):
                    b.sample(batch)
                times[k].append((time.perf_counter() - t0) / args.reps)
        for k in bufs:
            res[f"sample{batch}_{k}_ms"] = 1e3 * float(np.median(times[k]))
            if k not in ("ram", "ram1m"):
                res[f"sample{batch}_{k}_over_ram"] = float(np.median(np.array(times[k]) / np.array(times["ram"])))
                if "ram1m" in times:
                    res[f"sample{batch}_{k}_over_ram1m"] = float(
                        np.median(np.array(times[k]) / np.array(times["ram1m"])))
    for b in bufs.values():
        b.close()
    res["sample_process_peak_rss_mb"] = _peak_rss_mb()
    return res


def _child(phase: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--work", args.work, "--capacity", str(args.capacity),
           "--copies", str(args.copies), "--steps", str(args.steps), "--blocks", str(args.blocks),
           "--reps", str(args.reps), "--game", args.game, "--lazy-samples", str(args.lazy_samples)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capacity", type=int, default=250_000, help="transitions per checkpoint")
    ap.add_argument("--copies", type=int, default=4, help="checkpoints (copies of the one written)")
    ap.add_argument("--game", default="Pong")
    ap.add_argument("--steps", type=int, default=20_000, help="real steps collected (then cycled)")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--lazy-samples", type=int, default=500, help="sample(256) calls before RSS is read")
    ap.add_argument("--work", default=None)
    ap.add_argument("--phase", default=None)
    ap.add_argument("--out", default="results/bench_offline.json")
    args = ap.parse_args()
    if args.phase:
        print(json.dumps({"make": phase_make, "import": phase_import, "sample": phase_sample}[args.phase](args)))
        return
    tmp = None
    if args.work is None:
        tmp = args.work = tempfile.mkdtemp(prefix="bench_offline_")
    try:
        res = {"game": args.game, "policy": "uniformly random", "capacity": args.capacity, "checkpoints": args.copies,
               "transitions": args.capacity * args.copies, "real_steps_cycled": args.steps}
        res.update(_child("make", args))
        res.update(_child("import", args))
        res.update(_child("sample", args))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    n = res["transitions"]
    res["import_transitions_per_s"] = n / res["import_s"]
    res["file_bytes_per_transition"] = res["file_bytes"] / n
    res["torchrl_memmap_bytes_per_transition_computed"] = 84 * 84 + 4 + 4 + 1
    res["torchrl_over_ours_bytes_computed"] = res["torchrl_memmap_bytes_per_transition_computed"] / res[
        "file_bytes_per_transition"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    rows = [
        ("transitions imported", f"{n:,} ({args.copies} checkpoints of {args.capacity:,}; one file set)"),
        ("import rate", f"{res['import_transitions_per_s']:,.0f} transitions/s"),
        ("import peak RSS", f"{res['import_peak_rss_mb']:,.0f} MB"),
        ("file bytes per transition", f"{res['file_bytes_per_transition']:.0f}"),
        ("dataset's gzip'd observation file bytes per transition",
         f"{res['observation_gz_bytes'] / args.capacity:.0f}"),
        ("TorchRL memmap bytes per transition (computed)", f"{res['torchrl_memmap_bytes_per_transition_computed']:,}"),
        ("lazy load", f"{res['lazy_load_s']:.2f} s"),
        *[(f"sample({b}) lazy / in RAM (verify=False)",
           f"{res[f'sample{b}_lazy_over_ram']:.2f} ({res[f'sample{b}_lazy_noverify_over_ram']:.2f}); "
           f"in RAM {res[f'sample{b}_ram_ms']:.2f} ms") for b in (32, 256)],
        *[(f"RSS lazily loaded ({label}): after load / 20 warm-up sample(256) / {args.lazy_samples} more",
           " / ".join(f"{v:,.0f}" for v in res[f"lazy_rss_mb_{label}"]) + " MB")
          for label in ("noverify", "default")],
        ("peak RSS, lazily loaded with verify=False, sampled", f"{res['lazy_only_peak_rss_mb']:,.0f} MB"),
        *[(f"sample({b}) lazy / 1M in RAM (verify=False)",
           f"{res[f'sample{b}_lazy_over_ram1m']:.2f} ({res[f'sample{b}_lazy_noverify_over_ram1m']:.2f}); "
           f"1M in RAM {res[f'sample{b}_ram1m_ms']:.2f} ms") for b in (32, 256) if "ref_transitions" in res],
        ("load into RAM", f"{res['load_into_ram_s']:.2f} s"),
        ("peak RSS, sampling process (both buffers)", f"{res['sample_process_peak_rss_mb']:,.0f} MB"),
    ]
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
