"""Every ``>>>`` example in the docstrings of chunkstore and sb3_integration runs and prints what it
shows (the API reference renders these docstrings, so a wrong example would be published).

The standard library's doctest runs every module's examples in one child process, in a fresh
working directory (examples that save files write them there): importing every module imports
rl-zoo3, Ray and Minari, and rl-zoo3 changes gymnasium for the rest of a process
(tests/sb3_integration/test_layout_paths.py), so the test process must not. One test per module
reads the child's report. Examples marked ``# doctest: +SKIP`` need what a test cannot start here
(a Ray cluster, a trained model, a file of another library): they are counted, and their number
may not grow unnoticed.
"""

from __future__ import annotations

import doctest
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chunkstore", "sb3_integration")
# modules that warn on import by design (deprecated paths kept for old imports)
DEPRECATED = {"chunkstore.format"}
# examples left to +SKIP: Ray services, SB3 models, sb3-extra-buffers pickles (see the docstrings)
MAX_SKIPPED = 25


def module_names() -> list[str]:
    """Every module of both packages whose source shows an example, found on disk (nothing
    imported: a module without ``>>>`` has no example to run, and importing it costs time)."""
    names = []
    for pkg in PACKAGES:
        found = [(pkg, ROOT / pkg / "__init__.py")]
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            rel = Path(*info.name.split("."))
            path = ROOT / (rel / "__init__.py" if info.ispkg else rel.with_suffix(".py"))
            found.append((info.name, path))
        names += [name for name, path in found if ">>>" in path.read_text()]
    return sorted(names)


def run_module(name: str) -> dict:
    """Run one module's examples here; what a test reads: failures, examples, skips, output."""
    with warnings.catch_warnings():
        if name in DEPRECATED:
            warnings.simplefilter("ignore", DeprecationWarning)
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # an optional dependency (ray, minari, sb3-contrib) not installed
            if e.name and e.name.split(".")[0] in PACKAGES:
                raise
            return {"missing": e.name}
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, name)
             # objects a module imports from another module are that module's examples
             if t.examples and t.filename == getattr(module, "__file__", None)]
    lines: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, out=lines.append)
    failed, attempted = runner.summarize(verbose=False)
    skipped = sum(bool(ex.options.get(doctest.SKIP)) for t in tests for ex in t.examples)
    return {"failed": failed, "examples": sum(len(t.examples) for t in tests), "attempted": attempted,
            "skipped": skipped, "output": "".join(lines)[-6000:]}


def _main() -> None:  # the child: every module, one JSON report on stdout
    report = {}
    for name in module_names():
        try:
            report[name] = run_module(name)
        except Exception as e:  # an import that fails is that module's failure, not the run's
            report[name] = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write("\n" + json.dumps(report))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    cwd = tmp_path_factory.mktemp("doctest")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve())], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.rsplit("\n", 1)[-1])


@pytest.mark.parametrize("name", module_names())
def test_the_examples_of_a_module_run(report, name):
    got = report[name]
    assert "error" not in got, got.get("error")
    if "missing" in got:
        pytest.skip(f"{name} needs {got['missing']}")
    assert got["failed"] == 0, f"{got['failed']} of {got['attempted']} examples failed:\n{got['output']}"


def test_skipped_examples_stay_few(report):
    ran = [r for r in report.values() if "examples" in r]
    total, skipped = sum(r["examples"] for r in ran), sum(r["skipped"] for r in ran)
    assert total >= 250, total  # the finder found the examples (274 when this was written)
    assert skipped <= MAX_SKIPPED, f"{skipped} of {total} examples are +SKIP"


if __name__ == "__main__":
    _main()
