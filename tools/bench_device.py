"""DeviceArray at store level (issue 15, part 1): device bytes, write cost, and replay-shaped reads.

A ring of ``--items`` real 84x84 frames (a game's ``--frames`` random-policy frames,
cycled) is written one frame at a time, as the frame engine writes, into a
:class:`~chunkstore.device.DeviceArray` and, for comparison in the same run, into a
host :class:`~chunkstore.ChunkedArray` with its default codec. Then reads shaped like
a replay sample: ``B`` observations and ``B`` next observations of 4 stacked frames,
``(2B, 4)`` frame ids (next = obs shifted by one frame, 1% padding ids ``-1``), read
in one call and viewed as ``(2, B, 4, 84, 84)``:

- DeviceArray: ``take(ids).view(...)`` (the tensor is on the device; here the cpu),
  torch ops counted with a dispatch mode;
- ChunkedArray: ``take_into`` a host array, then ``torch.from_numpy`` (what a host
  store hands to a cpu learner; on a GPU it would still have to cross PCIe).

Times are medians of ``--repeats`` reads; ratios are against the ChunkedArray in the
same run. Part 2 extends this with the replay buffers.

Examples
--------
    .venv/bin/python tools/bench_device.py --out results/bench_device.json
    .venv/bin/python tools/bench_device.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()

import torch  # noqa: E402

from chunkstore import ChunkedArray  # noqa: E402
from chunkstore.device import DeviceArray  # noqa: E402
from chunkstore.device.checks import NoHostReads, OpCounter  # noqa: E402

SIDE = 84
DEPTH = 4


def fill(arr: Any, frames: np.ndarray, n: int) -> float:
    """Write ``n`` frames one at a time (cycling ``frames``); microseconds per frame."""
    t0 = time.perf_counter()
    for i in range(n):
        arr[i] = frames[i % len(frames)]
    arr.flush()
    return (time.perf_counter() - t0) / n * 1e6


def sample_ids(rng: np.random.Generator, n: int, batch: int) -> np.ndarray:
    """``(2 * batch, 4)`` frame ids: stacks ending at random frames, then the next stacks."""
    newest = rng.integers(DEPTH, n - 1, batch)
    obs = newest[:, None] + np.arange(1 - DEPTH, 1)
    ids = np.concatenate([obs, obs + 1])
    ids[rng.random(ids.shape) < 0.01] = -1  # padding after an episode start
    return ids


def median_ms(fn: Any, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from atari_data import collect_frames

    rows, reads = [], []
    for game in args.games:
        frames = collect_frames(game, max(args.frames, 20000))[:args.frames]
        dev = DeviceArray(args.items, (SIDE, SIDE), np.uint8, chunk_len=4)
        host = ChunkedArray(args.items, (SIDE, SIDE), np.uint8, chunk_len=4)
        w_dev, w_host = fill(dev, frames, args.items), fill(host, frames, args.items)
        info = dev.info()
        rows.append({"game": game, "items": args.items,
                     "device B/frame": info["nbytes"] / args.items,
                     "records B/frame": info["record_nbytes"] / args.items,
                     "references": info["references"], "index B/frame (host)": info["index_nbytes"] / args.items,
                     "ChunkedArray B/frame": (host.cbytes + host.table_nbytes) / args.items,
                     "write us/frame": w_dev, "write / ChunkedArray": w_dev / w_host})
        rng = np.random.default_rng(0)
        for b in args.batches:
            ids = sample_ids(rng, args.items, b)
            out = np.empty((2 * b, DEPTH, SIDE, SIDE), np.uint8)

            def dev_read(ids: np.ndarray = ids, b: int = b, arr: DeviceArray = dev) -> Any:
                return arr.take(ids).view(2, b, DEPTH, SIDE, SIDE)

            def host_read(ids: np.ndarray = ids, b: int = b, out: np.ndarray = out,
                          arr: ChunkedArray = host) -> Any:
                arr.take_into(ids, out)
                return torch.from_numpy(out).view(2, b, DEPTH, SIDE, SIDE)

            assert torch.equal(dev_read(), host_read())  # bit-identical samples
            dev_read()
            with OpCounter() as ops, NoHostReads(dev.device):
                dev_read()
            t_dev, t_host = median_ms(dev_read, args.repeats), median_ms(host_read, args.repeats)
            reads.append({"game": game, "batch": b, "frame ids": ids.size, "torch ops": ops.total,
                          "DeviceArray ms": t_dev, "ChunkedArray ms": t_host, "ratio": t_dev / t_host})
        dev.close()
        print(f"{game}: done", file=sys.stderr)
    md = [f"## Store: {args.items} frames written one at a time", "",
          md_table(rows, list(rows[0])), "",
          "## Replay-shaped reads on the cpu: obs and next_obs stacks in one take", "",
          md_table(reads, list(reads[0]))]
    return {"config": vars(args), "store": rows, "reads": reads}, "\n".join(md)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=["MsPacman", "Pong"])
    p.add_argument("--frames", type=int, default=20000, help="distinct frames per game")
    p.add_argument("--items", type=int, default=100_000, help="ring size (frames cycled to fill it)")
    p.add_argument("--batches", nargs="+", type=int, default=[32, 256])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="20,000 items, 10 repeats")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.repeats = 20000, 10
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    payload, md = run(args)
    print(md)
    save_results(args.out, payload, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
