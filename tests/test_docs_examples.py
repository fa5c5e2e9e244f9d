"""Every Python block of the README and of the manual's pages runs as shown.

The blocks of one page run in order in one namespace (a page's later blocks build on its first), in
a fresh working directory. A block whose first line is ``# needs: <what>`` (atari, ray, minari,
sb3eb, cuda) needs an extra or a device: it runs only in the slow suite, where the page's blocks all run in
order, and is skipped there when what it needs is not installed. Pages a script writes
(docs/errors.md, docs/benchmarks/) and the API reference (mkdocstrings directives) hold no blocks
of their own. Shell blocks are commands (make, pip, the console tools) and are not run here: the
tools are run by tests/test_tools_cli.py, make by CI.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
from mktestdocs import grab_code_blocks

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("docs/errors.md", "docs/benchmarks/", "docs/reference/")
NEEDS = re.compile(r"^# needs: ([\w, -]+)$")
# what a `# needs:` line may name, and the module (or check) that says it is here
PROVIDERS = {"atari": "ale_py", "ray": "ray", "minari": "minari", "sb3eb": "sb3_extra_buffers", "cuda": None}


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if not p.relative_to(ROOT).as_posix().startswith(GENERATED)]


def blocks(page: Path) -> list[tuple[str, set[str]]]:
    """A page's python blocks, each with what its `# needs:` line names (empty: runs anywhere)."""
    out = []
    for code in grab_code_blocks(page.read_text(), lang="python"):
        first = code.lstrip("\n").split("\n", 1)[0].strip()
        m = NEEDS.match(first)
        needs = {n.strip() for n in m.group(1).split(",")} if m else set()
        unknown = needs - PROVIDERS.keys()
        assert not unknown, f"{page.name}: a block needs {unknown}; known: {sorted(PROVIDERS)}"
        out.append((code, needs))
    return out


def missing(needs: set[str]) -> list[str]:
    gone = [n for n in needs if PROVIDERS[n] and importlib.util.find_spec(PROVIDERS[n]) is None]
    if "cuda" in needs:
        import torch
        if not torch.cuda.is_available():
            gone.append("cuda")
    return gone


def run_page(page: Path, *, with_needs: bool, tmp_path: Path, monkeypatch) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # a clone's tools (docs/guide/offline.md's dopamine_ckpt)
    namespace: dict = {"__name__": "__main__"}
    ran = 0
    try:
        for i, (code, needs) in enumerate(blocks(page)):
            if needs and not with_needs:
                continue
            if needs and missing(needs):
                pytest.skip(f"{page.name} block {i} needs {missing(needs)}")
            try:
                exec(compile(code, f"{page.relative_to(ROOT)}[block {i}]", "exec"), namespace)
            except Exception as e:
                raise AssertionError(f"{page.relative_to(ROOT)}, python block {i} failed:\n{code}") from e
            ran += 1
    finally:
        # a page is a program of its own: the Ray it started ends with it, as at a program's exit
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
    return ran


PAGES = pages()
FAST = [p for p in PAGES if any(not needs for _, needs in blocks(p))]
SLOW = [p for p in PAGES if any(needs for _, needs in blocks(p))]


def _id(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_the_pages_have_blocks():
    assert ROOT / "README.md" in FAST and len(FAST) >= 8, [_id(p) for p in FAST]


@pytest.mark.parametrize("page", FAST, ids=_id)
def test_a_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    assert run_page(page, with_needs=False, tmp_path=tmp_path, monkeypatch=monkeypatch) > 0


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW, ids=_id)
def test_a_page_runs_whole(page, tmp_path, monkeypatch):
    assert run_page(page, with_needs=True, tmp_path=tmp_path, monkeypatch=monkeypatch) > 0
