"""Glance at a saved chunkstore file: per array codec, chunks, bytes, ratio, chunk sizes.

    python tools/inspect_store.py buffer.h5
    python tools/inspect_store.py buffer.h5 --json

Uses only the public API (``chunkstore.format.load`` and ChunkedArray's
methods); chunks stay on disk (lazy load), nothing is decoded.
"""

from __future__ import annotations

import sys
from typing import Any


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


def summarize(path: str) -> dict[str, Any]:
    import os

    from chunkstore import format as fmt

    with fmt.load(path, lazy=True, cache=0) as store:
        filters = store.header.get("hdf5_filters", {})
        return {
            "file": path,
            "file_bytes": os.path.getsize(path),
            "format_version": store.header["format_version"],
            "chunkstore_version": store.header["chunkstore_version"],
            "created": store.header["created"],
            "arrays": [array_summary(n, a, filters.get(n, "?")) for n, a in store.arrays.items()],
            "extras": [{"name": n, "shape": list(v.shape), "dtype": str(v.dtype),
                        "nbytes": int(v.nbytes)} for n, v in store.extras.items()],
            "attrs": store.attrs,
        }


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


def render(info: dict[str, Any]) -> str:
    out = [f"{info['file']}: {_size(info['file_bytes'])}, chunkstore format "
           f"v{info['format_version']} (chunkstore {info['chunkstore_version']}), "
           f"created {info['created']}", ""]
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
                "use chunkstore.format.load()"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from chunkstore.errors import FormatError

    parser = argparse.ArgumentParser(
        prog="inspect_store.py", description="Per-array summary of a saved chunkstore (HDF5) file.")
    parser.add_argument("file", help="a file written by chunkstore.format.save")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        info = summarize(args.file)
    except (FormatError, OSError) as e:
        print(f"inspect: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=2, default=str) if args.json else render(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
