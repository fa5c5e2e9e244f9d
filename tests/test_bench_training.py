"""tools/bench_training.py run as a user runs it, at a tiny size: arms in their own processes, a table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_training_runs_every_arm_and_writes_json_and_markdown(tmp_path):
    out = tmp_path / "bench_training.json"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench_training.py"), "--scenarios",
                           "learner-vec-256", "--steps", "20", "--learning-starts", "300", "--rounds", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["arm"] for r in rows] == ["sb3", "ours", "ours-prefetch"]
    assert all(r["rounds"] == 1 and r["steps_per_s"] > 0 and r["sample_wait_ms"] >= 0 for r in rows)
    assert rows[0]["ratio"] == 1.0 and all(r["ratio"] > 0 for r in rows)
    assert "| learner-vec-256 |" in out.with_suffix(".md").read_text()


def test_bench_training_refuses_an_unknown_scenario():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench_training.py"), "--scenarios", "ppo-moon"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and "unknown scenarios ['ppo-moon']" in proc.stderr


@pytest.mark.slow
def test_bench_training_drq_rgb_and_ppo_atari_run_both_arms_at_a_tiny_size(tmp_path):
    """drq-rgb on synthetic frames (no dm_control needed), ppo-atari on MsPacman: every arm ran, finite ratios."""
    pytest.importorskip("ale_py")
    out = tmp_path / "bench_training.json"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench_training.py"), "--scenarios",
                           "drq-rgb,ppo-atari", "--steps", "4", "--learning-starts", "300", "--rounds", "1",
                           "--rgb-frames-source", "synthetic", "--rgb-frames", "60", "--rgb-buffer", "600",
                           "--drq-channels", "2", "--ppo-envs", "1", "--ppo-n-steps", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["scenario"], r["arm"]) for r in rows] == [
        ("drq-rgb", "sb3"), ("drq-rgb", "ours"), ("drq-rgb", "ours-prefetch"), ("ppo-atari", "sb3"),
        ("ppo-atari", "ours")]
    assert all(r["rounds"] == 1 and not r["errors"] and math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in rows)
    assert all(r["sample_wait_ms"] >= 0 for r in rows if r["scenario"] == "drq-rgb")
    assert "synthetic" in rows[0]["env"] and "MsPacman" in rows[3]["env"]
    # SB3's draws without prefetch: the encoder ends where SB3's does; PPO's rollout buffer too
    assert rows[1]["params_equal_sb3"] == "yes" and rows[4]["params_equal_sb3"] == "yes"
    assert data["config"]["rgb_source"] == "synthetic"


def test_time_calls_counts_the_seconds_spent_in_the_wrapped_methods_and_keeps_their_results():
    import time

    sys.path.insert(0, str(REPO / "tools"))
    try:
        import bench_training
    finally:
        sys.path.remove(str(REPO / "tools"))

    class Buffer:
        def add(self, x):
            time.sleep(0.02)
            return x + 1

        def sample(self, n):
            raise ValueError(f"no {n}")

    buf = Buffer()
    total = bench_training._time_calls(buf, ("add", "sample"))
    assert total == [0.0]
    assert buf.add(1) == 2
    with pytest.raises(ValueError, match="no 3"):
        buf.sample(3)  # an exception still counts its time and reaches the caller
    assert 0.02 <= total[0] < 1.0
    assert Buffer().add(1) == 2 and "add" not in vars(Buffer())  # only that instance is wrapped
