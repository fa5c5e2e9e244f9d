"""The built distribution works where a user installs it: outside the repository.

``python -m build`` (no isolation: the venv's setuptools, no network) makes the sdist from a copy
of the checkout, and the wheel from the unpacked sdist, so a file the sdist forgets is missing from
the wheel too; the sdist holds the packages and nothing half-useful (no tests without fixtures). The
wheel must hold every module of ``chunkstore`` and ``sb3_integration`` and declare the console
tools. It is then installed (``pip --python``, ``--no-deps --no-index``) into a fresh venv in a
temporary directory, which finds numpy, torch, SB3 ... through a ``.pth`` line naming this
venv's site-packages (a ``.pth`` file there is not processed, so the checkout's own editable
install stays out). With no ``PYTHONPATH`` and the working directory outside the checkout, the
packages must import from the new venv; the quick start runs there (a buffer: add, sample,
save, load, sample the same), and each console tool answers ``--help`` and does its job on a
saved file. (``test_packaging`` checks the name and the scripts in pyproject.toml.)

About 45 s of CPU; wall time follows the machine's load (66 s at load average 4, 140 s at 8 on
a 2-core VM). Some 20 s of CPU is numba compiling the native kernels in the new venv, once, as
on a user's first run (they cache next to the installed modules; the later commands load them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import chunkstore

pytest.importorskip("build")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("chunkstore", "sb3_integration")
DIST = "chunkstore-rl"
TOOLS = {"chunkstore-inspect", "chunkstore-verify", "chunkstore-export", "chunkstore-import-dqn"}


def run(*command, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    # no PYTHONPATH: the checkout must not be importable there
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return done


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def project_copy(folder: Path) -> Path:
    """The checkout as git sees it (tracked and new files, not ignored ones): what a user builds."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def repo_modules() -> set[str]:
    """Every module file of the packages in the checkout, as a path inside the wheel."""
    return {p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob("*.py")
            if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    assert ROOT not in tmp.parents, "the temporary directory must lie outside the checkout"
    src = project_copy(tmp / "src")
    ok(run(sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp / "dist", src, cwd=tmp, timeout=300))
    (wheel,) = (tmp / "dist").glob("*.whl")
    (sdist,) = (tmp / "dist").glob("*.tar.gz")
    return {"tmp": tmp, "wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def venv(built) -> Path:
    """A fresh venv with the wheel installed; dependencies come from this venv's site-packages."""
    tmp = built["tmp"]
    ok(run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv", cwd=tmp))
    python = tmp / "venv" / "bin" / "python"
    site = Path(ok(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp)).strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    ok(run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q",
           built["wheel"], cwd=tmp))
    return tmp / "venv"


def test_the_wheel_holds_every_module_and_its_metadata(built):
    version = chunkstore.__version__
    assert built["wheel"].name == f"chunkstore_rl-{version}-py3-none-any.whl"
    assert built["sdist"].name == f"chunkstore_rl-{version}.tar.gz"
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = set(whl.namelist())
        info = f"chunkstore_rl-{version}.dist-info"
        metadata = whl.read(f"{info}/METADATA").decode()
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert repo_modules() <= names, sorted(repo_modules() - names)
    assert not [n for n in names if n.startswith(("tests/", "tools/", "examples/")) or "__pycache__" in n]
    assert re.search(r"^Name: chunkstore-rl$", metadata, re.M)
    assert re.search(rf"^Version: {re.escape(version)}$", metadata, re.M)
    assert "console_scripts" in entry_points and all(f"{tool} = " in entry_points for tool in TOOLS)
    with tarfile.open(built["sdist"]) as sdist:
        held = {m.name.split("/", 1)[1] for m in sdist.getmembers() if m.isfile()}
    assert {"pyproject.toml", "README.md"} | repo_modules() <= held
    # nothing else but what setuptools writes (PKG-INFO, setup.cfg, the egg-info) and a licence
    others = {n for n in held - repo_modules() - {"pyproject.toml", "README.md", "MANIFEST.in", "PKG-INFO", "setup.cfg"}
              if not n.startswith(("chunkstore_rl.egg-info/", "LICEN"))}
    assert others == set()


def buffer_file(python: Path, folder: Path) -> Path:
    """The quick start in the new venv: a buffer filled, sampled, saved, loaded, sampled alike."""
    script = folder / "quick_start.py"
    script.write_text('''
import importlib.metadata, sys
import numpy as np
from gymnasium import spaces
import chunkstore, sb3_integration
from sb3_integration import CompressedReplayBuffer

print("chunkstore", chunkstore.__file__, "sb3_integration", sb3_integration.__file__)
print("version", importlib.metadata.version("chunkstore-rl"), chunkstore.__version__)
rng = np.random.default_rng(0)
buf = CompressedReplayBuffer(64, spaces.Box(0, 255, (4, 24, 20), np.uint8), spaces.Discrete(3),
                             observation_storage="compressed", device="cpu", chunk_len=4)
obs = rng.integers(0, 255, (1, 4, 24, 20), dtype=np.uint8)
for t in range(40):
    nxt = np.concatenate([obs[:, 1:], rng.integers(0, 255, (1, 1, 24, 20), dtype=np.uint8)], axis=1)
    buf.add(obs, nxt, np.array([[t % 3]]), np.array([1.0], np.float32), np.array([t % 13 == 12]), [{}])
    obs = nxt
np.random.seed(1)
before = buf.sample(16)
buf.save(sys.argv[1])
loaded = CompressedReplayBuffer.load(sys.argv[1], device="cpu")
np.random.seed(1)
after = loaded.sample(16)
assert (before.observations == after.observations).all() and (before.actions == after.actions).all()
print("quick start: 40 transitions, sampled the same after save/load")
''')
    path = folder / "buffer.h5"
    out = ok(run(python, script, path, cwd=folder))
    venv = str(python.parent.parent)
    where = dict(re.findall(r"(chunkstore|sb3_integration) (\S+)", out.splitlines()[0]))
    assert all(p.startswith(venv) for p in where.values()), f"imported from outside the new venv: {where}"
    assert f"version {chunkstore.__version__} {chunkstore.__version__}" in out
    assert "sampled the same after save/load" in out
    return path


def dopamine_checkpoints(folder: Path) -> Path:
    """Two dopamine checkpoints of a random-policy run on synthetic frames."""
    from dopamine_ckpt import Run, write_checkpoints

    rng = np.random.default_rng(0)
    n = 120
    terminals = np.zeros(n, bool)
    terminals[[40, 99]] = True
    run_ = Run(rng.integers(0, 255, (n, 84, 84), dtype=np.uint8), rng.integers(0, 4, n).astype(np.int32),
               rng.choice([-1.0, 0.0, 1.0], n).astype(np.float32), terminals, np.zeros(n, bool))
    write_checkpoints(run_, folder / "ckpt", capacity=200, every=60)
    return folder / "ckpt"


def test_installed_outside_the_checkout_the_quick_start_and_every_tool_work(venv, built):
    work = built["tmp"] / "work"
    work.mkdir()
    python, bin_ = venv / "bin" / "python", venv / "bin"
    path = buffer_file(python, work)

    for tool in sorted(TOOLS):
        help_ = ok(run(bin_ / tool, "--help", cwd=work))
        assert help_.startswith(f"usage: {tool} "), help_[:200]

    out = ok(run(bin_ / "chunkstore-inspect", path, "--plot", work / "chunks.png", cwd=work))
    assert "replay buffer (CompressedReplayBuffer): 40 of 64 transitions live" in out
    assert "observations/frames" in out
    assert (work / "chunks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = ok(run(bin_ / "chunkstore-verify", "--no-progress", path, cwd=work))
    assert out.startswith(f"OK {path}") and "buffer state" in out
    out = ok(run(bin_ / "chunkstore-export", path, "--obs", "--start", "3", "--stop", "5", "--out", work / "png",
                 cwd=work))
    assert "wrote 2 file(s)" in out
    assert sorted(p.name for p in (work / "png").iterdir()) == ["observations_0000003.png", "observations_0000004.png"]
    out = ok(run(bin_ / "chunkstore-import-dqn", dopamine_checkpoints(work), work / "dqn.h5", cwd=work))
    assert "positions from 2 checkpoints" in out and (work / "dqn.h5").is_file()
    # the same tools by module, for where the scripts are not on PATH
    out = ok(run(python, "-m", "sb3_integration.cli", "verify", "-q", "--no-progress", work / "dqn.h5", cwd=work))
    assert out.startswith(f"OK {work / 'dqn.h5'}")
