"""tools/bench_training.py run as a user runs it, at a tiny size: arms in their own processes, a table."""

from __future__ import annotations

import json
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
