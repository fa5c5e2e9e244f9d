"""Exact where SB3 is exact: the misuse table (tests/misuse_table.py) on SB3's buffers and ours.

One parametrized test over the rows (buffer kind x method x misuse) x our classes:
where SB3 raises, ours raises an instance of SB3's exception type containing
SB3's message and changes nothing; where SB3 accepts, ours returns the same
results and ends in the same state, except the documented refusals (lossy input).
A future SB3 change shows up as a failing row (each row records SB3's outcome).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from misuse_table import ROWS, cases, check_row

from sb3_integration.errors import BufferUsageError, DataLossError

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


@pytest.mark.parametrize(("row", "cls"), cases(), ids=[f"{r.id}-{c.__name__}" for r, c in cases()])
def test_misuse_matches_sb3(row, cls):
    ref, ours = check_row(row, cls)
    if isinstance(ours.error, BufferUsageError):  # ours adds what went wrong to SB3's message
        assert ours.error.hint and ours.error.hint in str(ours.error)
    if ref.error is None and ours.error is not None:
        assert row.why, "a refusal where SB3 accepts must say why in the table"
        assert isinstance(ours.error, DataLossError) or row.ours != "DataLossError"


def test_row_ids_are_unique():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_docs_list_every_row():
    doc = DOC.read_text()
    listed = set(re.findall(r"^\| `([a-z0-9_-]+)` \|", doc, flags=re.MULTILINE))
    assert listed == {row.id for row in ROWS}, "docs/errors.md is stale: python tools/errors_doc.py"
