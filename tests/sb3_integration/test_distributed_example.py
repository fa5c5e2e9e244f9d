"""The Ape-X Pong example runs end to end on Ray (slow: real Pong, a DQN learner, two env runners)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_apex_dqn_pong():
    pytest.importorskip("ray")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "examples/apex_dqn_pong.py", "--steps", "3000", "--learning-starts", "500"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "transitions inserted: 3,000 of 3,000 env steps" in out
    assert "every transition stored: True" in out
    updates = int(re.search(r"learner: ([\d,]+) updates", out).group(1).replace(",", ""))
    assert updates > 0
    versions = [int(v) for v in re.findall(r"weights version (\d+)", out)]
    assert len(versions) == 2 and max(versions) > 0  # runners pulled weights the learner published
    wire = float(re.search(r"on the wire ([\d,.]+)", out).group(1).replace(",", ""))
    assert wire < 56_448 / 50  # compressed chunks travel, not raw stacks
