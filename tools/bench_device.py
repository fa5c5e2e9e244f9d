"""GPU sampling for real: replay buffers whose frames live, decode and stack on a torch device.

Runs on every device it finds: always ``cpu``, and ``cuda`` when torch sees one (so a
GPU user runs it as is). Per game (real MsPacman and Pong stacks from SB3's own Atari
pipeline, ``--distinct`` real transitions cycled to fill ``--transitions``, n_envs 1),
three buffers are filled with the same transitions:

- SB3's ``ReplayBuffer`` (``device="cpu"``): its ``sample()`` then ``.to(device)`` of
  every field, what SB3 with ``device=<device>`` does;
- ours with frames in host memory (the default, ``CompressedReplayBuffer``), sampled
  to ``device``;
- ours with ``buffer_device=<device>`` (frames in device memory): ``sample()`` returns
  device tensors decoded and stacked there.

Reported: device bytes per transition (raw: SB3's obs + next obs, and each distinct
frame once uncompressed; compressed: the device arena, references and inbox; with the
host index beside it), torch ops per ``sample(32)`` and ``sample(256)`` counted with a
TorchDispatchMode (also at 2 and 8 envs, on a smaller real multi-env stream), sample
times (interleaved, same batches, min of group medians) as ratios to SB3's in the same
run, add() cost, and bit-exactness of every sampled field against SB3's for the same
seeds. On the cpu the times are information, not the target: the device path exists
so that a GPU never waits for the host.

RSS: a fresh process fills a ``buffer_device="cpu"`` buffer with 100k MsPacman
transitions; its RSS growth is compared with the device bytes it reports (target:
growth <= 1.2 x device bytes + 32 MB). The baseline is taken after imports, the
source transitions and one small warm-up buffer (the native layers, numba and
llvmlite, cost a process ~110 MB once, whatever the buffer holds).

Examples
--------
    PYTHONPATH=. .venv/bin/python tools/bench_device.py --out results/bench_device.json
    PYTHONPATH=. .venv/bin/python tools/bench_device.py --quick --games Pong
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, rss, run_fresh, save_results

ensure_importable()

import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402
from stable_baselines3.common.buffers import ReplayBuffer  # noqa: E402

from chunkstore.device.checks import NoHostReads, OpCounter  # noqa: E402
from sb3_integration import CompressedReplayBuffer  # noqa: E402

MB = 1 << 20
OBS = spaces.Box(0, 255, (4, 84, 84), np.uint8)
RAW_FRAME = 84 * 84
RSS_TARGET = (1.2, 32 * MB)


def devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fill(buf: Any, tr: Any, n: int) -> float:
    """``n`` adds cycling the transitions ``tr``; microseconds per add."""
    actions = tr.actions.reshape(len(tr), 1, -1)
    t0 = time.perf_counter()
    for i in range(n):
        t = i % len(tr)
        buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
    return (time.perf_counter() - t0) / n * 1e6


def bits(x: Any) -> bytes:
    return x.detach().cpu().numpy().tobytes()


def exact(ref: Any, ours: Any, seeds: range, batch: int) -> bool:
    """Every field of every sample bit-identical to SB3's (same seed), observations on our device."""
    for seed in seeds:
        np.random.seed(seed)  # noqa: NPY002
        a = ref.sample(batch)
        np.random.seed(seed)  # noqa: NPY002
        b = ours.sample(batch)
        for f in a._fields:
            x, y = getattr(a, f), getattr(b, f)
            if (x is None) != (y is None) or (x is not None and (x.dtype != y.dtype or bits(x) != bits(y))):
                return False
    return True


def count_ops(buf: Any, batch: int, device: str) -> int:
    """Torch ops of one ``sample(batch)`` in steady state (the same batch once before); no host reads."""
    np.random.seed(batch)  # noqa: NPY002
    buf.sample(batch)
    np.random.seed(batch)  # noqa: NPY002
    with OpCounter() as ops, NoHostReads(device):
        buf.sample(batch)
    return ops.total


