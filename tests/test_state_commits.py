"""Where the packages may still commit state with ``obj.__dict__.update(...)`` (issue 36, item 5).

State that must change together lives in a small frozen object installed by one assignment
(the frame store's ``RingState``, the device heap's ``_Arena`` / ``_Segments`` / ``_Cursor``,
the device array's ``ItemTable``, the priority index's ``_Tree``, ...). ``__dict__.update`` is
left only where the attributes are not ours to regroup, each named here with why:

* ``__setstate__``: the pickle protocol's own way of restoring an object's attributes;
* SB3's public attributes (``pos``, ``full``, ``actions``, ``generator_ready``, ...), which SB3's
  code, callbacks and users read and assign by name: the buffers commit them in one step;
* the Ray shard's public attributes, read across the distributed package by name;
* a copy of a frame store's configuration into a scratch store (not a commit of state).

A new site fails this test: group the attributes into a state object instead, or add it here
with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: (module, function) -> why its attributes are committed with ``__dict__.update``
ALLOWED = {
    ("sb3_integration/buffers/replay.py", "_advance"): "SB3's pos and full, with our add count",
    ("sb3_integration/buffers/rollout.py", "_flatten"): "SB3's rollout arrays and generator_ready",
    ("sb3_integration/buffers/rollout.py", "_reset_fields"): "SB3's rollout arrays, pos and full",
    ("sb3_integration/buffers/rollout.py", "_advance"): "SB3's pos and full, with our add count",
    ("sb3_integration/engine/frames.py", "_decide"):
        "copies the store's configuration into a scratch store built apart; the commit is `self._ring = ...`",
    ("sb3_integration/distributed/shard_checkpoint.py", "load_state_dict"):
        "ShardStore's public rows, pos, count, horizon, ... (read by name across the distributed package)",
}


def _sites() -> list[tuple[str, int, str | None]]:
    found = []
    for root in ("chunkstore", "sb3_integration"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()

            def walk(node: ast.AST, function: str | None, rel: str = rel) -> None:
                for child in ast.iter_child_nodes(node):
                    name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                    func = getattr(child, "func", None) if isinstance(child, ast.Call) else None
                    if (isinstance(func, ast.Attribute) and func.attr == "update"
                            and isinstance(func.value, ast.Attribute) and func.value.attr == "__dict__"):
                        found.append((rel, child.lineno, function))
                    walk(child, name)

            walk(ast.parse(path.read_text()), None)
    return found


def test_dict_update_commits_only_where_the_attributes_are_not_ours_to_group():
    sites = _sites()
    assert sites, "the scan found no site at all: it no longer sees the calls"
    bad = [f"{rel}:{line} in {fn}()" for rel, line, fn in sites
           if fn != "__setstate__" and (rel, fn) not in ALLOWED]
    assert not bad, ("state committed with __dict__.update outside __setstate__ and the allowed sites "
                     f"(group it in a state object installed by one assignment): {bad}")


def test_every_allowed_site_still_exists():
    present = {(rel, fn) for rel, _, fn in _sites()}
    assert set(ALLOWED) <= present, f"allowed but gone (remove from ALLOWED): {set(ALLOWED) - present}"
