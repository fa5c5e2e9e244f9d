"""Every example runs (with small sizes where its defaults take longer) and reports what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_example(name: str, *args: str, timeout: int = 600) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1",  # the examples train small nets; 1 thread on a busy CPU
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, f"examples/{name}", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_ppo_atari():
    out = run_example("ppo_atari.py", "--rollouts", "1")
    assert "identical parameters: True" in out


def test_sac_pixels():
    out = run_example("sac_pixels.py", "--steps", "400", "--learning-starts", "150")
    assert "identical parameters    True" in out


def test_resume_exactly():
    out = run_example("resume_exactly.py", "--first", "300", "--then", "200", "--buffer-size", "250")
    assert "identical parameters after resuming: True" in out


def test_larger_than_ram():
    out = run_example("larger_than_ram.py", "--transitions", "60000", "--ram-mb", "8")
    assert "all equal" in out
    rows = re.findall(r"^\s*[\d,]+\s+([\d,]+) MB\s+[\d,]+ MB\s+([\d,]+) MB\s+[\d,]+ MB", out, re.M)
    stored, on_disk = (int(x.replace(",", "")) for x in rows[-1])
    assert on_disk > 4 * 8 and on_disk > stored / 2  # most chunks went to disk
    ratio = float(re.search(r"peak RSS growth [\d,]+ MB \(([\d.]+) x the compressed bytes\)", out).group(1))
    assert ratio < 1  # RSS stays below what the buffer stores


def test_migrate_from_sb3_extra_buffers():
    pytest.importorskip("sb3_extra_buffers")
    out = run_example("migrate_from_sb3_extra_buffers.py", "--steps", "800", "--learning-starts", "400")
    assert "1. sb3-extra-buffers' recipe, import line changed: 800 transitions" in out
    assert "same samples for the same seed: True" in out


def test_rl_zoo3_recipe():
    pytest.importorskip("rl_zoo3")
    out = run_example("rl_zoo3_recipe.py", "--dqn-steps", "800", "--ppo-steps", "1024")
    assert "DQN: sb3_integration.buffers.replay.CompressedReplayBuffer, 800 transitions" in out
    assert "rollout_buffer_class=sb3_integration.buffers.rollout.CompressedRolloutBuffer" in out
