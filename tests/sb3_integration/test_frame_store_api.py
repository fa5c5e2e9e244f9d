"""FrameStore implements the whole of FrameStoreAPI, the seam the buffers call through."""

from __future__ import annotations

import inspect

import numpy as np

from sb3_integration.engine.api import FrameStoreAPI
from sb3_integration.engine.frames import FrameStore


def _members() -> dict[str, object]:
    names = {n: v for n, v in vars(FrameStoreAPI).items() if not n.startswith("_")}
    for n in getattr(FrameStoreAPI, "__annotations__", {}):
        names.setdefault(n, None)
    return names


def test_frame_store_has_every_member_with_the_protocols_parameters():
    fs = FrameStore((4, 6, 5), np.uint8, n_rows=8, n_envs=2)
    try:
        members = _members()
        assert {"put_row", "abandon", "share_cache", "gather", "state_dict", "nbytes_held", "device"} <= set(members)
        for name, proto in members.items():
            assert hasattr(fs, name), name
            if inspect.isfunction(proto):
                want = list(inspect.signature(proto).parameters)
                got = list(inspect.signature(getattr(FrameStore, name)).parameters)
                assert got[:len(want)] == want, (name, got, want)
            elif isinstance(proto, property):
                assert isinstance(getattr(fs, name), int), name
    finally:
        fs.close()


def test_the_buffers_call_only_the_protocol_on_their_frame_stores():
    """Every method a buffer calls on a store of its ``_stores`` is in FrameStoreAPI (read from the source)."""
    import ast
    from pathlib import Path

    import sb3_integration.buffers as buffers

    members = set(_members())
    called: set[str] = set()
    for path in Path(buffers.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            # for store in self._stores.values(): store.NAME(...)  /  fs.NAME
            if isinstance(node, (ast.For, ast.comprehension)) and "_stores" in ast.unparse(node.iter):
                target = node.target.elts[-1] if isinstance(node.target, ast.Tuple) else node.target
                if not isinstance(target, ast.Name):
                    continue
                var = target.id
                scope = node if isinstance(node, ast.For) else tree
                for sub in ast.walk(scope):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == var:
                        called.add(sub.attr)
    assert {"put_row", "release_before", "abandon"} <= called, sorted(called)  # the check reads real calls
    called = {n for n in called if not n.startswith("__")}  # pickling (__getstate__) is Python's protocol
    assert called <= members, sorted(called - members)
