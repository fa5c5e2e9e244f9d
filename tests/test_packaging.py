"""A quiet install: the project's metadata uses the forms current setuptools wants.

setuptools deprecated the ``project.license`` table (``{ text = "MIT" }``; builds
fail after 2027-02-18) for an SPDX string, which needs setuptools >= 77. The slow
test asks pip itself: it prepares the editable install's metadata (``pip install
--dry-run -e``, with build isolation, so with the setuptools ``build-system.requires``
gets) and requires no deprecation warning in its output; a copy of the project
with the old table must produce one, or the check would be blind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def test_license_is_an_spdx_string_and_setuptools_supports_it():
    config = tomllib.loads(PYPROJECT.read_text())
    assert config["project"]["license"] == "MIT"
    (setuptools,) = [Requirement(r) for r in config["build-system"]["requires"] if r.startswith("setuptools")]
    assert not setuptools.specifier.contains("76.99"), "the SPDX license string needs setuptools >= 77"
    assert setuptools.specifier.contains("77.0.0")


def project_copy(folder: Path, pyproject: str) -> Path:
    """What setuptools reads to build the metadata: pyproject.toml, the README, the packages."""
    folder.mkdir()
    (folder / "pyproject.toml").write_text(pyproject)
    shutil.copy(ROOT / "README.md", folder / "README.md")
    for package in ("chunkstore", "sb3_integration"):
        shutil.copytree(ROOT / package, folder / package, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def pip_dry_run(project: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--disable-pip-version-check",
                           "-q", "-e", str(project)], capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"pip could not prepare the metadata (is the network reachable?):\n{output[-3000:]}"
    return output


@pytest.mark.slow
def test_editable_install_prints_no_deprecation_warning(tmp_path):
    current = PYPROJECT.read_text()
    old = current.replace('license = "MIT"', 'license = { text = "MIT" }')
    assert old != current
    control = pip_dry_run(project_copy(tmp_path / "old", old))
    assert "deprecated" in control.lower(), \
        f"pip shows no build-backend warnings here, so this check is blind (upgrade pip):\n{control[-2000:]}"
    output = pip_dry_run(project_copy(tmp_path / "new", current))
    assert "deprecat" not in output.lower(), output
