"""Write docs/errors.md: the misuse table run live on SB3's buffers and ours.

    python tools/errors_doc.py            # rewrites docs/errors.md
    python tools/errors_doc.py --check    # exit 1 if docs/errors.md differs from a fresh run

Every row of ``tests/misuse_table.py`` runs on SB3's buffer and on each of our
classes for that kind (``check_row``: the same assertions as the test); the table
shows SB3's exception and message, and ours: the exception class and what it adds
to SB3's message, or the result. Messages come from this run (numpy's and torch's
wording may differ between versions).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import stable_baselines3  # noqa: E402
from misuse_table import CLASSES, ROWS, Outcome, Row, check_row  # noqa: E402

from sb3_integration.errors import BufferUsageError  # noqa: E402

DOC = ROOT / "docs" / "errors.md"

HEADER = """# Errors: exact where SB3 is exact

A compressed buffer is a drop-in for SB3's, so it fails the way SB3 fails. For every misuse
below, SB3 {sb3}'s buffer and ours were run side by side on the same input
(`tests/sb3_integration/test_sb3_errors.py`, one test per row and class; this file is written by
`python tools/errors_doc.py` from such a run, numpy {numpy}):

* **SB3 raises**: ours raises an instance of SB3's exception type whose message contains
  SB3's (numpy's, where SB3's error comes from a numpy operation: ours performs the same
  operation on a scratch row before writing), then ours in brackets. Our exception
  classes (`sb3_integration.errors`) derive from SB3's type; those for `add()`'s arguments
  also from `ValueError`, which ours raised before. A failed `add()` changes nothing in
  ours (SB3 may have written part of the transition).
* **SB3 accepts**: ours returns the same result and ends in the same state (every array of
  SB3's buffer, bit for bit), except where the last column says why not.
* **SB3 accepts, ours refuses**: input that SB3 stores changed (a lossy cast, one env's
  observation broadcast to every env): ours raises `DataLossError` (a `ValueError`), our
  policy of no silent data loss.

Our classes, per kind: {classes}. "As SB3" in the ours column: the same exception type and
message, nothing added (mostly where SB3's own code runs in ours: inherited `sample`, `extend`,
`compute_returns_and_advantage`, HER's methods).

General differences, not repeated per row:

* `python -O` strips SB3's `assert` statements; ours raises its `AssertionError`
  subclasses (Dict/Box space checks, `optimize_memory_usage` on Dict buffers, `get()`
  before the rollout is full) either way.
* Where several arguments are wrong at once, ours reports the one SB3 reports: the checks
  run in SB3's order, and our refusals (`DataLossError`) come after all of SB3's checks.
* `extend()` is SB3's: it adds item by item, so a bad item raises after the items before
  it were added (in both).
* SB3's `DictReplayBuffer.add` replaces a Discrete key's array in the caller's observation
  dict by its reshaped copy; ours leaves the caller's dict as it was.

| row | method | misuse | SB3 | SB3's message | ours | what ours adds, or why it differs |
|---|---|---|---|---|---|---|
"""


def cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ours_cells(row: Row, ref: Outcome, ours: Outcome) -> tuple[str, str]:
    err = ours.error
    if err is None:
        return "accepts, same result and state", row.why
    name = type(err).__name__
    if ref.error is None:
        return f"**refuses**: `{name}`", f"{row.why}: {err}"
    if isinstance(err, BufferUsageError):
        return f"`{name}`", err.hint + (f" ({row.why})" if row.why else "")
    if err is not ref.error and str(err) != str(ref.error) and str(err).startswith(str(ref.error)):
        return f"`{name}`", str(err)[len(str(ref.error)):].strip(" []") + (f" ({row.why})" if row.why else "")
    return f"`{name}`, as SB3", row.why


def render() -> str:
    lines = []
    for row in ROWS:
        outcomes = [check_row(row, cls) for cls in CLASSES[row.kind][1]]  # every class holds to the row
        ref, ours = outcomes[0]
        sb3 = "accepts" if ref.error is None else f"`{type(ref.error).__name__}`"
        message = "" if ref.error is None else cell(ref.error) or "(empty)"
        ours_text, why = ours_cells(row, ref, ours)
        lines.append(f"| `{row.id}` | `{row.method}` | {cell(row.misuse)} | {sb3} | {message} | {ours_text} "
                     f"| {cell(why, 220)} |")
    classes = "; ".join(f"{kind}: {', '.join(f'`{c.__name__}`' for c in ours)} (SB3 `{sb3.__name__}`)"
                        for kind, (sb3, ours) in CLASSES.items())
    return HEADER.format(sb3=stable_baselines3.__version__, numpy=np.__version__, classes=classes) \
        + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/errors.md instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = DOC.read_text() == text
        print("docs/errors.md is up to date" if same else "docs/errors.md differs from this run")
        return 0 if same else 1
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}: {len(ROWS)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
