"""A griffe extension for the manual's API reference: the docstrings' Sphinx roles as code.

The docstrings are numpydoc, written with Sphinx's cross-reference roles
(``:class:`~chunkstore.Tier```, ``:meth:`save```), which mkdocstrings prints as they are. This
rewrites each role to inline code of the name a reader sees (the last part for ``~``), before
mkdocstrings renders the docstring. Loaded by mkdocs.yml (mkdocstrings' ``extensions`` option).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|obj|data|const|ref):`(~?)([^`<]*?)(?:\s*<([^>]+)>)?`")


def plain(text: str) -> str:
    """``text`` with every Sphinx role written as inline code."""
    def name(m: re.Match[str]) -> str:
        tilde, label, target = m.group(1), m.group(2).strip(), m.group(3)
        if target:  # :class:`label <target>`
            return f"{label} (`{target}`)"
        return f"`{label.rsplit('.', 1)[-1] if tilde else label}`"
    return _ROLE.sub(name, text)


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
