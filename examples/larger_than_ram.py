"""A replay buffer larger than its RAM budget: HybridTier spills old chunks to disk, RSS stays bounded.

    .venv/bin/python examples/larger_than_ram.py                   # ~1 GB of chunks, 64 MB of RAM for them
    .venv/bin/python examples/larger_than_ram.py --transitions 1000000 --dir /scratch

A ``CompressedReplayBuffer`` of (4, 84, 84) uint8 frame stacks whose chunks live in
a :class:`chunkstore.HybridTier`: the newest segments in RAM under ``--ram-mb``,
older ones written to files under ``--dir`` and read back through a bounded
memory map. The frames are made to compress poorly (4-bit noise, about 2x), so
the buffer's compressed bytes are many times its RAM budget; SB3's
``ReplayBuffer`` would need 56 KB per transition. The script prints the process
RSS while it fills, then reads 8 batches of 256 random transitions back and checks every
one against the frames it generated.

Rows are written at step ``t`` into row ``t`` (the buffer holds all ``--transitions``),
so row ``r`` holds the stacks of step ``r``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import psutil
from gymnasium import spaces

from chunkstore import HybridTier
from sb3_integration import CompressedReplayBuffer

DEPTH, SIDE, POOL = 4, 84, 4096


def frame_pool(seed: int = 0) -> np.ndarray:
    """``POOL`` distinct 84x84 frames of 4-bit noise; frame ``g`` of the stream is ``pool[g % POOL]``."""
    return np.random.default_rng(seed).integers(0, 16, (POOL, SIDE, SIDE), dtype=np.uint8)


def stack(pool: np.ndarray, t: int) -> np.ndarray:
    """The observation at step ``t``: frames ``t .. t + 3`` of the stream, oldest first."""
    return pool[np.arange(t, t + DEPTH) % POOL]


def mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transitions", type=int, default=300_000)
    p.add_argument("--ram-mb", type=int, default=64, help="RAM budget of the tier's segments")
    p.add_argument("--dir", default=None, help="where spilled segments go (default: a temporary folder)")
    p.add_argument("--codec", default="zstd1")
    p.add_argument("--chunk-len", type=int, default=64)
    args = p.parse_args()

    proc = psutil.Process()
    pool = frame_pool()
    n = args.transitions
    space = spaces.Box(0, 255, (DEPTH, SIDE, SIDE), np.uint8)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        tier = HybridTier(args.ram_mb << 20, folder)
        buf = CompressedReplayBuffer(n, space, spaces.Discrete(4), "cpu", compression_method=args.codec,
                                     chunk_len=args.chunk_len, tier=tier)
        rss0 = proc.memory_info().rss
        peak = 0
        zero, infos = np.zeros(1, np.int64), [{}]
        checkpoints = {int(c) for c in np.linspace(n / 6, n, 6)}
        print(f"{'transitions':>12} {'chunks':>9} {'in RAM':>8} {'on disk':>9} {'RSS growth':>11}   SB3 would hold")
        t0 = time.perf_counter()
        for t in range(n):
            buf.add(stack(pool, t)[None], stack(pool, t + 1)[None], zero, np.zeros(1, np.float32),
                    np.zeros(1, bool), infos)
            if t + 1 in checkpoints:
                info, rss = tier.info(), proc.memory_info().rss - rss0
                peak = max(peak, rss)
                print(f"{t + 1:>12,} {mb(buf.nbytes_stored):>9} {mb(info['ram_nbytes']):>8} "
                      f"{mb(info['disk_nbytes']):>9} {mb(rss):>11}   "
                      f"{(t + 1) * 2 * space.shape[0] * SIDE * SIDE / 1e9:,.1f} GB")
        fill_s = time.perf_counter() - t0

        rng = np.random.default_rng(1)
        ok, read_s = True, 0.0
        for _ in range(8):  # 8 batches of 256, as sample(256) reads them
            rows = rng.integers(0, n, 256)
            t0 = time.perf_counter()
            got_obs = buf.observations[rows, np.zeros_like(rows)]
            got_next = buf.next_observations[rows, np.zeros_like(rows)]
            read_s += time.perf_counter() - t0
            ok &= all(np.array_equal(got_obs[i], stack(pool, int(r)))
                      and np.array_equal(got_next[i], stack(pool, int(r) + 1)) for i, r in enumerate(rows))
            peak = max(peak, proc.memory_info().rss - rss0)
        print(f"filled in {fill_s:.1f} s ({n / fill_s:,.0f} transitions/s); 8 x 256 random transitions read in "
              f"{read_s:.2f} s and checked against the generated frames: {'all equal' if ok else 'MISMATCH'}")
        print(f"compressed {mb(buf.nbytes_stored)}, RAM budget {mb(args.ram_mb << 20)}, "
              f"peak RSS growth {mb(peak)} ({peak / max(buf.nbytes_stored, 1):.2f} x the compressed bytes)")
        tier.close()
        if not ok:
            raise SystemExit("read back differs from what was written")


if __name__ == "__main__":
    main()
