"""SB3's own buffer tests pass with our classes in place of SB3's.

The test fetches Stable-Baselines3 2.9.2's sdist with pip into a temporary folder
(nothing of it is copied into this repository), takes ``tests/test_buffers.py``,
rewrites its imports so that ``ReplayBuffer``, ``DictReplayBuffer``,
``RolloutBuffer``, ``DictRolloutBuffer`` (and ``NStepReplayBuffer`` /
``HerReplayBuffer`` where a file uses them) are ours, and runs it with pytest in
a subprocess. Every test must pass; the only skips allowed are SB3's own CUDA
skips on a machine without CUDA. Without network access pip cannot fetch the
sdist and the test fails, saying so.

About 12 s on a 2-core CPU (2 s to fetch, with pip's cache; the 83 tests in the
rest), so it runs in the default suite. The slow suite also runs SB3's
``tests/test_her.py`` and ``tests/test_n_step_replay.py`` this way (training,
saving and loading with our buffers), less three n-step tests that check the class
SB3's algorithm picks itself.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch as th

ROOT = Path(__file__).resolve().parent.parent
VERSION = "2.9.2"
TEST_FILE = "tests/test_buffers.py"
#: SB3's class name -> ours (sb3_integration exports them all)
ALIASES = {
    "ReplayBuffer": "CompressedReplayBuffer",
    "DictReplayBuffer": "CompressedDictReplayBuffer",
    "NStepReplayBuffer": "CompressedNStepReplayBuffer",
    "HerReplayBuffer": "CompressedHerReplayBuffer",
    "RolloutBuffer": "CompressedRolloutBuffer",
    "DictRolloutBuffer": "CompressedDictRolloutBuffer",
}
#: the modules SB3's tests import the buffer classes from
SB3_MODULES = ("stable_baselines3", "stable_baselines3.common.buffers", "stable_baselines3.her",
               "stable_baselines3.her.her_replay_buffer")
#: the classes test_buffers.py must use (else the rewrite found nothing and would test SB3's own)
REQUIRED = {"ReplayBuffer", "DictReplayBuffer", "RolloutBuffer", "DictRolloutBuffer"}


def fetch_sdist_file(folder: Path, member: str) -> str:
    """``member`` of the stable-baselines3 sdist, fetched with pip (fails loudly without network).

    pip builds the sdist's metadata; with setuptools installed here it builds it in
    this environment (``--no-build-isolation``: 2 s instead of 10 s, measured), else
    in an isolated one.
    """
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    done = subprocess.run([sys.executable, "-m", "pip", "download", f"stable-baselines3=={VERSION}", "--no-deps",
                           "--no-binary", ":all:", *isolation, "--disable-pip-version-check", "-d", str(folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, ("pip could not fetch the stable-baselines3 sdist (is the network reachable?):\n"
                                  f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (sdist,) = folder.glob("stable_baselines3-*.tar.gz")
    with tarfile.open(sdist) as tar:
        return tar.extractfile(tar.getmember(f"stable_baselines3-{VERSION}/{member}")).read().decode()  # type: ignore[union-attr]


def alias_imports(source: str) -> tuple[str, set[str]]:
    """``source`` with SB3's buffer classes imported from sb3_integration instead; the names aliased.

    Each ``from <SB3 module> import ...`` line keeps its other names; the buffer
    classes come from one added line. An assertion appended to the module checks,
    at import, that the names really are ours.
    """
    lines = source.splitlines(keepends=True)
    aliased: set[str] = set()
    edits = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ImportFrom) or node.module not in SB3_MODULES:
            continue
        names = [a for a in node.names if a.name in ALIASES]
        if not names:
            continue
        assert all(a.asname is None for a in names), f"an aliased import: {ast.unparse(node)}"
        aliased.update(a.name for a in names)
        rest = [a for a in node.names if a.name not in ALIASES]
        kept = ast.unparse(ast.ImportFrom(node.module, rest, 0)) + "\n" if rest else ""
        edits.append((node.lineno - 1, node.end_lineno, kept))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    ours = ", ".join(f"{ALIASES[n]} as {n}" for n in sorted(aliased))
    check = ", ".join(sorted(aliased))
    header = f"from sb3_integration import {ours}  # chunkstore: SB3's classes replaced by ours\n"
    footer = (f"\nassert all(c.__module__.startswith('sb3_integration') for c in ({check},)), "
              "'the buffer classes are not chunkstore\\'s'\n")
    return header + "".join(lines) + footer, aliased


def test_alias_imports_rewrites_only_buffer_classes():
    source = ("import numpy as np\n"
              "from stable_baselines3.common.buffers import (\n    DictReplayBuffer,\n    BaseBuffer,\n)\n"
              "from stable_baselines3 import A2C, HerReplayBuffer\n"
              "from stable_baselines3.common.utils import get_device\n")
    out, aliased = alias_imports(source)
    assert aliased == {"DictReplayBuffer", "HerReplayBuffer"}
    assert out.splitlines()[0] == ("from sb3_integration import CompressedDictReplayBuffer as DictReplayBuffer, "
                                   "CompressedHerReplayBuffer as HerReplayBuffer  # chunkstore: SB3's classes "
                                   "replaced by ours")
    assert "from stable_baselines3.common.buffers import BaseBuffer\n" in out
    assert "from stable_baselines3 import A2C\n" in out
    assert "from stable_baselines3.common.utils import get_device\n" in out
    namespace: dict = {}
    exec(compile(out, "rewritten", "exec"), namespace)  # the appended check passes: the names are ours
    assert namespace["HerReplayBuffer"].__name__ == "CompressedHerReplayBuffer"


def run_with_our_classes(tmp_path: Path, member: str, required: set[str], deselect: tuple[str, ...] = (),
                         skips: tuple[str, ...] = ()) -> int:
    """Run SB3's test file ``member`` with our classes; assert all pass. Returns the number of tests run.

    Allowed skips: SB3's CUDA skips without CUDA, and SB3's own skip messages in ``skips``.
    """
    tmp_path.mkdir(parents=True, exist_ok=True)
    source, aliased = alias_imports(fetch_sdist_file(tmp_path, member))
    assert aliased >= required, f"{member} no longer imports {sorted(required - aliased)} where expected"
    run = tmp_path / "run"
    run.mkdir()
    name = Path(member).name
    (run / name).write_text(source)
    report = tmp_path / "report.xml"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                           *(f"--deselect={name}::{t}" for t in deselect), name],
                          cwd=run, env=env, capture_output=True, text=True, timeout=1800)
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    outcomes = {c.get("name"): [r for r in c if r.tag in ("failure", "error", "skipped")]
                for c in ET.parse(report).getroot().iter("testcase")}

    def allowed(r: ET.Element) -> bool:
        message = r.get("message") or ""
        return r.tag == "skipped" and (message in skips or ("CUDA not available" in message
                                                            and not th.cuda.is_available()))

    bad = {name: [(r.tag, r.get("message")) for r in results] for name, results in outcomes.items()
           if not all(allowed(r) for r in results)}
    assert not bad, f"not passed (allowed skips: SB3's CUDA skips without CUDA, {skips}): {bad}"
    return len(outcomes)


def test_sb3_buffer_tests_pass_with_our_classes(tmp_path):
    ran = run_with_our_classes(tmp_path, TEST_FILE, REQUIRED)
    assert ran >= 80, f"only {ran} tests ran"


#: SB3's n-step tests that check the class SB3's algorithm picks itself for ``n_steps > 1``
#: (its own NStepReplayBuffer, whatever the file imports): they cannot pass with any alias
NSTEP_OWN_CLASS = ("test_run[SAC]", "test_run[DQN]", "test_run[TD3]")


@pytest.mark.slow
def test_sb3_her_and_nstep_tests_pass_with_our_classes(tmp_path):
    """SB3's HER and n-step test files too (about 40 s): training, saving and loading with our buffers."""
    ran = run_with_our_classes(tmp_path / "her", "tests/test_her.py", {"HerReplayBuffer"},
                               skips=("Only SAC has gSDE support",))  # SB3's parametrization, not a buffer's
    ran += run_with_our_classes(tmp_path / "nstep", "tests/test_n_step_replay.py",
                                {"ReplayBuffer", "NStepReplayBuffer", "DictReplayBuffer", "HerReplayBuffer"},
                                deselect=NSTEP_OWN_CLASS)
    assert ran >= 60, f"only {ran} tests ran"
