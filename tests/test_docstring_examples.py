"""Every ``>>>`` example in the docstrings of chunkstore and sb3_integration runs and prints what it
shows (the API reference renders these docstrings, so a wrong example would be published).

One test per module, run by the standard library's doctest in a fresh working directory (examples
that save files write them there). Examples marked ``# doctest: +SKIP`` need what a test cannot
start here (a Ray cluster, a trained model, a file of another library): they are counted, and their
number may not grow unnoticed.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import warnings

import pytest

PACKAGES = ("chunkstore", "sb3_integration")
# modules that warn on import by design (deprecated paths kept for old imports)
DEPRECATED = {"chunkstore.format"}
# examples left to +SKIP: Ray services, SB3 models, sb3-extra-buffers pickles (see the docstrings)
MAX_SKIPPED = 25


def modules() -> list[str]:
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, prefix=f"{pkg}.")]
    return sorted(names)


def _import(name: str):
    with warnings.catch_warnings():
        if name in DEPRECATED:
            warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return importlib.import_module(name)
        except ImportError as e:  # an optional dependency (ray, minari, sb3-contrib) not installed
            if e.name and e.name.split(".")[0] in PACKAGES:
                raise
            pytest.skip(f"{name} needs {e.name}")


def doctests(name: str) -> list[doctest.DocTest]:
    module = _import(name)
    found = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    # objects a module imports from another are found there, not twice
    return [t for t in found if t.examples and (t.filename or "").endswith(
        module.__file__.rsplit("/", 1)[-1]) or t.name == name]


MODULES = modules()


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_of_a_module_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctests(name):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples of {name} failed (output above)"


def test_skipped_examples_stay_few():
    skipped = total = 0
    for name in MODULES:
        try:
            tests = doctests(name)
        except pytest.skip.Exception:
            continue
        for test in tests:
            total += len(test.examples)
            skipped += sum(bool(ex.options.get(doctest.SKIP)) for ex in test.examples)
    assert total >= 150, total  # the finder found the examples (there are ~200)
    assert skipped <= MAX_SKIPPED, f"{skipped} of {total} examples are +SKIP"
