"""The module paths of ``sb3_integration`` before 0.2, served from one table instead of a file each.

0.2 moved the code into layers (``sb3_integration.replay`` became :mod:`sb3_integration.buffers.replay`,
...). Code and pickles that name an old path go on working: :class:`LegacyFinder`, on
``sys.meta_path`` once ``sb3_integration`` is imported, answers for the names in :data:`MOVED` (with
0.3's two moves below the buffers: ``sb3_integration.interop.extra_buffers`` and ``.sources``)
(after the real finders, so a module that exists is never shadowed). ``import sb3_integration.replay``,
``from sb3_integration.replay import X`` and a pickle whose class path is
``sb3_integration.replay.CompressedReplayBuffer`` get the same objects as the new path.

Who is warned: a ``DeprecationWarning`` naming the new path and :data:`REMOVAL` goes to source code
that names an old path (``from old import X``, ``old.X``), where the fix is to edit that line.
Unpickling is not warned: a pickle's class path is data its reader cannot edit, and it loads the
same classes (new pickles name the new paths, so re-saving is all it takes). The two are told apart
by the bytecode instruction that asked for the name (see :func:`_named_in_source`).

:data:`SHORT_NAMES` are paths that stay, without a warning: ``sb3_integration.zoo`` is the rl-zoo3
plugin's documented name (``--gym-packages sb3_integration.zoo``, ``python -m sb3_integration.zoo``).
"""

from __future__ import annotations

import dis
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

PACKAGE = "sb3_integration"

#: the release that removes the old paths of :data:`MOVED`
REMOVAL = "0.4.0"

#: old module (under the package, dotted below a subpackage) -> the modules its names live in now, in order
MOVED: dict[str, tuple[str, ...]] = {
    "frames": ("engine.frames",), "frame_state": ("engine.frame_state",),
    "stacking": ("engine.stacking",), "device_stacks": ("engine.device_stacks",),
    "replay": ("buffers.replay",), "rollout": ("buffers.rollout",), "her": ("buffers.her",),
    "prioritized": ("buffers.prioritized",), "columns": ("buffers.columns",),
    "sb3_ops": ("buffers.sb3_checks",), "spaces": ("persistence.spaces",),
    "extra_buffers": ("buffers.extra_buffers",), "compat": ("interop.compat",),
    "convert": ("interop.convert",), "per_dqn": ("algorithms.per_dqn",),
    "per_qrdqn": ("algorithms.per_qrdqn",),
    # 0.1's grab bag, split by idea in 0.2; 0.1 pickles name its StoreOptions
    "_common": ("buffers.options", "buffers.views", "buffers.observations", "engine.packing"),
    # 0.3: what every buffer takes and reads went below the buffer classes (arrows only point down)
    "interop.extra_buffers": ("buffers.extra_buffers",), "interop.sources": ("buffers.sources",),
}

#: old module -> the module it is, for good: the same module object, no warning
SHORT_NAMES: dict[str, str] = {"zoo": "interop.zoo"}

#: the instructions by which source code names an attribute of a module: ``from m import x``,
#: ``m.x`` (``LOAD_METHOD`` before 3.12 for ``m.x()``), ``from m import *``
_SOURCE_OPS = frozenset(dis.opmap[n] for n in ("IMPORT_FROM", "LOAD_ATTR", "LOAD_METHOD", "IMPORT_STAR")
                        if n in dis.opmap)


def _named_in_source(depth: int) -> bool:
    """Whether the frame ``depth`` levels up asked for the name with one of :data:`_SOURCE_OPS`.

    An unpickler (C or Python) calls ``getattr`` on the module: a ``CALL`` in the frame that
    called ``pickle.load``, as is ``getattr(module, "x")`` or ``importlib`` machinery, none
    of which is a line naming the old path. Without frames (not CPython) nothing warns.
    """
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return False
    code = frame.f_code.co_code  # unspecialised bytecode: LOAD_ATTR_MODULE reads as LOAD_ATTR
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _SOURCE_OPS


def _moved_module(old: str, homes: Sequence[str]) -> types.ModuleType:
    """A module object for ``sb3_integration.<old>`` whose names resolve in ``homes``, on first use."""
    name = f"{PACKAGE}.{old}"
    module = types.ModuleType(name, f"``{name}``, moved to "
                              + ", ".join(f":mod:`{PACKAGE}.{h}`" for h in homes)
                              + f"; the old path goes in {REMOVAL}.")

    def __getattr__(attr: str) -> Any:
        if attr == "__all__":  # from old import *: every name the new modules export
            value: Any = [n for h in homes for n in _home(h).__all__]
        elif attr.startswith("__"):  # dunders the import system probes for (__path__, ...)
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        else:
            for home in homes:
                found = _home(home)
                if hasattr(found, attr):
                    value = getattr(found, attr)
                    break
            else:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}")
            if _named_in_source(1):
                warnings.warn(f"{name} is deprecated and goes in {REMOVAL}: import {attr} from "
                              f"{found.__name__}", DeprecationWarning, stacklevel=2)
        return value

    def __dir__() -> list[str]:
        return sorted({n for h in homes for n in dir(_home(h))})

    vars(module)["__getattr__"] = __getattr__  # PEP 562: what a module's missing names resolve by
    vars(module)["__dir__"] = __dir__
    return module


def _old(fullname: str) -> str:
    """``fullname`` under the package (``"interop.sources"``), or "" for a name outside it."""
    return fullname[len(PACKAGE) + 1:] if fullname.startswith(PACKAGE + ".") else ""


def _home(relative: str) -> types.ModuleType:
    return importlib.import_module(f"{PACKAGE}.{relative}")


class LegacyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the old paths of :data:`MOVED` and :data:`SHORT_NAMES` (see the module's doc)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        old = _old(fullname)
        if old not in MOVED and old not in SHORT_NAMES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        old = _old(spec.name)
        return _moved_module(old, MOVED[old]) if old in MOVED else None

    def exec_module(self, module: types.ModuleType) -> None:
        old = _old(module.__name__)
        if old in SHORT_NAMES:  # the import system returns what sys.modules holds after this
            sys.modules[module.__name__] = _home(SHORT_NAMES[old])
        else:  # import the new homes now: a missing dependency fails at the import, as before
            for home in MOVED[old]:
                _home(home)

    def get_code(self, fullname: str) -> types.CodeType | None:
        """``python -m sb3_integration.zoo``: runpy runs the code of the module the path names."""
        old = _old(fullname)
        real = f"{PACKAGE}.{SHORT_NAMES.get(old) or MOVED[old][0]}"
        spec = importlib.util.find_spec(real)
        loader = spec.loader if spec is not None else None
        if not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(f"no code for {real}", name=fullname)
        return loader.get_code(real)


FINDER = LegacyFinder()


def install() -> None:
    """Put :data:`FINDER` last on ``sys.meta_path`` (once; a reload of the package does not add another)."""
    if not any(isinstance(f, LegacyFinder) for f in sys.meta_path):
        sys.meta_path.append(FINDER)
