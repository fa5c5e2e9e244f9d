"""What HDF5's chunk index costs a save: fixed-shape datasets (an index entry for every chunk of the
capacity, the layout before) against an extensible first axis (entries for the chunks written).

    python tools/bench_save_index.py --out results/bench_save_index.json

One ``ChunkedArray`` of ``--capacity`` (84, 84) uint8 frames in chunks of 4 with plain zstd (one HDF5
chunk per chunk: the layout whose index is largest), a ``--fractions`` share of its chunks installed
from the same encoded chunk (a frame of a few values: ~100 B, so the array holds little RAM).
Each fraction saves and lazily loads both layouts in ``--rounds`` rounds, the arms taking turns
(the "before" arm is today's writer with ``maxshape`` dropped); medians, and after / before ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--capacity", type=int, default=1_250_016, help="frames (default: a 1M buffer's ring)")
    p.add_argument("--fractions", default="0.0005,0.1,1.0", help="shares of the chunks written")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import h5py

    from chunkstore import ChunkedArray, hdf5
    from chunkstore.codecs import get_codec

    plain = h5py.Group.create_dataset

    def fixed_shape(self: Any, name: str, *a: Any, **kw: Any) -> Any:
        kw.pop("maxshape", None)
        return plain(self, name, *a, **kw)

    frame = np.zeros((4, 84, 84), np.uint8)
    frame[:, ::7, ::5] = 3
    enc = get_codec("zstd3").encode(frame)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-save-index-") as d:
        for frac in (float(f) for f in args.fractions.split(",")):
            arr = ChunkedArray(args.capacity, (84, 84), np.uint8, chunk_len=4, codec="zstd3")
            n = max(1, int(arr.nchunks_total * frac))
            for c in range(n):
                arr.put_chunk_bytes(c, enc)
            got: dict[str, dict[str, list[float]]] = {a: {"save": [], "load": [], "bytes": []}
                                                      for a in ("before", "after")}
            for _ in range(args.rounds):
                for arm in ("before", "after"):
                    h5py.Group.create_dataset = fixed_shape if arm == "before" else plain  # type: ignore[method-assign]
                    path = os.path.join(d, f"{arm}.h5")
                    try:
                        t = time.perf_counter()
                        hdf5.save(path, {"frames": arr}, progress=False)
                        got[arm]["save"].append(time.perf_counter() - t)
                    finally:
                        h5py.Group.create_dataset = plain  # type: ignore[method-assign]
                    t = time.perf_counter()
                    with hdf5.load(path) as store:
                        assert np.array_equal(store.arrays["frames"].take([0, 3]), frame[[0, 3]])
                    got[arm]["load"].append(time.perf_counter() - t)
                    got[arm]["bytes"].append(os.path.getsize(path))
                    os.remove(path)
            arr.close()
            med = {arm: {k: statistics.median(v) for k, v in m.items()} for arm, m in got.items()}
            rows.append({
                "chunks written": n, "of": arr.nchunks_total,
                "file MB before": med["before"]["bytes"] / 1e6, "file MB after": med["after"]["bytes"] / 1e6,
                "save s before": med["before"]["save"], "save s after": med["after"]["save"],
                "save after / before": med["after"]["save"] / med["before"]["save"],
                "lazy load s before": med["before"]["load"], "lazy load s after": med["after"]["load"],
            })
            print(md_table(rows[-1:], list(rows[-1])), flush=True)
    table = md_table(rows, list(rows[0]))
    print("\n" + table)
    save_results(args.out, {"rows": rows, "rounds": args.rounds, "capacity": args.capacity},
                 f"# bench_save_index\n\n{__doc__.split(chr(10))[0]}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
