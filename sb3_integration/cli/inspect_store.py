"""``chunkstore-inspect``: glance at a saved chunkstore file: per array codec, chunks, bytes, ratio, chunk sizes.

    chunkstore-inspect buffer.h5
    chunkstore-inspect buffer.h5 --json
    chunkstore-inspect buffer.h5 --plot chunks.png   # per-chunk sizes (matplotlib)

(``python tools/inspect_store.py`` in a clone runs the same ``main``.)

For a saved replay buffer it speaks in transitions and frames first: live transitions
and capacity, frames stored, bytes per transition and the ratio against SB3's
ReplayBuffer (which holds each observation twice: obs and next_obs). Chunks stay on
disk (lazy load); nothing is decoded. Exit status: 0, 1 corrupt, 2 unreadable, with
a one-line message.
"""

from __future__ import annotations

import sys
from typing import Any

from sb3_integration.cli._store_io import OK, UNREADABLE, buffer_summary, guarded, is_buffer


def array_summary(name: str, arr: Any, h5_filter: str) -> dict[str, Any]:
    """The glance row of one ChunkedArray (public API only)."""
    import numpy as np

    stored = arr.stored_chunks()
    sizes = arr.chunk_nbytes()[stored]
    item_nbytes = arr.nbytes // arr.capacity
    raw = sum(arr.chunk_rows(int(c)) for c in stored) * item_nbytes
    return {
        "name": name,
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "codec": arr.codec.name,
        "hdf5_filter": h5_filter,
        "chunk_len": arr.chunk_len,
        "chunks_stored": len(stored),
        "chunks_total": arr.nchunks_total,
        "nbytes": arr.nbytes,
        "raw_bytes": int(raw),
        "stored_bytes": int(sizes.sum()),
        "ratio": raw / int(sizes.sum()) if len(stored) else None,
        "chunk_bytes_min": int(sizes.min()) if len(stored) else None,
        "chunk_bytes_median": float(np.median(sizes)) if len(stored) else None,
        "chunk_bytes_max": int(sizes.max()) if len(stored) else None,
        "cache": "n/a",  # a file has no live cache
    }


def summarize(path: str, plot: str | None = None) -> dict[str, Any]:
    import os

    from chunkstore import hdf5

    with hdf5.load(path, lazy=True, cache=0) as store:
        filters = store.header.get("hdf5_filters", {})
        info = {
            "file": path,
            "file_bytes": os.path.getsize(path),
            "format_version": store.header["format_version"],
            "chunkstore_version": store.header["chunkstore_version"],
            "created": store.header["created"],
            "checksums": store.header.get("checksums"),
            "arrays": [array_summary(n, a, filters.get(n, "?")) for n, a in store.arrays.items()],
            "extras": [{"name": n, "shape": list(v.shape), "dtype": str(v.dtype),
                        "nbytes": int(v.nbytes)} for n, v in store.extras.items()],
            "attrs": store.attrs,
        }
        if is_buffer(store):
            info["buffer"] = buffer_summary(store, info["file_bytes"])
        if plot:
            plot_chunk_sizes(store, plot)
    return info


