"""Would sealing chunks on a background thread make add() faster here? (issue 18, part 3)

A replay ``add()`` spends ~15-25 us in Python and, every ``chunk_len`` adds, encodes
a chunk with zstd (which releases the GIL). This benchmark isolates the question
without the buffer: a loop of ``--work-us`` of Python work per step, and every
``--chunk-len`` steps one real chunk of Atari frames encoded with the buffer's
codec (``zstd3+dict``, trained), either

* inline, on the calling thread (what the buffers do), or
* handed to a one-thread pool, the result collected later (a background sealer:
  the caller only submits and picks up finished results).

It reports the time per step of each, interleaved in repeated blocks, and their
ratio. On a 2-core box the pool's thread needs the GIL to start each task and to
finish it, and the caller's Python work holds the GIL: the encode overlaps, but
the hand-offs cost more than it saves (see results/bench_sealer.md).

Examples
--------
    .venv/bin/python tools/bench_sealer.py --out results/bench_sealer.json
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, env_info, md_table, save_results

ensure_importable()


def busy(us: float) -> None:
    """Python work holding the GIL for ``us`` microseconds (what add() does between encodes)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def inline(frames: np.ndarray, codec: Any, steps: int, work_us: float, chunk_len: int) -> float:
    t0 = time.perf_counter()
    for i in range(steps):
        busy(work_us)
        if i % chunk_len == chunk_len - 1:
            codec.encode(frames[i - chunk_len + 1:i + 1])
    return (time.perf_counter() - t0) / steps * 1e6


def background(frames: np.ndarray, codec: Any, pool: ThreadPoolExecutor, steps: int, work_us: float,
               chunk_len: int) -> float:
    t0 = time.perf_counter()
    pending: list[Any] = []
    for i in range(steps):
        busy(work_us)
        while pending and pending[0].done():  # install what finished (here: just collect it)
            pending.pop(0).result()
        if i % chunk_len == chunk_len - 1:
            pending.append(pool.submit(codec.encode, frames[i - chunk_len + 1:i + 1]))
    for f in pending:
        f.result()
    return (time.perf_counter() - t0) / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="MsPacman")
    p.add_argument("--work-us", type=float, nargs="+", default=[10.0, 20.0])
    p.add_argument("--chunk-len", type=int, default=4)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    from atari_data import collect_stacked

    from chunkstore import ChunkedArray

    tr = collect_stacked(args.game, 20_000, 1, 0, None)
    frames = np.ascontiguousarray(tr.obs[:, 0, -1])
    arr = ChunkedArray(len(frames), frames.shape[1:], np.uint8, chunk_len=args.chunk_len)
    arr[:] = frames  # trains the dictionary: the codec the buffers end up with
    codec = arr.codec
    rows = []
    with ThreadPoolExecutor(1) as pool:
        for work in args.work_us:
            ratios, t_in, t_bg = [], [], []
            for _ in range(args.reps):
                a = inline(frames, codec, args.steps, work, args.chunk_len)
                b = background(frames, codec, pool, args.steps, work, args.chunk_len)
                t_in.append(a)
                t_bg.append(b)
                ratios.append(b / a)
            rows.append({"codec": codec.name, "work_us": work, "inline_us": float(np.median(t_in)),
                         "background_us": float(np.median(t_bg)), "background_vs_inline": float(np.median(ratios))})
    md = ("### A background sealer against inline sealing (per step; every "
          f"{args.chunk_len}th step encodes a chunk)\n\n"
          + md_table(rows, [("codec", "codec"), ("work_us", "Python work per step us"),
                            ("inline_us", "inline us/step"), ("background_us", "background us/step"),
                            ("background_vs_inline", "background / inline")]) + "\n")
    print(md)
    save_results(args.out, {"env": env_info(), "args": vars(args), "rows": rows}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
