"""sb3-extra-buffers' own test file passes with its ``compressed`` import line swapped for ours.

The test fetches sb3-extra-buffers 0.5.0's sdist with pip into a temporary folder,
rewrites the one line ``from sb3_extra_buffers.compressed import (`` to
``from sb3_integration import (`` and runs the file with pytest in a subprocess
(nothing of it is copied into this repository). Its other imports
(``sb3_extra_buffers.training_utils.atari.make_env``, ``sb3_version``) still come
from sb3-extra-buffers, which must be installed (the ``bench`` extra).

The whole file trains DQN/PPO on real Atari 96 times (34 minutes on a 2-core CPU,
all 100 tests passing); by default a selection runs: both Dict tests, two replay tests
(DQN; two codecs, 1 and 2 envs, 1 and 4 frames) and one rollout test (PPO). Set
``CHUNKSTORE_SB3EB_FULL=1`` to run all of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.5.0"
IMPORT_LINE = "from sb3_extra_buffers.compressed import ("
SELECTION = [  # each Atari test trains DQN or PPO for 1,000 steps; every codec name is also in test_compat.py
    "test_dict_rollout_buffer[none]", "test_dict_rollout_buffer[rle]",
    "test_dict_replay_buffer[none]", "test_dict_replay_buffer[rle]",
    "test_replay[PongNoFrameskip-v4-rle-jit-2-4]",
    "test_replay[MsPacmanNoFrameskip-v4-igzip1-1-1]",
    "test_rollout[MsPacmanNoFrameskip-v4-rle-2-4]",
]


def fetch_test_file(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "download", f"sb3-extra-buffers=={VERSION}", "--no-deps",
                           "--no-binary", ":all:", "--disable-pip-version-check", "-d", str(folder)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"pip could not fetch the sdist:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    (sdist,) = folder.glob("sb3_extra_buffers-*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = tar.getmember(f"sb3_extra_buffers-{VERSION}/tests/test_compressed_buffer.py")
        return tar.extractfile(member).read().decode()  # type: ignore[union-attr]


@pytest.mark.slow
def test_sb3_extra_buffers_test_file_passes_with_our_import(tmp_path):
    pytest.importorskip("sb3_extra_buffers.training_utils.atari")
    source = fetch_test_file(tmp_path)
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.rstrip() == IMPORT_LINE]
    assert len(hits) == 1, f"expected one {IMPORT_LINE!r} line"
    lines[hits[0]] = "from sb3_integration import (\n"
    run = tmp_path / "run"
    run.mkdir()
    (run / "test_compressed_buffer.py").write_text("".join(lines))

    full = os.environ.get("CHUNKSTORE_SB3EB_FULL") == "1"
    ids = [] if full else [f"test_compressed_buffer.py::{t}" for t in SELECTION]
    # one torch thread: two threads on a busy 2-core machine made it 6x slower (measured)
    env = {**os.environ, "DISABLE_TEST_OBSERVATIONS_SAVE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *(ids or ["test_compressed_buffer.py"])], cwd=run, env=env, capture_output=True, text=True)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert f"{len(SELECTION)} passed" in tail or full, tail
