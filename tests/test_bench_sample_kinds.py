"""tools/bench_sample_kinds.py's RGB camera kinds at a tiny size, on synthetic frames (no dm_control needed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = str(REPO / "tools" / "bench_sample_kinds.py")
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_rgb_kinds_time_both_buffers_and_count_bytes_per_transition(tmp_path):
    out = tmp_path / "kinds.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--kinds", "rgb", "--rgb-frames-source", "synthetic",
                           "--rgb-frames", "40", "--rgb-rows", "64", "--rgb-capacity", "128", "--rgb-samples", "2",
                           "--rounds", "1", "--glibc", "default", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=REPO, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    kinds = {r["kind"] for r in data["rows"]}
    assert kinds == {"RGB camera (9,84,84)", "RGB camera Dict (pixels + state)", "RGB camera (9,84,84), n_envs 4"}
    assert sorted({r["batch"] for r in data["rows"]}) == [32, 256]
    for r in data["rows"]:  # both arms timed: a finite ratio of two positive times
        assert r["after_sb3_us"] > 0 and r["after_us"] > 0 and math.isfinite(r["after_ratio"])
    assert len(data["held_rgb"]) == 3
    for h in data["held_rgb"]:  # SB3 holds at least its obs + next_obs per transition, counted not told
        assert h["sb3_traced"] >= h["sb3_nominal"] == 127_008 and h["ours_traced"] > 0
        assert all(math.isfinite(h[k]) for k in ("sb3_rss", "ours_rss"))
    assert "RGB bytes per transition" in out.with_suffix(".md").read_text()


def test_without_dm_control_the_rgb_kinds_are_skipped_with_how_to_install_it(tmp_path):
    # a dm_control that cannot be imported, whether or not the real one is installed
    (tmp_path / "dm_control").mkdir()
    (tmp_path / "dm_control" / "__init__.py").write_text("raise ImportError('no dm_control here')\n")
    proc = subprocess.run([sys.executable, SCRIPT, "--kinds", "rgb", "--glibc", "default",
                           "--out", str(tmp_path / "k.json")], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**ENV, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipping the RGB camera kinds" in proc.stderr and "chunkstore-rl[pixels]" in proc.stderr
    assert json.loads((tmp_path / "k.json").read_text())["rows"] == []
