"""Inputs are never outputs: refuse a path to write that is, or lies inside, what is being read.

An import or a save that writes over one of its own inputs destroys it (the rename of the
new file over the old one, a parts directory removed at the end, a spill directory deleted
when its tier closes). Files are compared as the filesystem sees them, by device and
inode: a symlink to an input, a hard link of one and the input itself are all the same
file. A directory contains a path when the directory is one of the path's ancestors once
symlinks are resolved (compared by device and inode too, so a bind mount or a symlinked
directory is still caught).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["refuse_inputs_as_output", "same_file", "within"]


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)  # follows symlinks: a link to an input is that input
    except (OSError, ValueError):
        return None


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` both exist and are one file (same device and inode)."""
    sa, sb = _stat(os.fspath(a)), _stat(os.fspath(b))
    return sa is not None and sb is not None and os.path.samestat(sa, sb)


def within(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``directory`` or lies somewhere inside it (``path`` need not exist)."""
    d = _stat(os.fspath(directory))
    if d is None:
        return False
    p = os.path.realpath(os.path.abspath(os.fspath(path)))
    while True:
        s = _stat(p)
        if s is not None and os.path.samestat(s, d):
            return True
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent


def refuse_inputs_as_output(out: str | os.PathLike[str], what: str, inputs: Iterable[str | os.PathLike[str]] = (),
                            directories: Iterable[str | os.PathLike[str]] = (),
                            why: str = "which is read from") -> None:
    """ValueError (before anything is written) when ``out`` is one of ``inputs`` or lies in
    one of ``directories``; ``what`` names the argument in the message ("out"), ``why`` says
    what the directories are."""
    out = os.fspath(out)
    for f in inputs:
        if same_file(out, f):
            how = "is" if os.path.abspath(out) == os.path.abspath(os.fspath(f)) else "resolves to"
            raise ValueError(f"{what}: {out} {how} {os.fspath(f)}, which is read from; writing it would destroy "
                             "the input. Choose another path")
    for d in directories:
        if within(out, d):
            raise ValueError(f"{what}: {out} lies inside {os.fspath(d)}, {why}; choose a path outside it")
