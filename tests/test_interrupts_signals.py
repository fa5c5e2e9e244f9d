"""Real signals: Ctrl-C (a SIGALRM raising KeyboardInterrupt) at random moments, in subprocesses.

Each case runs ``tests/signal_harness.py`` (see its docstring) for a bounded time on real
Pong stacks. A crash, an abort (heap corruption) or a hang fails the case: the subprocess
must print its result and exit. Zero mismatches with SB3's buffer fed the accepted
transitions, zero errors after an interrupt, zero bad files, zero leftover temporaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent / "signal_harness.py"
REPO = HARNESS.parent.parent
SECONDS = float(os.environ.get("CHUNKSTORE_SIGNAL_SECONDS", "25"))


def run(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(HARNESS), *args, str(SECONDS), "7"], cwd=REPO,
                          capture_output=True, text=True, timeout=SECONDS * 4 + 120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    result = json.loads(lines[-1][len("RESULT "):])
    print(args, result)
    return result


@pytest.mark.slow
@pytest.mark.parametrize("kind, tier", [("replay", "memory"), ("replay", "disk"), ("replay", "hybrid"),
                                        ("replay", "file"), ("dict", "memory"), ("nstep", "memory"),
                                        ("replay", "device"), ("dict", "device"), ("nstep", "device")])
def test_random_interrupts_in_add(kind, tier):
    r = run(kind, tier)
    assert r["interrupted"] > 50, r  # the timer does land inside add()
    assert r["mismatches"] == 0 and r["errors"] == 0, r
    assert r["final_equal"] and r["file_equal"] and r["leftover_temporaries"] == 0, r


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_random_interrupts_in_sample(threads):
    r = run("sample", threads)
    assert r["interrupted"] > 50, r
    assert r["mismatches"] == 0 and r["errors"] == 0, r


@pytest.mark.slow
def test_random_interrupts_in_save_and_load():
    r = run("save", "memory")
    assert r["interrupted"] > 10, r
    assert r["bad_files"] == 0 and r["errors"] == 0 and r["leftover_temporaries"] == 0, r
    assert r["buffer_equal"], r
