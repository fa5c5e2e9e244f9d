"""Errors the compressed buffers raise: SB3's exception types, SB3's messages, and ours.

A drop-in must fail the way SB3 fails: code and tests written against SB3 catch
SB3's exception types and match SB3's messages. Where SB3's buffer raises for a
misuse, ours raises a :class:`BufferUsageError` that is also an instance of the
exact type SB3 raises there (``ValueError``, ``TypeError``, ``AssertionError``, ...)
and whose message is SB3's, followed by what went wrong and what to do. Where
SB3 gets its error from numpy (a failed broadcast, reshape or conversion), ours
performs the same numpy operation on a scratch array first, so the message is
numpy's own (:mod:`sb3_integration.buffers.sb3_checks`).

Where SB3 silently stores something other than what it was given (a lossy cast:
float observations into a uint8 space; one environment's observation broadcast
to all of them), ours refuses with :class:`DataLossError`: never silent data loss.
``docs/errors.md`` lists every misuse, SB3's behaviour and ours.

Examples
--------
>>> err = usage_error(ValueError("could not broadcast input array from shape (3,) into shape (1,4)"),
...                   "obs: expected shape (1, 4), got shape (3,)")
>>> isinstance(err, ValueError), isinstance(err, BufferUsageError)
(True, True)
>>> print(err)
could not broadcast input array from shape (3,) into shape (1,4) [obs: expected shape (1, 4), got shape (3,)]
"""

from __future__ import annotations

__all__ = [
    "ArgumentAttributeError",
    "ArgumentError",
    "ArgumentIndexError",
    "ArgumentKeyError",
    "ArgumentTypeError",
    "BufferUsageError",
    "DataLossError",
    "RolloutFullError",
    "RolloutNotFullError",
    "SpaceMismatchError",
    "UsageAssertionError",
    "UsageAttributeError",
    "UsageIndexError",
    "UsageKeyError",
    "UsageTypeError",
    "UsageValueError",
    "usage_error",
]


class BufferUsageError(Exception):
    """A misuse SB3's buffer refuses too; the concrete class is also SB3's exception type.

    ``sb3_message`` is SB3's (or numpy's) message, ``hint`` ours; ``str()`` is
    ``"<sb3_message> [<hint>]"`` (just the hint where SB3's message is empty).
    """

    def __init__(self, sb3_message: str, hint: str = "") -> None:
        self.sb3_message, self.hint = sb3_message, hint
        text = sb3_message if not hint else f"{sb3_message} [{hint}]" if sb3_message else hint
        super().__init__(text)

    def __str__(self) -> str:  # KeyError's str() would quote the whole text
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.sb3_message, self.hint)


class UsageValueError(BufferUsageError, ValueError):
    """SB3 raises ``ValueError`` here (a failed allocation, a bad value)."""


class UsageTypeError(BufferUsageError, TypeError):
    """SB3 raises ``TypeError`` here (a bad argument type)."""


class UsageIndexError(BufferUsageError, IndexError):
    """SB3 raises ``IndexError`` here (indexing past the end)."""


class UsageKeyError(BufferUsageError, KeyError):
    """SB3 raises ``KeyError`` here."""


class UsageAttributeError(BufferUsageError, AttributeError):
    """SB3 raises ``AttributeError`` here."""


class UsageAssertionError(BufferUsageError, AssertionError):
    """SB3 asserts here."""


class SpaceMismatchError(UsageAssertionError, TypeError):
    """An observation space the buffer class cannot hold (SB3 asserts; the mistake is a type)."""


class RolloutFullError(UsageIndexError):
    """``add()`` to a rollout buffer that holds ``buffer_size`` steps already (call ``reset()``)."""


class RolloutNotFullError(UsageAssertionError):
    """``get()`` before the rollout buffer holds ``buffer_size`` steps (SB3: ``assert self.full``)."""


# -- add()'s arguments: ValueError (what ours raised for them before) and SB3's type --------------
class ArgumentError(BufferUsageError, ValueError):
    """A bad ``add()`` argument: SB3's exception type, and ``ValueError`` as ours raised before.

    This class itself is raised where SB3 raises ``ValueError`` (a failed broadcast
    or reshape: a wrong shape or number of envs).
    """


class ArgumentTypeError(ArgumentError, TypeError):
    """A bad ``add()`` argument where SB3 raises ``TypeError`` (None, a dict where numbers go)."""


class ArgumentKeyError(ArgumentError, KeyError):
    """A Dict observation without one of the space's keys (SB3: ``KeyError``)."""


class ArgumentIndexError(ArgumentError, IndexError):
    """A Dict buffer given an array instead of a dict (SB3 indexes it with a key: ``IndexError``)."""


class ArgumentAttributeError(ArgumentError, AttributeError):
    """A list where SB3 calls ``.reshape``, an array where it calls ``.clone()`` (``AttributeError``)."""


class DataLossError(ValueError):
    """Input SB3 accepts but would store changed: a lossy cast, or one value broadcast to many.

    SB3 raises nothing here; ours refuses (never silent data loss). A
    ``ValueError``, as ours raised for it before.
    """


#: SB3's exception type -> ours (exact types only: a numpy subclass keeps its own type)
_BY_TYPE: dict[type[BaseException], type[BufferUsageError]] = {
    ValueError: UsageValueError,
    TypeError: UsageTypeError,
    IndexError: UsageIndexError,
    KeyError: UsageKeyError,
    AttributeError: UsageAttributeError,
    AssertionError: UsageAssertionError,
}
_ARGUMENT_BY_TYPE: dict[type[BaseException], type[BufferUsageError]] = {
    ValueError: ArgumentError,
    TypeError: ArgumentTypeError,
    IndexError: ArgumentIndexError,
    KeyError: ArgumentKeyError,
    AttributeError: ArgumentAttributeError,
}


def usage_error(exc: BaseException, hint: str, *, argument: bool = False) -> BaseException:
    """The error to raise where SB3's operation raised ``exc``: its type and message, plus ``hint``.

    ``exc`` is what SB3's own operation raised (run on a scratch array). Its
    type maps to the matching :class:`BufferUsageError` subclass (an
    :class:`ArgumentError` one when ``argument``: a bad ``add()`` argument); a type
    outside that map (a numpy or torch subclass, ``OverflowError``, ``RuntimeError``)
    is returned itself, so its type stays exact, with the hint appended to its
    message where the message is its one argument.
    """
    sb3_message = str(exc)  # what SB3's user sees (a KeyError's is the quoted key)
    cls = (_ARGUMENT_BY_TYPE if argument else _BY_TYPE).get(type(exc))
    if cls is not None:
        return cls(sb3_message, hint)
    if len(exc.args) == 1 and isinstance(exc.args[0], str) and exc.args[0] == sb3_message:
        exc.args = (f"{sb3_message} [{hint}]",)
    return exc
