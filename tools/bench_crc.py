"""Which CRC32 the native read path should call: zlib's by address, or its own table (issue 26).

    python tools/bench_crc.py --out results/bench_crc.json

Times the CRC32 of one buffer (random bytes, several sizes: a lazily loaded Atari buffer's
chunks are ~1 KB, larger chunks of other stores reach hundreds of KB) three ways, interleaved
in ``--rounds`` rounds: ``zlib.crc32`` from Python (per call: the interpreter's overhead too),
zlib's ``crc32`` called by address from a numba kernel (what the native read path uses), and
the kernels' own slicing-by-8 table CRC32 (its fallback where no libz loads). Reports GB/s
(best round) and each one's time against zlib by address in the same round (median).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1024,16384,262144")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--bytes-per-round", type=int, default=64 << 20)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    from numba import njit

    from chunkstore.native import _kernels as k
    from chunkstore.native._lib import crc32_address

    fn = crc32_address()
    if not fn:
        raise SystemExit("no libz loads here: only the table CRC32 would run")

    @njit(nogil=True)
    def loop(f: int, addr: int, n: int, reps: int) -> int:  # reps calls in one kernel call
        acc = 0
        for _ in range(reps):
            acc ^= k.crc32_at(f, addr, n)
        return acc

    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
        want = zlib.crc32(data)
        assert int(k.crc32_at(fn, data.ctypes.data, size)) == want == int(k.crc32_table(data.ctypes.data, size))
        reps = max(1, args.bytes_per_round // size)
        ways: dict[str, Any] = {
            "zlib.crc32 from Python": lambda d=data, r=reps: [zlib.crc32(d) for _ in range(r)],
            "zlib's crc32 by address (native read path)": lambda d=data, r=reps: loop(fn, d.ctypes.data, d.size, r),
            "table, slicing-by-8 (fallback)": lambda d=data, r=reps: loop(0, d.ctypes.data, d.size, r),
        }
        for w in ways.values():
            w()  # compile, warm
        rounds = []
        for r in range(args.rounds):
            names = list(ways)
            names = names[r % len(names):] + names[:r % len(names)]
            times = {}
            for name in names:
                t0 = time.perf_counter()
                ways[name]()
                times[name] = time.perf_counter() - t0
            rounds.append(times)
        base = "zlib's crc32 by address (native read path)"
        for name in ways:
            best = min(t[name] for t in rounds)
            rows.append({"size": size, "way": name, "gbs": size * reps / best / 1e9,
                         "us": best / reps * 1e6,
                         "ratio": float(np.median([t[name] / t[base] for t in rounds]))})
    cols = [("size", "buffer bytes"), ("way", "CRC32"), ("gbs", "GB/s (best round)"),
            ("us", "us per buffer"), ("ratio", "time / zlib by address (same round, median)")]
    table = md_table(rows, cols)
    head = f"{args.rounds} rounds, {args.bytes_per_round >> 20} MiB per way per round, interleaved"
    print(head)
    print(table)
    save_results(args.out, {"rows": rows, "rounds": args.rounds}, f"# bench_crc\n\n{head}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
