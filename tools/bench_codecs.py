"""The codec advisor: every codec x chunk length on real observations (issue 2).

For each dataset, codec and ``chunk_len`` it measures, with the public Codec API
(``get_codec(name).encode(chunk)`` / ``.decode(buf, out=)``):

- ratio: raw bytes / encoded bytes over the whole dataset, split into chunks of
  ``chunk_len`` consecutive items (every chunk is checked bit-exact);
- encode / decode MB/s of raw bytes: best of ``--repeats`` passes;
- gather: the median latency of ``take()`` of 256 random items from a
  ``ChunkedArray`` of ``--gather-items`` (100k) items filled by cycling the data,
  with the decoded-chunk cache off (``cache=0``) and at its default budget
  (``cache=None``: 32 MiB), next to numpy fancy indexing (``np.take(..., out=)``)
  of an uncompressed array of the same shape in the same run. The figure is the
  ratio gather / numpy.

Datasets: real Atari frames (``pong``, ``mspacman``, ``breakout``: 84x84 gray via
SB3's AtariWrapper; ``mspacman-rgb``: raw 210x160x3), a user's ``--npy`` file, or
the observations of a saved buffer (``--h5``).

Examples
--------
    .venv/bin/python tools/bench_codecs.py --out results/bench_codecs.json
    .venv/bin/python tools/bench_codecs.py --quick
    .venv/bin/python tools/bench_codecs.py --npy my_obs.npy --codecs zstd1 lz4-block xor+lz4-block
    .venv/bin/python tools/bench_codecs.py --data mspacman --chunk-lens 16 64 --no-gather
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, fmt, md_table, progress, save_results

ensure_importable()

MB = 1e6  # throughput in MB/s of raw bytes (decimal)

#: sb3-extra-buffers grammar: ``zstd-5`` is level -5, ``zstd5`` level 5
DEFAULT_CODECS = [
    "none", "rle", "zstd1", "zstd3", "zstd3+dict", "zstd-5", "lz4-block", "lz4-frame",
    "blosc2-zstd-5", "blosc2-lz4-5", "xor+lz4-block", "xor+zstd1", "gzip1",
]
QUICK_CODECS = ["none", "zstd1", "zstd3+dict", "lz4-block", "xor+lz4-block"]
DEFAULT_CHUNK_LENS = [1, 4, 16, 64, 256]
DATASETS = {
    "pong": ("Pong", False), "mspacman": ("MsPacman", False),
    "breakout": ("Breakout", False), "mspacman-rgb": ("MsPacman", True),
}


@dataclass
class Dataset:
    name: str
    items: np.ndarray  # (n, *item_shape), C-contiguous

    @property
    def item_nbytes(self) -> int:
        return int(self.items[0].nbytes)


# == data ======================================================================


def load_datasets(args: argparse.Namespace) -> list[Dataset]:
    from atari_data import collect_frames, load_observations

    out = []
    for key in args.data:
        game, rgb = DATASETS[key]
        n = args.rgb_frames if rgb else args.frames
        t0 = time.perf_counter()
        frames = collect_frames(game, n, args.seed, raw_rgb=rgb, cache_dir=args.cache_dir, progress=True)
        print(f"{key}: {frames.shape} {frames.dtype} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        out.append(Dataset(key, np.ascontiguousarray(frames)))
    for path in args.npy or []:
        items = load_observations(path)
        out.append(Dataset(Path(path).name, np.ascontiguousarray(items[: args.max_items])))
    for path in args.h5 or []:
        out.append(Dataset(Path(path).name, np.ascontiguousarray(load_h5(path, args.h5_key, args.max_items))))
    return out


def load_h5(path: str, key: str | None, limit: int | None = None) -> np.ndarray:
    """Observations of a saved store / buffer file (issue 4's format).

    Uses ``chunkstore.hdf5.read_observations`` (stored chunks only, any codec).
    Without ``--h5-key`` it takes ``observations`` or, in a saved SB3 buffer, the
    observation frame array (the name that starts with "observations"); other
    HDF5 files are read with plain h5py.
    """
    from chunkstore import hdf5 as cs_format

    if key is None:
        key = _default_h5_key(path)
    return cs_format.read_observations(path, key, limit=limit)


def _default_h5_key(path: str) -> str:
    from chunkstore import hdf5 as cs_format
    from chunkstore.errors import FormatError

    try:
        with cs_format.load(path, lazy=True, cache=0) as store:
            names = list(store.arrays)
    except FormatError:
        import h5py

        with h5py.File(path, "r") as f:
            names = [n for n in f if isinstance(f[n], h5py.Dataset)]
    for want in ("observations", "observations.frames"):
        if want in names:
            return want
    obs = [n for n in names if n.startswith("observations")]
    if obs or names:
        return (obs or names)[0]
    raise ValueError(f"{path}: no arrays to benchmark; name one with --h5-key")


# == codec ratio / speed =======================================================


def chunks_of(items: np.ndarray, chunk_len: int) -> list[np.ndarray]:
    return [items[i : i + chunk_len] for i in range(0, len(items), chunk_len)]


def bench_codec(codec: Any, items: np.ndarray, chunk_len: int, repeats: int,
                keep: list[Any] | None = None) -> dict[str, Any]:
    """Ratio, encode and decode MB/s of ``items`` split into chunks; bit-exactness.

    With ``keep``, the encoded chunks are appended to it (the gather reuses them).
    """
    chunks = chunks_of(items, chunk_len)
    raw = items.nbytes
    enc_t, encoded = float("inf"), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        encoded = [codec.encode(c) for c in chunks]
        enc_t = min(enc_t, time.perf_counter() - t0)
    cbytes = sum(memoryview(b).nbytes for b in encoded)
    out = np.empty_like(items)  # one output buffer, touched once before timing (page faults)
    outs = chunks_of(out, chunk_len)
    for b, o in zip(encoded, outs, strict=True):
        codec.decode(b, out=o)
    exact = bool(np.array_equal(out, items))
    dec_t = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for b, o in zip(encoded, outs, strict=True):
            codec.decode(b, out=o)
        dec_t = min(dec_t, time.perf_counter() - t0)
    if keep is not None:
        keep.extend(encoded)
    return {
        "ratio": raw / cbytes, "cbytes": cbytes, "raw_bytes": raw, "nchunks": len(chunks),
        "encode_MBps": raw / enc_t / MB, "decode_MBps": raw / dec_t / MB, "exact": exact,
    }


def train_if_wanted(codec: Any, items: np.ndarray, n_train: int) -> Any:
    """Dictionary codecs (``zstd3+dict``) are trained on the first ``n_train`` items of a dataset.

    A ChunkedArray trains its own once it has seen enough data; here the trained
    codec is handed to both the codec pass and the ChunkedArray, so the two agree.
    """
    if getattr(codec, "wants_training", False):
        return codec.trained(list(items[:n_train]))
    return codec


# == gather from a ChunkedArray ================================================


class Gather:
    """A numpy baseline and random index sets for one dataset, shared by all codecs."""

    def __init__(self, items: np.ndarray, n_items: int, trials: int, batch: int, seed: int):
        self.items = items
        self.n = n_items
        rng = np.random.default_rng(seed)
        self.idx = [np.sort(rng.integers(0, n_items, batch)) for _ in range(trials)]
        # warm-up index sets differ from the timed ones, so a warm-up never pre-fills the cache for them
        self.warm = [np.sort(rng.integers(0, n_items, batch)) for _ in range(3)]
        # sorted like a sampler's grouped reads would be; numpy gets the same indices
        reps = -(-n_items // len(items))
        self.big = np.concatenate([items] * reps)[:n_items] if reps > 1 else items[:n_items].copy()
        self.out = np.empty((batch, *items.shape[1:]), items.dtype)
        self.out.fill(0)
        self.numpy_ms = self._median(lambda idx: np.take(self.big, idx, axis=0, out=self.out))

    def _median(self, fn: Any, warmup: int = 3, group: int = 5) -> float:
        """Min over groups of ``group`` calls of the group median, in ms (robust to load bursts)."""
        for idx in self.warm[:warmup]:
            fn(idx)
        ts = []
        for idx in self.idx:
            t0 = time.perf_counter()
            fn(idx)
            ts.append(time.perf_counter() - t0)
        meds = [np.median(ts[i : i + group]) for i in range(0, max(1, len(ts) - group + 1), group)]
        return float(min(meds) * 1e3)

    def fill(self, arr: Any) -> float:
        t0 = time.perf_counter()
        n, step = self.n, len(self.items)
        for start in range(0, n, step):
            arr.write(start, self.items[: min(step, n - start)])
        arr.flush()
        return time.perf_counter() - t0

    def _timed(self, arr: Any) -> dict[str, Any]:
        check = arr.take(self.idx[0])
        return {"exact": bool(np.array_equal(check, self.big[self.idx[0]])),
                "ms": self._median(lambda idx: arr.take(idx, out=self.out))}

    def install(self, arr: Any, encoded: list[Any]) -> float:
        """Fill ``arr`` with already-encoded chunks of the cycled data (``put_chunk_bytes``).

        Chunk ``c`` holds items ``c*L .. c*L+L-1``, i.e. data chunk ``c % (n / L)``
        when ``L`` divides the data length; a partial last chunk goes through ``write``.
        """
        t0 = time.perf_counter()
        L, n = arr.chunk_len, len(self.items)
        full = self.n // L
        for c in range(full):
            arr.put_chunk_bytes(c, encoded[c % len(encoded)])
        if full * L < self.n:
            start = full * L
            arr.write(start, self.items[start % n : start % n + self.n - start])
            arr.flush()
        return time.perf_counter() - t0

    def measure(self, codec: Any, chunk_len: int, encoded: list[Any] | None = None) -> dict[str, Any]:
        """Gather latency with the cache off (``cache=0``), then at its default budget (``cache=None``).

        Arrays are filled with ``encoded`` (the chunks the codec pass produced) via
        ``put_chunk_bytes`` when given and ``chunk_len`` divides the data length;
        otherwise through the write path (``write`` + ``flush``).
        """
        from chunkstore import ChunkedArray

        use_install = encoded is not None and len(self.items) % chunk_len == 0
        res: dict[str, Any] = {"fill": "put_chunk_bytes" if use_install else "write"}
        for label, cache in (("nocache", 0), ("cache", None)):
            arr = ChunkedArray(self.n, item_shape=self.items.shape[1:], dtype=self.items.dtype,
                               chunk_len=chunk_len, codec=codec, cache=cache, name="bench")
            res[f"fill_s_{label}"] = self.install(arr, encoded) if use_install else self.fill(arr)
            res.update(cratio=float(arr.cratio), cbytes=int(arr.cbytes))
            res[label] = self._timed(arr)
            if cache is None:
                info = arr.cache_info()
                res["cache_stats"] = {k: info.get(k) for k in ("hits", "misses", "nbytes", "max_bytes")}
            arr.clear()
            del arr
            gc.collect()
        return res


def gather_wanted(name: str, gather_on: list[str] | None) -> bool:
    """Default: the two games of the buffer benchmark and every user dataset (--npy / --h5)."""
    if gather_on is None:
        return name not in DATASETS or name in ("mspacman", "pong")
    return "all" in gather_on or name in gather_on


#: decoders far slower than memory (MB/s, not GB/s) are never a sensible
#: default for sampled data, so by default their gather is not measured
SLOW_PREFIXES = ("rle", "gzip", "igzip", "xor+rle", "xor+gzip", "xor+igzip")


def gather_codec_wanted(name: str, gather_codecs: list[str] | None) -> bool:
    if gather_codecs is None:
        return not name.startswith(SLOW_PREFIXES)
    return "all" in gather_codecs or name in gather_codecs


def gather_items_for(ds: Dataset, n_items: int, max_bytes: float) -> int:
    """100k items, unless the uncompressed numpy baseline would exceed ``max_bytes`` (RGB)."""
    return int(min(n_items, max_bytes // ds.item_nbytes))


# == run =======================================================================


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from chunkstore import get_codec

    datasets = load_datasets(args)
    codecs, skipped = {}, {}
    for name in args.codecs:
        try:
            codecs[name] = get_codec(name)
        except Exception as e:  # unknown name or missing optional backend
            skipped[name] = f"{type(e).__name__}: {e}"
    combos = [(d, c, L) for d in datasets for c in codecs for L in args.chunk_lens]
    rows: list[dict[str, Any]] = []
    gathers: dict[str, dict[str, Any]] = {}
    bar = progress(total=len(combos), desc="codec x chunk_len", unit="combo")
    for ds in datasets:
        g = None
        if args.gather and gather_wanted(ds.name, args.gather_on):
            n = gather_items_for(ds, args.gather_items, args.gather_max_gb * 1e9)
            bar.set_postfix_str(f"{ds.name}: numpy baseline, {n:,} items")
            g = Gather(ds.items, n, args.gather_trials, args.batch, args.seed)
            gathers[ds.name] = {"items": n, "numpy_ms": g.numpy_ms, "batch": args.batch}
        for cname, codec0 in codecs.items():
            codec = train_if_wanted(codec0, ds.items, args.dict_train)
            for L in args.chunk_lens:
                bar.set_postfix_str(f"{ds.name} {cname} L={L}")
                row = {"data": ds.name, "item_shape": list(ds.items.shape[1:]), "n_items": len(ds.items),
                       "codec": cname, "chunk_len": L}
                encoded: list[Any] | None = [] if args.fill == "install" else None
                try:
                    row.update(bench_codec(codec, ds.items, L, args.repeats, keep=encoded))
                except Exception as e:
                    row["error"] = f"codec: {type(e).__name__}: {e}"
                if g is not None and "error" not in row and gather_codec_wanted(cname, args.gather_codecs):
                    row.update(gather_items=g.n, numpy_ms=g.numpy_ms)
                    try:
                        r = g.measure(codec, L, encoded)
                    except Exception as e:
                        row["gather_error"] = f"{type(e).__name__}: {e}"
                    else:
                        for label in ("nocache", "cache"):
                            row[f"gather_{label}_ms"] = r[label]["ms"]
                            row[f"gather_{label}_x"] = r[label]["ms"] / g.numpy_ms
                            row[f"gather_{label}_exact"] = r[label]["exact"]
                        row.update(store_fill=r["fill"], store_fill_s=r["fill_s_nocache"], store_cratio=r["cratio"],
                                   store_cbytes=r["cbytes"], gather_cache_stats=r["cache_stats"])
                del encoded
                rows.append(row)
                bar.update(1)
        del g
        gc.collect()
    bar.close()
    return rows, {"gather": gathers, "skipped_codecs": skipped}


# == report ====================================================================


def pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows not beaten on both ratio (higher) and cache-off gather latency (lower)."""
    pts = [r for r in rows if "gather_nocache_ms" in r and r.get("exact")]
    return sorted((r for r in pts if not any(
        o["ratio"] >= r["ratio"] and o["gather_nocache_ms"] <= r["gather_nocache_ms"]
        and (o["ratio"], o["gather_nocache_ms"]) != (r["ratio"], r["gather_nocache_ms"]) for o in pts)),
        key=lambda r: r["gather_nocache_ms"])


COLS = [("codec", "codec"), ("chunk_len", "chunk_len"), ("ratio", "ratio"), ("encode_MBps", "enc MB/s"),
        ("decode_MBps", "dec MB/s"), ("gather_nocache_ms", "gather ms (no cache)"),
        ("gather_nocache_x", "/ numpy"), ("gather_cache_ms", "gather ms (cache 32 MiB)"),
        ("gather_cache_x", "/ numpy"), ("ok", "exact")]


def render(rows: list[dict[str, Any]], meta: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    for ds in dict.fromkeys(r["data"] for r in rows):
        sub = [r for r in rows if r["data"] == ds]
        for r in sub:
            r["ok"] = all(r.get(k, True) for k in ("exact", "gather_nocache_exact", "gather_cache_exact"))
        g = meta["gather"].get(ds)
        head = f"### {ds}: {sub[0]['n_items']:,} items of {tuple(sub[0]['item_shape'])}"
        if g:
            head += (f"; gather = take() of {g['batch']} random items from a ChunkedArray of {g['items']:,} items; "
                     f"numpy fancy indexing of the same uncompressed array: {fmt(g['numpy_ms'])} ms")
        parts += [head + "\n", md_table([r for r in sub if "error" not in r], COLS), ""]
        parts += [f"ratio by chunk_len ({ds}):\n", pivot(sub, args.chunk_lens, "ratio"), ""]
        if g:
            parts += [f"gather / numpy by chunk_len, cache off ({ds}):\n",
                      pivot(sub, args.chunk_lens, "gather_nocache_x"), ""]
        front = pareto(sub)
        if front:
            parts.append(f"Pareto front ({ds}, ratio vs cache-off gather): " + ", ".join(
                f"{r['codec']}@{r['chunk_len']} ({fmt(r['ratio'])}x, {fmt(r['gather_nocache_ms'])} ms)" for r in front))
            parts.append("")
        errs = [r for r in sub if "error" in r or "gather_error" in r]
        parts += [f"- error {r['codec']}@{r['chunk_len']}: "
                  + "; ".join(str(r[k]) for k in ("error", "gather_error") if k in r) for r in errs]
    if meta["skipped_codecs"]:
        parts.append("\nSkipped codecs: " + "; ".join(f"{k} ({v})" for k, v in meta["skipped_codecs"].items()))
    return "\n".join(parts)


def pivot(rows: list[dict[str, Any]], lens: list[int], key: str) -> str:
    """codec rows x chunk_len columns of ``key``."""
    table = []
    for c in dict.fromkeys(r["codec"] for r in rows):
        row: dict[str, Any] = {"codec": c}
        for r in rows:
            if r["codec"] == c and key in r:
                row[f"L{r['chunk_len']}"] = r[key]
        if len(row) > 1:
            table.append(row)
    return md_table(table, ["codec", *[(f"L{L}", str(L)) for L in lens]])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="*", default=None, choices=list(DATASETS),
                   help="Atari datasets (default: all four, or none when --npy/--h5 is given)")
    p.add_argument("--npy", nargs="+", help="a user's observations (.npy, or .npz with one array)")
    p.add_argument("--h5", nargs="+", help="a saved chunkstore/buffer file: benchmark its observations")
    p.add_argument("--h5-key", default=None, help="dataset inside --h5 (default: observations / the largest)")
    p.add_argument("--codecs", nargs="+", default=None, help=f"codec names (default: {' '.join(DEFAULT_CODECS)})")
    p.add_argument("--chunk-lens", nargs="+", type=int, default=None, help="default: 1 4 16 64 256")
    p.add_argument("--frames", type=int, default=8192, help="84x84 frames per Atari dataset")
    p.add_argument("--rgb-frames", type=int, default=1024, help="210x160x3 frames for mspacman-rgb")
    p.add_argument("--max-items", type=int, default=20000, help="items used from --npy / --h5")
    p.add_argument("--dict-train", type=int, default=1024,
                   help="items of each dataset a dictionary codec (zstd3+dict) is trained on")
    p.add_argument("--repeats", type=int, default=3, help="encode/decode passes; the best counts")
    p.add_argument("--no-gather", dest="gather", action="store_false", help="skip the ChunkedArray gather")
    p.add_argument("--gather-on", nargs="+", default=None,
                   help="datasets to run the gather on, or 'all' (default: mspacman, pong and user data)")
    p.add_argument("--gather-codecs", nargs="+", default=None,
                   help="codecs to run the gather for, or 'all' (default: all but rle / gzip / igzip)")
    p.add_argument("--gather-items", type=int, default=100_000)
    p.add_argument("--gather-max-gb", type=float, default=2.0,
                   help="cap on the uncompressed numpy baseline (fewer items for big observations)")
    p.add_argument("--fill", choices=["install", "write"], default="install",
                   help="fill the gather arrays with the codec pass's chunks (put_chunk_bytes, fast) "
                        "or through write()+flush() (exercises and times the write path)")
    p.add_argument("--gather-trials", type=int, default=40,
                   help="timed take() calls: the minimum over groups of 5 of the group median")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None, help="Atari data cache (default ./data)")
    p.add_argument("--quick", action="store_true", help="CI-sized: small data, few codecs and chunk lengths")
    p.add_argument("--out", default=None, help="JSON output; the Markdown tables go beside it (.md)")
    args = p.parse_args(argv)
    if args.data is None:
        args.data = [] if (args.npy or args.h5) else (["mspacman", "pong"] if args.quick else list(DATASETS))
    if args.quick:
        args.frames, args.rgb_frames = min(args.frames, 1024), min(args.rgb_frames, 128)
        args.gather_items, args.gather_trials, args.repeats = min(args.gather_items, 10_000), 5, 1
        args.codecs = args.codecs or QUICK_CODECS
        args.chunk_lens = args.chunk_lens or [1, 16, 64]
    args.codecs = args.codecs or DEFAULT_CODECS
    args.chunk_lens = args.chunk_lens or DEFAULT_CHUNK_LENS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    rows, meta = run(args)
    md = render(rows, meta, args)
    md += f"\n\n_{time.perf_counter() - t0:.0f} s; timings are best-of-{args.repeats} (MB/s) and medians " \
          f"of {args.gather_trials} (gather) on a shared machine: compare ratios within this run._"
    print(md)
    save_results(args.out, {"args": vars(args), "rows": rows, **meta}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
