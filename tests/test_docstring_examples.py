"""Every ``>>>`` example in the docstrings of chunkstore and sb3_integration runs and prints what it
shows (the API reference renders these docstrings, so a wrong example would be published).

The standard library's doctest runs every module's examples in one child process, in a fresh
working directory (examples that save files write them there): importing every module imports
rl-zoo3, Ray and Minari, and rl-zoo3 changes gymnasium for the rest of a process
(tests/sb3_integration/test_layout_paths.py), so the test process must not. One test per module
reads the child's report.

A docstring whose first example is ``>>> # needs: <what>`` (the words of the manual's blocks,
tests/test_docs_examples.py: atari, ray, minari, sb3eb, cuda) needs an extra or a device: its
examples run only in the slow suite, one child process per module, and are skipped there (with
the reason) when what they need is absent; a Ray they start is shut down after each docstring
and its processes checked gone. Examples still marked ``# doctest: +SKIP`` are counted and
listed with their docstring, and their number may not grow unnoticed.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_docs_examples import NEEDS, PROVIDERS, missing  # the manual's words for extras

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chunkstore", "sb3_integration")
# modules that warn on import by design (deprecated paths kept for old imports)
DEPRECATED = {"chunkstore.format"}
# examples left to +SKIP (listed by test_skipped_examples_stay_few)
MAX_SKIPPED = 0


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


def gated_module_names() -> list[str]:
    """The modules with a docstring marked ``>>> # needs: ...`` (their slow-suite cases)."""
    return [n for n in module_names() if ">>> # needs:" in _source(n).read_text()]


def _source(name: str) -> Path:
    rel = Path(*name.split("."))
    return ROOT / (rel / "__init__.py" if (ROOT / rel).is_dir() else rel.with_suffix(".py"))


def needs_of(test: doctest.DocTest) -> set[str]:
    """What a docstring's ``# needs:`` first example names (empty: it runs in the fast suite).
    Read from the text: doctest drops an example that is only a comment."""
    first = next((line.strip()[4:] for line in (test.docstring or "").splitlines()
                  if line.strip().startswith(">>> ")), "")
    m = NEEDS.match(first.strip())
    needs = {n.strip() for n in m.group(1).split(",")} if m else set()
    unknown = needs - PROVIDERS.keys()
    if unknown:
        raise ValueError(f"{test.name}: needs {sorted(unknown)}; known: {sorted(PROVIDERS)}")
    return needs


def _shut_ray_down() -> None:
    """A docstring is a program of its own: the Ray it started ends with it (checked)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    from _ray_helpers import our_ray_processes, still_running

    procs = our_ray_processes()
    ray.shutdown()
    alive = still_running(procs)
    if alive:
        raise RuntimeError(f"Ray processes outlived the example: {[p.pid for p in alive]}")


def run_module(name: str, gated: bool = False) -> dict:
    """Run one module's examples here: those without ``# needs:`` (``gated=False``, the fast
    suite) or only those with it (the slow suite). What a test reads: failures, examples,
    skips (each with its docstring and why), output."""
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
    skips: list[dict] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        needs = needs_of(test)
        if bool(needs) != gated:
            if needs:  # the slow suite runs it
                skips.append({"test": test.name, "examples": len(test.examples),
                              "why": f"needs {', '.join(sorted(needs))}: runs in the slow suite"})
            continue
        gone = missing(needs)
        if gone:
            skips.append({"test": test.name, "examples": len(test.examples), "why": f"{sorted(gone)} not here"})
            continue
        try:
            runner.run(test, out=lines.append)
        finally:
            _shut_ray_down()
        marked = sum(bool(ex.options.get(doctest.SKIP)) for ex in test.examples)
        if marked:
            skips.append({"test": test.name, "examples": marked, "why": "# doctest: +SKIP"})
    failed, attempted = runner.summarize(verbose=False)
    ran = [t for t in tests if bool(needs_of(t)) == gated]
    return {"failed": failed, "examples": sum(len(t.examples) for t in ran), "attempted": attempted,
            "skipped": sum(s["examples"] for s in skips if s["why"] == "# doctest: +SKIP"),
            "skips": skips, "output": "".join(lines)[-6000:]}


def _main(args: list[str]) -> None:
    """The child: every module's fast examples, or (``--gated NAME``) one module's ``# needs:``
    docstrings; one JSON report on stdout."""
    gated = args[:1] == ["--gated"]
    report = {}
    for name in args[1:] if gated else module_names():
        try:
            report[name] = run_module(name, gated)
        except Exception as e:  # an import that fails is that module's failure, not the run's
            report[name] = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write("\n" + json.dumps(report))


def run_child(cwd: Path, *args: str, timeout: float = 600) -> dict:
    """Run the examples in a child process (in ``cwd``); its report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MINARI_DATASETS_PATH": str(cwd / "minari")}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.rsplit("\n", 1)[-1])


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    return run_child(tmp_path_factory.mktemp("doctest"))


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
    listed = "\n".join(f"  {s['test']}: {s['examples']} examples, {s['why']}" for r in ran for s in r["skips"])
    print(f"docstring examples not run by the fast suite:\n{listed}")
    assert total >= 250, total  # the finder found the examples (274 when this was written)
    assert skipped <= MAX_SKIPPED, f"{skipped} of {total} examples are +SKIP:\n{listed}"


@pytest.mark.slow
@pytest.mark.parametrize("name", gated_module_names())
def test_the_examples_that_need_an_extra_run(tmp_path, name):
    got = run_child(tmp_path, "--gated", name, timeout=300)[name]
    assert "error" not in got, got.get("error")
    if "missing" in got:
        pytest.skip(f"{name} needs {got['missing']}")
    assert got["failed"] == 0, f"{got['failed']} of {got['attempted']} examples failed:\n{got['output']}"
    absent = [s for s in got["skips"] if s["why"] != "# doctest: +SKIP"]
    if absent:
        pytest.skip("; ".join(f"{s['test']}: {s['why']}" for s in absent))
    assert got["attempted"] > 0, f"{name}: no gated example ran"


if __name__ == "__main__":
    _main(sys.argv[1:])
