"""tools/bench_gpu_training.py and tools/gpu_check.sh run as the GPU session runs them, on the cpu at a tiny size."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
TINY = ["--device", "cpu", "--games", "Pong", "--batches", "32", "--steps", "40", "--learning-starts", "100",
        "--warmup", "8", "--buffer-size", "1000", "--rounds", "1"]


@pytest.mark.slow
def test_bench_gpu_training_runs_every_arm_on_the_cpu(tmp_path):
    out = tmp_path / "bench_gpu_training.json"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench_gpu_training.py"), *TINY, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert ([(r["scenario"], r["arm"]) for r in rows]
            == [("dqn-Pong-32", a) for a in ("sb3", "ours-host", "ours-device")])
    assert data["config"]["buffer_device"] == "cpu" and data["config"]["card"] == "cpu"
    assert all(r["rounds"] == 1 and r["steps_per_s"] > 0 and not r["errors"] for r in rows)
    assert all(r["gpu_max_mb"] == "n/a" and r["rss_peak_mb"] > 0 and r["buffer_mb"] > 0 for r in rows)
    assert rows[0]["ratio"] == 1.0 and rows[0]["buffer_vs_sb3"] == 1.0
    # SB3's indices, deterministic algorithms: the same parameters in every arm, bit for bit
    assert [r["params_equal_sb3"] for r in rows] == ["", "yes", "yes"]
    assert rows[2]["buffer_device_mb"] > 0 and rows[1]["buffer_device_mb"] == 0  # frames on the "device" (cpu)
    shas = {arm: run[0]["params_sha"] for arm, run in data["runs"]["dqn-Pong-32"].items()}
    assert len(set(shas.values())) == 1 and all(run[0]["n_updates"] > 0 for run in data["runs"]["dqn-Pong-32"].values())
    assert "| dqn-Pong-32 | ours-device |" in out.with_suffix(".md").read_text()


def test_bench_gpu_training_refuses_bad_arguments():
    for args, message in ((["--games", "Tetris"], "invalid choice: 'Tetris'"), (["--batches", "0"], "must be >= 1"),
                          (["--warmup", "-1"], "--warmup must be >= 0")):
        proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench_gpu_training.py"), *args],
                              capture_output=True, text=True, timeout=120, cwd=REPO, env=ENV)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr[-500:])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
def test_gpu_check_dry_run_writes_every_file(tmp_path):
    """DEVICE=cpu: the prepared script's steps on the cpu (the CUDA tests skip), its files named 'cpu'."""
    out = tmp_path / "back"  # stands for the device tool's $OUT
    out.mkdir()
    env = {**ENV, "DEVICE": "cpu", "PYTHON": sys.executable, "OUTDIR": str(tmp_path / "results"), "OUT": str(out)}
    proc = subprocess.run(["bash", str(REPO / "tools" / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
    names = sorted(p.name for p in out.iterdir())
    assert names == ["bench_gpu_device_cpu.json", "bench_gpu_device_cpu.md", "bench_gpu_training_cpu.json",
                     "bench_gpu_training_cpu.md", "cuda_tests_cpu.log", "gpu_check_cpu.log"]
    assert " passed" in (out / "cuda_tests_cpu.log").read_text()
    assert [r["arm"] for r in json.loads((out / "bench_gpu_training_cpu.json").read_text())["rows"]] == \
        ["sb3", "ours-host", "ours-device"]
    log = (out / "gpu_check_cpu.log").read_text()
    assert "training-bench: exit 0" in log and "device-bench: exit 0" in log and "every step passed" in log


def test_gpu_check_refuses_an_unknown_device(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "tools" / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={**ENV, "DEVICE": "tpu"})
    assert proc.returncode == 2 and "DEVICE must be cuda or cpu, not 'tpu'" in proc.stderr
