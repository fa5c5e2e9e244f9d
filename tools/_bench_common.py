"""Helpers shared by the benchmark scripts: timing, tables, JSON, progress, fresh processes.

Timings on shared machines are noisy (+-20-30% between runs, measured), so every script
reports ratios measured in one run next to the absolute numbers, and takes the
minimum (throughput) or median (latency) of several repeats.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PeakRSS",
    "best_of",
    "env_info",
    "fmt",
    "md_table",
    "median_ms",
    "parse_kwargs",
    "progress",
    "robust_ms",
    "rss",
    "run_fresh",
    "save_results",
    "try_import",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


def ensure_importable() -> None:
    """Make ``chunkstore`` / ``sb3_integration`` / ``tools`` importable from a repo checkout.

    The package is normally installed in editable mode; the repo root is only
    added to ``sys.path`` when it is not.
    """
    try:
        import chunkstore  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT))
    tools = str(REPO_ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)


# -- timing --------------------------------------------------------------------


def best_of(fn: Callable[[], Any], *, repeat: int = 5, number: int = 1, min_time: float = 0.0) -> float:
    """Seconds per call: the minimum over ``repeat`` runs of ``number`` calls each.

    With ``min_time``, ``number`` grows until one run lasts at least that long.
    """
    if min_time > 0:
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - t0 >= min_time or number >= 1 << 20:
                break
            number *= 2
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def median_ms(fn: Callable[[], Any], *, n: int = 50, warmup: int = 3) -> float:
    """Median wall time of ``n`` single calls, in milliseconds (latency, not throughput)."""
    for _ in range(warmup):
        fn()
    ts = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t0
    return float(np.median(ts) * 1e3)


def robust_ms(fn: Callable[[], Any], *, n: int = 100, groups: int = 10, warmup: int = 3) -> dict[str, float]:
    """Latency of ``fn`` in ms on a shared machine: ``n`` calls in ``groups`` groups.

    Other processes only ever slow a call down, so the minimum over groups of the
    group medians (``ms``) is the least noisy estimate; ``median_ms`` of all calls
    is reported beside it.
    """
    for _ in range(warmup):
        fn()
    ts = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        ts[i] = time.perf_counter() - t0
    per = max(1, n // groups)
    meds = [np.median(ts[i : i + per]) for i in range(0, n - per + 1, per)]
    return {"ms": float(min(meds) * 1e3), "median_ms": float(np.median(ts) * 1e3)}


# -- memory --------------------------------------------------------------------


def rss() -> int:
    """Resident set size of this process, in bytes (after a garbage collection)."""
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


class PeakRSS:
    """Samples this process's RSS in a background thread; ``.peak`` in bytes.

    >>> with PeakRSS(interval=0.01) as p:
    ...     work()
    >>> p.peak
    """

    def __init__(self, interval: float = 0.02):
        import psutil

        self._proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self.start_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="PeakRSS")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self.start_rss = self.peak = self._proc.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


# -- processes -----------------------------------------------------------------
#: glibc's malloc settings a benchmark child runs under. "spared": glibc keeps and reuses freed
#: blocks, so SB3's large per-sample arrays cost no page faults (the first variable alone can add
#: faults: glibc then trims the heap's top after each free). A claim must hold under both.
GLIBC = {"default": {}, "spared": {"MALLOC_MMAP_THRESHOLD_": "1073741824",
                                   "MALLOC_TRIM_THRESHOLD_": "17179869184"}}


def child_env(glibc: str = "default") -> dict[str, str]:
    """This process's environment for a benchmark child under ``glibc`` (a key of :data:`GLIBC`)."""
    env = {k: v for k, v in os.environ.items() if k not in GLIBC["spared"]}
    return {**env, "PYTHONUNBUFFERED": "1", **GLIBC[glibc]}


def run_fresh(script: str | Path, config: dict[str, Any], *, timeout: float | None = None,
              extra_args: Sequence[str] = (), glibc: str = "default") -> dict[str, Any]:
    """Run ``script --config JSON`` in a fresh interpreter; return the JSON of its last stdout line.

    The child prints exactly one JSON object as its last line of stdout. On any
    failure the result is ``{"error": ...}`` with the child's stderr tail, so one
    broken configuration does not stop a benchmark. ``glibc``: its malloc settings (:data:`GLIBC`).
    """
    cmd = [sys.executable, str(script), "--config", json.dumps(config), *extra_args]
    env = child_env(glibc)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=os.getcwd())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    tail = (proc.stderr or "").strip().splitlines()[-8:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def try_import(module: str) -> tuple[Any, str | None]:
    """Import ``module``; return ``(module, None)`` or ``(None, reason)``."""
    import importlib

    try:
        return importlib.import_module(module), None
    except Exception as e:  # a half-written package may raise anything at import
        return None, f"{type(e).__name__}: {e}"


# -- output --------------------------------------------------------------------


def progress(it: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
             disable: bool = False, **kw: Any) -> Any:
    """A tqdm progress bar on stderr (stdout stays clean for tables / JSON)."""
    from tqdm.auto import tqdm

    return tqdm(it, total=total, desc=desc, disable=disable, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, leave=False, **kw)



def parse_kwargs(spec: str) -> dict[str, Any]:
    """A benchmark arm's keyword arguments: ``"default"`` -> {};
    ``"chunk_len=8,compression_method=lz4-block"`` -> ``{"chunk_len": 8, "compression_method": "lz4-block"}``
    (values are Python literals where they parse as one, strings otherwise)."""
    if spec.strip() in ("", "default"):
        return {}
    out: dict[str, Any] = {}
    for part in spec.split(","):
        k, _, v = part.partition("=")
        try:
            out[k.strip()] = ast.literal_eval(v.strip())
        except (ValueError, SyntaxError):
            out[k.strip()] = v.strip()
    return out

def fmt(v: Any, digits: int = 3) -> str:
    """Compact number formatting for tables: 3 significant digits, thousands as ints."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not np.isfinite(v):
            return str(v)
        if abs(v) >= 10 ** digits:
            return f"{v:,.0f}"
        if v == 0:
            return "0"
        return f"{v:.{digits}g}" if abs(v) >= 1e-3 else f"{v:.2e}"
    return str(v)


def md_table(rows: Sequence[dict[str, Any]], columns: Sequence[str | tuple[str, str]]) -> str:
    """A Markdown table; ``columns`` are keys or ``(key, header)`` pairs; numbers via :func:`fmt`."""
    cols = [(c, c) if isinstance(c, str) else c for c in columns]
    head = "| " + " | ".join(h for _, h in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def env_info() -> dict[str, Any]:
    """What the numbers were measured on (kept in every JSON file)."""
    import importlib.metadata as md

    versions = {}
    for dist in ("numpy", "zstandard", "lz4", "blosc2", "stable_baselines3", "sb3-extra-buffers",
                 "torch", "ale-py"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    # the code that ran, whatever distribution (chunkstore-rl, or none in a clone) installed it
    import chunkstore

    versions["chunkstore"] = chunkstore.__version__
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": load,
        "versions": versions,
        "argv": sys.argv,
    }


def save_results(out: str | Path | None, payload: dict[str, Any], markdown: str) -> None:
    """Write ``payload`` (plus env info) as JSON to ``out`` and the tables beside it as ``.md``."""
    if not out:
        return
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"env": env_info(), **payload}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=_json_default))
    os.replace(tmp, out)
    out.with_suffix(".md").write_text(markdown.rstrip() + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.md')}", file=sys.stderr)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)
