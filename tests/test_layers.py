"""Layers: every import inside the packages points down, to a layer declared below the importer.

The order is written once, in :data:`LAYERS`, bottom first, with the reason for each place. An
import counts wherever it is written (module level, ``if``/``try`` blocks, ``TYPE_CHECKING``,
inside functions): a lazy import is an arrow all the same. Within one layer (one subpackage)
modules import each other freely; layers that share a rank are peers and import neither each
other nor anything above them.
"""

from __future__ import annotations

from pathlib import Path

from test_packaging import _imports, _modules

ROOT = Path(__file__).resolve().parent.parent

#: ``chunkstore`` is the store and knows nothing of RL; ``sb3_integration`` is built on it
PACKAGES = ("chunkstore", "sb3_integration")

#: the layers of ``sb3_integration``, bottom first: ``(names at this rank, why here)``; a name is a
#: subpackage or a top-level module, ``""`` the package itself (its ``__init__``, the front door)
LAYERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("errors", "_legacy"), "the package's exceptions, and the old module paths (a table of names, imported by name)"),
    (("engine",), "the frame engine: frames in chunk stores and an index per transition; no SB3 buffer"),
    (("abc", "testing"), "the frame-store seam and its contract tests, stated over the engine"),
    (("samplers",), "which transitions a batch reads: index arithmetic, no storage"),
    (("persistence",), "a buffer's state (ReplayState) as one HDF5 file; the buffers save and load through it"),
    (("buffers",), "the SB3 buffers: engine + samplers + persistence, taking sb3-extra-buffers' arguments"),
    (("algorithms", "offline", "distributed"), "what is built on the buffers, independent of each other"),
    (("interop",), "bridges to other projects (sb3-extra-buffers' helpers and pickles, rl-zoo3's plugin), on top"),
    (("",), "the front door: each public name once, loaded on first use"),
    (("cli",), "the console tools: an application that looks a saved buffer's class up on the front door"),
)

RANK = {name: rank for rank, (names, _) in enumerate(LAYERS) for name in names}


def layer_of(dotted: list[str], modules: dict[str, Path]) -> str:
    """The layer a module of ``sb3_integration`` (or a name imported from it) belongs to."""
    if len(dotted) > 1 and f"sb3_integration.{dotted[1]}" in modules:
        return dotted[1]
    return ""  # the package itself, or a name of its front door (``from sb3_integration import X``)


def arrows_against_the_layers(root: Path) -> list[str]:
    """Every import that points up or sideways (to a peer) in :data:`LAYERS`, and every import of
    ``sb3_integration`` from ``chunkstore``."""
    modules = _modules(root)
    bad = []
    for module, path in modules.items():
        package = module.split(".")[0]
        for parts, _ in _imports(module, path, modules):
            target = ".".join(parts)
            if package == "chunkstore":
                if parts[0] != "chunkstore":
                    bad.append(f"{module} imports {target} (chunkstore knows nothing of sb3_integration)")
                continue
            if parts[0] != "sb3_integration":
                continue
            source, dest = layer_of(module.split("."), modules), layer_of(parts, modules)
            if source not in RANK:
                bad.append(f"{module}: its layer {source!r} is not in LAYERS")
            elif dest != source and RANK.get(dest, len(LAYERS)) >= RANK[source]:
                bad.append(f"{module} ({source or 'front door'}) imports {target} ({dest or 'front door'})")
    return sorted(set(bad))


def test_every_import_points_down():
    assert arrows_against_the_layers(ROOT) == []


def test_every_layer_is_declared():
    """Each subpackage and top-level module of ``sb3_integration`` has its place in LAYERS, once."""
    top = {p.stem if p.is_file() else p.name for p in (ROOT / "sb3_integration").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    declared = [name for names, _ in LAYERS for name in names]
    assert len(declared) == len(set(declared))
    assert set(declared) == top | {""}


def test_the_layer_check_is_not_blind(tmp_path):
    """A tree with an arrow up (a lazy one), an arrow between peers and chunkstore importing up: all seen."""
    for package in ("chunkstore", "sb3_integration/engine", "sb3_integration/buffers",
                    "sb3_integration/offline", "sb3_integration/distributed"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "chunkstore" / "a.py").write_text("def f():\n    from sb3_integration.engine import x\n")
    (tmp_path / "sb3_integration" / "engine" / "e.py").write_text(
        "from chunkstore import a\n\ndef f():\n    from sb3_integration.buffers import b\n")
    (tmp_path / "sb3_integration" / "buffers" / "b.py").write_text("from sb3_integration.engine import e\n")
    (tmp_path / "sb3_integration" / "offline" / "o.py").write_text(
        "from sb3_integration.distributed import d\nfrom sb3_integration.buffers.b import B\n")
    assert arrows_against_the_layers(tmp_path) == [
        "chunkstore.a imports sb3_integration.engine.x (chunkstore knows nothing of sb3_integration)",
        "sb3_integration.engine.e (engine) imports sb3_integration.buffers.b (buffers)",
        "sb3_integration.offline.o (offline) imports sb3_integration.distributed.d (distributed)",
    ]
