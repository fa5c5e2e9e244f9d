"""Every import the Python examples of the README and the manual show works as shown (an independent
user copies them; blocks that need Atari or Ray run only in the slow suite, their imports here)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the manual's pages hold what the README showed before it was cut short (docs/moved.md)
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_IMPORT = re.compile(r"^(?:from\s+[\w.]+\s+import\s+(?:\([^)]*\)|[^\n]+)|import\s+[^\n]+)", re.M)


def readme_imports() -> list[str]:
    """The import statements of the python blocks of the README and the manual (a block may hold
    other lines that are signatures, not code: only its imports are taken)."""
    found = []
    for block in (b for page in PAGES for b in _BLOCK.findall(page.read_text())):
        for stmt in _IMPORT.findall(block):
            stmt = stmt.split("#")[0].strip() if "(" not in stmt else stmt
            if stmt.startswith("from sb3_extra_buffers"):  # the line a migration replaces
                continue
            if stmt not in found:
                found.append(stmt)
    return found


def test_the_readme_shows_imports():
    stmts = readme_imports()
    assert len(stmts) >= 10 and any("ChunkedArray" in s for s in stmts), stmts
    readme_only = [s for b in _BLOCK.findall(README.read_text()) for s in _IMPORT.findall(b)]
    assert any("ChunkedArray" in s for s in readme_only) and any("CompressedReplayBuffer" in s for s in readme_only)


@pytest.mark.parametrize("stmt", readme_imports())
def test_a_readme_import_works_as_shown(stmt):
    node = ast.parse(stmt).body[0]
    if isinstance(node, ast.Import):
        for alias in node.names:
            importlib.import_module(alias.name)
        return
    assert isinstance(node, ast.ImportFrom) and node.module
    module = importlib.import_module(node.module)
    missing = [a.name for a in node.names if not hasattr(module, a.name)]
    assert not missing, f"{node.module} has no {missing}"