def plot_chunk_sizes(store: Any, out: str) -> None:
    """One panel per array: encoded bytes of each stored chunk, by chunk index."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("inspect: --plot needs matplotlib: pip install matplotlib "
                         "(or pip install 'chunkstore-rl[tools]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arrays = [(n, a) for n, a in store.arrays.items() if a.nchunks]
    if not arrays:
        raise SystemExit("inspect: --plot: no stored chunks to plot")
    fig, axes = plt.subplots(len(arrays), 1, figsize=(9, 2.6 * len(arrays)), squeeze=False)
    for ax, (name, arr) in zip(axes[:, 0], arrays, strict=True):
        stored = arr.stored_chunks()
        ax.plot(stored, arr.chunk_nbytes()[stored], ".", markersize=2)
        ax.set_title(f"{name}: {arr.codec.name}, {arr.chunk_len} items per chunk", fontsize=9)
        ax.set_ylabel("bytes")
    axes[-1, 0].set_xlabel("chunk index")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_buffer(b: dict[str, Any]) -> list[str]:
    """The replay-buffer summary, in transitions and frames."""
    live, cap = b["transitions_live"], b["transitions_capacity"]
    out = [f"replay buffer ({b['buffer_class']}): {live:,} of {cap:,} transitions live "
           f"(buffer_size {b['buffer_size']:,} x {b['n_envs']} env{'s' if b['n_envs'] > 1 else ''}"
           f"{', full' if b['full'] else ''})"]
    for s in b["stacks"]:
        what = "observations" if s["key"] is None else f"observations[{s['key']!r}]"
        axis = "" if s["stack_axis"] is None else f", stacks of {s['depth']} on axis {s['stack_axis']}"
        out.append(f"  {what}: {tuple(s['obs_shape'])}{axis}")
    out.append(f"  frames: {b['frames_stored']:,} stored (each distinct frame once), in "
               f"{b['frame_slots']:,} slots")
    if b["bytes_per_transition"] is not None:
        out.append(f"  observations: {b['bytes_per_transition']:,.0f} B per transition "
                   f"(file: {b['file_bytes_per_transition']:,.0f} B); SB3's ReplayBuffer: "
                   f"{b['sb3_bytes_per_transition']:,} B, {b['ratio_vs_sb3']:,.0f}x more")
    return out


def render(info: dict[str, Any]) -> str:
    out = [f"{info['file']}: {_size(info['file_bytes'])}, chunkstore format "
           f"v{info['format_version']} (chunkstore {info['chunkstore_version']}), "
           f"created {info['created']}, metadata checksums {info['checksums']}", ""]
    if "buffer" in info:
        out += [*render_buffer(info["buffer"]), ""]
    rows = [["array", "shape", "dtype", "codec", "h5 filter", "chunk_len", "chunks", "raw",
             "stored", "ratio", "chunk min/median/max", "cache"]]
    for a in info["arrays"]:
        ratio = "-" if a["ratio"] is None else f"{a['ratio']:.1f}x"
        sizes = "/".join(_size(a[k]) for k in ("chunk_bytes_min", "chunk_bytes_median",
                                                  "chunk_bytes_max"))
        rows.append([a["name"], "(" + ", ".join(map(str, a["shape"])) + ")", a["dtype"],
                     a["codec"], a["hdf5_filter"], str(a["chunk_len"]),
                     f"{a['chunks_stored']}/{a['chunks_total']}", _size(a["raw_bytes"]),
                     _size(a["stored_bytes"]), ratio, sizes, a["cache"]])
    out.append(_table(rows) if info["arrays"] else "(no chunked arrays)")
    if info["extras"]:
        out += ["", _table([["extra", "shape", "dtype", "bytes"]] + [
            [e["name"], "(" + ", ".join(map(str, e["shape"])) + ")", e["dtype"],
             _size(e["nbytes"])] for e in info["extras"]])]
    if info["attrs"]:
        out += ["", "attrs:"]
        for k, v in info["attrs"].items():
            text = repr(v)
            out.append(f"  {k}: {text if len(text) <= 70 else text[:67] + '...'}")
    if any(a["hdf5_filter"] == "chunkstore" for a in info["arrays"]):
        out += ["", "h5 filter 'chunkstore': plain h5py cannot decode these chunks; "
                "use chunkstore.hdf5.load()"]
    return "\n".join(out)


def main(argv: list[str] | None = None, prog: str = "chunkstore-inspect") -> int:
    """Run ``chunkstore-inspect`` on ``argv`` (default: the command line); return the exit status."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog=prog, description="Summary of a saved chunkstore (HDF5) file; "
        "for a replay buffer, in transitions and frames. Exit status: 0, 1 corrupt, 2 unreadable.")
    parser.add_argument("file", help="a file written by chunkstore.hdf5.save (or a buffer's save)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="PNG", help="also draw each array's chunk sizes (matplotlib)")
    args = parser.parse_args(argv)

    def body() -> int:
        try:
            info = summarize(args.file, args.plot)
        except SystemExit as e:  # a missing plotting library: one line, exit 2
            print(e, file=sys.stderr)
            return UNREADABLE
        print(json.dumps(info, indent=2, default=str) if args.json else render(info))
        return OK

    return guarded("inspect", body)


if __name__ == "__main__":
    sys.exit(main())
