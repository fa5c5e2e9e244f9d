"""Errors the compressed buffers raise where SB3's buffers raise something else of their own.

A drop-in must fail the way SB3 fails: code written against SB3 catches SB3's
exception types. Where SB3 raises (often an ``AssertionError`` with its own
message), ours raises an instance of that type whose message contains SB3's,
followed by what to do; each class here also derives from the built-in that
describes the mistake, so ``except TypeError`` works too.
"""

from __future__ import annotations

__all__ = ["SpaceMismatchError"]


class SpaceMismatchError(AssertionError, TypeError):
    """An observation space the buffer class cannot hold (SB3 asserts; the mistake is a type)."""