def time_samples(arms: dict[str, Any], batch: int, device: str, repeats: int) -> dict[str, float]:
    """Min over groups of the median ms per arm; the arms run interleaved on the same seeds."""
    times: dict[str, list[float]] = {k: [] for k in arms}
    for r in range(repeats + 3):
        for name, fn in arms.items():
            np.random.seed(r)  # noqa: NPY002
            sync(device)
            t0 = time.perf_counter()
            fn(batch)
            sync(device)
            if r >= 3:
                times[name].append(time.perf_counter() - t0)
    group = max(1, repeats // 5)
    return {k: float(min(np.median(v[i:i + group]) for i in range(0, len(v) - group + 1, group)) * 1e3)
            for k, v in times.items()}


def sb3_to(ref: Any, device: str) -> Any:
    def sample(batch: int) -> Any:
        s = ref.sample(batch)
        return [None if x is None else x.to(device) for x in s]
    return sample


def device_bytes(buf: Any, n: int) -> dict[str, float]:
    fs = buf.frame_stores[None]
    arr, info = fs.frames, fs.frames.info()
    return {
        "raw SB3 obs+next B/tr": 2 * OBS.shape[0] * RAW_FRAME,
        "raw distinct frames B/tr": fs.frames_written * RAW_FRAME / n,
        "device B/tr": arr.nbytes / n,
        "records+refs B/tr": (info["record_nbytes"] + info["reference_nbytes"]) / n,
        "device + host index B/tr": (arr.nbytes + arr.index_nbytes + fs.index_nbytes) / n,
        "references": info["references"],
        "frames/tr": fs.frames_written / n,
    }


def bench_game(game: str, tr: Any, device: str, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    n = args.transitions
    act = spaces.Discrete(int(tr.actions.max()) + 1)
    ref = ReplayBuffer(n, OBS, act, "cpu")
    host = CompressedReplayBuffer(n, OBS, act, device)
    dev = CompressedReplayBuffer(n, OBS, act, device, buffer_device=device)
    add_us = {name: fill(b, tr, n) for name, b in (("SB3", ref), ("host", host), ("device", dev))}
    row: dict[str, Any] = {"game": game, "device": device, "transitions": n, **device_bytes(dev, n),
                           "host store B/tr": host.nbytes_stored / n,
                           "add us SB3": add_us["SB3"], "add us host": add_us["host"],
                           "add us device": add_us["device"],
                           "exact vs SB3": exact(ref, dev, range(args.exact_seeds), 256)
                           and exact(ref, host, range(2), 256)}
    heap = dev.frame_stores[None].frames.info()["heap"]
    row["segments in host RAM"] = heap["segments_in_host_ram"]
    times = []
    for b in args.batches:
        ops = count_ops(dev, b, device)
        ms = time_samples({"SB3 + .to": sb3_to(ref, device), "host": host.sample, "device": dev.sample},
                          b, device, args.repeats)
        times.append({"game": game, "device": device, "batch": b, "torch ops": ops,
                      "SB3 sample + .to ms": ms["SB3 + .to"], "host store ms": ms["host"],
                      "device store ms": ms["device"], "device / SB3": ms["device"] / ms["SB3 + .to"],
                      "host / SB3": ms["host"] / ms["SB3 + .to"]})
    for b in (ref, host, dev):
        if hasattr(b, "close"):
            b.close()
    del ref
    gc.collect()
    return row, times


def ops_by_envs(game: str, device: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Torch ops per sample on real multi-env streams: the same at every batch size and env count."""
    from atari_data import collect_stacked

    out = []
    for n_envs in args.envs:
        tr = collect_stacked(game, args.env_steps, n_envs, 0)
        act = spaces.Discrete(int(tr.actions.max()) + 1)
        buf = CompressedReplayBuffer(args.env_steps * n_envs, OBS, act, device, n_envs=n_envs,
                                     buffer_device=device)
        for t in range(len(tr)):
            buf.add(tr.obs[t], tr.next_obs[t], tr.actions[t].reshape(n_envs, -1), tr.rewards[t], tr.dones[t],
                    tr.infos[t])
        out.append({"game": game, "device": device, "n_envs": n_envs,
                    **{f"ops sample({b})": count_ops(buf, b, device) for b in args.batches}})
        buf.close()
    return out


# -- RSS in a fresh process -------------------------------------------------------------------------------
def rss_child(cfg: dict[str, Any]) -> dict[str, Any]:
    from atari_data import collect_stacked

    torch.set_num_threads(1)
    tr = collect_stacked(cfg["game"], cfg["distinct"], 1, 0)
    act = spaces.Discrete(int(tr.actions.max()) + 1)
    warm = CompressedReplayBuffer(64, OBS, act, "cpu", buffer_device="cpu")
    fill(warm, tr, 64)
    warm.sample(8)
    warm.close()
    del warm
    rss0 = rss()
    buf = CompressedReplayBuffer(cfg["transitions"], OBS, act, "cpu", buffer_device="cpu")
    fill(buf, tr, cfg["transitions"])
    growth = rss() - rss0
    dev = buf.device_nbytes
    allowed = RSS_TARGET[0] * dev + RSS_TARGET[1]
    np.random.seed(0)  # noqa: NPY002
    batch = buf.sample(256)  # decoding temporaries and the batch itself (2 x 7 MB) come on top, freed after
    del batch
    after = rss() - rss0
    return {"game": cfg["game"], "transitions": cfg["transitions"], "RSS growth MB": growth / MB,
            "device MB": dev / MB, "all stored MB (device + host)": buf.nbytes_stored / MB,
            "allowed MB (1.2 x device + 32)": allowed / MB, "met": growth <= allowed,
            "RSS growth after a sample(256) MB": after / MB}


# -- the run -----------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from atari_data import collect_stacked

    store, reads, envs, mem = [], [], [], []
    for game in args.games:
        tr = collect_stacked(game, args.distinct, 1, 0, progress=True)
        for device in args.devices:
            row, times = bench_game(game, tr, device, args)
            store.append(row)
            reads += times
            envs += ops_by_envs(game, device, args)
            print(f"{game} on {device}: done", file=sys.stderr)
        del tr
        gc.collect()
    if not args.no_rss:
        for game in args.rss_games:
            res = run_fresh(__file__, {"game": game, "distinct": args.distinct, "transitions": args.transitions},
                            timeout=1800)
            mem.append(res)
    md = [f"## Device bytes per transition ({args.transitions:,} transitions, {args.distinct:,} real ones cycled)",
          "", md_table(store, list(store[0])), "",
          "## Sample: torch ops (steady state, no host reads) and time, interleaved on the same batches", "",
          md_table(reads, list(reads[0])), "",
          "## Torch ops per sample on real multi-env streams", "", md_table(envs, list(envs[0]))]
    if mem:
        cols = list(next(m for m in mem if "error" not in m)) if any("error" not in m for m in mem) else ["error"]
        md += ["", "## RSS growth, buffer_device=\"cpu\", fresh process", "", md_table(mem, cols)]
    return {"config": vars(args), "store": store, "reads": reads, "ops_by_envs": envs, "rss": mem}, "\n".join(md)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=["MsPacman", "Pong"])
    p.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when present")
    p.add_argument("--transitions", type=int, default=100_000)
    p.add_argument("--distinct", type=int, default=20_000, help="real transitions collected (cycled)")
    p.add_argument("--batches", nargs="+", type=int, default=[32, 256])
    p.add_argument("--envs", nargs="+", type=int, default=[2, 8])
    p.add_argument("--env-steps", type=int, default=500, help="steps of the multi-env streams")
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--exact-seeds", type=int, default=10)
    p.add_argument("--rss-games", nargs="+", default=None, help="default: the first of --games")
    p.add_argument("--no-rss", action="store_true")
    p.add_argument("--quick", action="store_true", help="20,000 transitions of 5,000 real ones, 10 repeats")
    p.add_argument("--out", default=None)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # a fresh child's job
    args = p.parse_args(argv)
    if args.quick:
        args.transitions, args.distinct, args.repeats, args.exact_seeds = 20_000, 5_000, 10, 3
        args.env_steps = 200
    args.devices = args.devices or devices()
    args.rss_games = args.rss_games or args.games[:1]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.config:
        print(json.dumps(rss_child(json.loads(args.config))))
        return 0
    payload, md = run(args)
    print(md)
    save_results(args.out, payload, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
