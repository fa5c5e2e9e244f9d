"""The replay service's errors and warnings live in one module, each family under one base class,
and the modules that raised them before still export them (the same objects)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from chunkstore import ChunkstoreError
from sb3_integration.distributed import errors

PACKAGE = Path(errors.__file__).parent

#: where each name was defined before distributed/errors.py, and is still exported from
OLD_HOMES = {
    "rate_limiter": ("LimiterClosed", "RateLimiterTimeout"),
    "remote": ("ServiceUnavailableError", "ShardLostError"),
    "shard_store": ("MissingMessagesError",),
    "writer": ("DataLossWarning", "ShardLostError"),
    "sampler": ("ShardUnavailableWarning",),
}

#: what each error refines besides the base (``except TimeoutError`` keeps working)
BUILTINS = {"RateLimiterTimeout": TimeoutError, "LimiterClosed": RuntimeError,
            "ServiceUnavailableError": RuntimeError, "ShardLostError": RuntimeError,
            "MissingMessagesError": ValueError}


def test_no_other_module_of_the_package_defines_an_exception():
    found = []
    for path in PACKAGE.glob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id.endswith(("Error", "Exception", "Warning")) for b in node.bases):
                found.append(f"{path.name}: {node.name}")
    assert found == []


def test_each_family_has_its_base():
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning):
            assert issubclass(cls, errors.ReplayServiceWarning) and issubclass(cls, RuntimeWarning), name
        else:
            assert issubclass(cls, errors.ReplayServiceError) and issubclass(cls, ChunkstoreError), name
    for name, builtin in BUILTINS.items():
        assert issubclass(getattr(errors, name), builtin), name


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_the_old_homes_export_the_same_objects(module):
    if module == "sampler":
        pytest.importorskip("ray")
    old = importlib.import_module(f"sb3_integration.distributed.{module}")
    for name in OLD_HOMES[module]:
        assert name in old.__all__ and getattr(old, name) is getattr(errors, name), name


def test_the_package_exports_every_one():
    import sb3_integration.distributed as distributed

    for name in errors.__all__:
        assert name in distributed.__all__ and getattr(distributed, name) is getattr(errors, name), name
