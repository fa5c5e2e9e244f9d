"""What opening a file through the global heap check costs a load and a verify.

    python tools/bench_heapcheck.py --out results/bench_heapcheck.json

``chunkstore.hdf5`` opens files through ``HeapCheckedFile`` (h5py's ``fileobj`` driver: HDF5's
reads go through Python, and each global heap collection is walked before HDF5 parses it). The
"before" arm opens the descriptor's ``/proc/self/fd`` path with h5py's default driver, as loads
did before. One saved store per size (``--items`` items of 16 uint8 in chunks of 4, zstd3, plus
a float32 array and an int64 extra of the same length); a lazy load, an eager load and
``hdf5.verify`` of each, in ``--rounds`` rounds, the arms taking turns; medians, after / before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", default="60000,600000", help="items per store, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    from chunkstore import ChunkedArray, hdf5
    from chunkstore.hdf5 import _meta

    checked = _meta.HeapCheckedFile

    def plain_path(fd: int) -> str:
        return f"/proc/self/fd/{fd}"

    rows = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in args.items.split(",")):
            path = os.path.join(d, f"s{n}.h5")
            a = ChunkedArray(n, (16,), np.uint8, chunk_len=4, codec="zstd3", name="obs")
            a[:] = rng.integers(0, 4, (n, 16), dtype=np.uint8)
            r = ChunkedArray(n, (), np.float32, chunk_len=64, codec="lz4-block", name="r")
            r[:] = rng.normal(size=n).astype(np.float32)
            hdf5.save(path, {"obs": a, "r": r}, {"actions": rng.integers(0, 5, n)}, {"pos": n}, progress=False)
            chunks = a.nchunks_total + r.nchunks_total
            a.close()
            r.close()
            got: dict[str, dict[str, list[float]]] = {arm: {"lazy": [], "eager": [], "verify": []}
                                                      for arm in ("before", "after")}
            for _ in range(args.rounds):
                for arm in ("before", "after"):
                    _meta.HeapCheckedFile = plain_path if arm == "before" else checked  # type: ignore[assignment,misc]
                    try:
                        for what in ("lazy", "eager", "verify"):
                            t = time.perf_counter()
                            if what == "verify":
                                assert hdf5.verify(path) == []
                            else:
                                hdf5.load(path, lazy=what == "lazy").close()
                            got[arm][what].append(time.perf_counter() - t)
                    finally:
                        _meta.HeapCheckedFile = checked  # type: ignore[misc]
            med = {arm: {k: statistics.median(v) for k, v in m.items()} for arm, m in got.items()}
            row = {"items": n, "chunks": chunks, "file MB": os.path.getsize(path) / 1e6}
            for what in ("lazy", "eager", "verify"):
                row[f"{what} s before"] = med["before"][what]
                row[f"{what} s after"] = med["after"][what]
                row[f"{what} after / before"] = med["after"][what] / med["before"][what]
            rows.append(row)
            print(md_table(rows[-1:], list(rows[-1])), flush=True)
    table = md_table(rows, list(rows[0]))
    print("\n" + table)
    save_results(args.out, {"rows": rows, "rounds": args.rounds},
                 f"# bench_heapcheck\n\n{__doc__.split(chr(10))[0]}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
