"""Check every chunk of a saved chunkstore file: checksum, and that it decodes.

    python tools/verify.py buffer.h5

Prints ``OK`` or one line per bad array/chunk. Exit status: 0 sound, 1 corrupt
chunks found, 2 the file cannot be read as a chunkstore file at all.
"""

from __future__ import annotations

import argparse
import sys

from chunkstore import format as fmt
from chunkstore.errors import FormatError

OK, CORRUPT, UNREADABLE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="verify.py",
        description="Verify the CRC32 of every chunk (and that it decodes to the right size) "
                    "in a saved chunkstore file. Exit status: 0 OK, 1 corrupt, 2 unreadable.")
    parser.add_argument("file", help="a file written by chunkstore.format.save")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        problems = fmt.verify(args.file, progress=not args.no_progress)
    except (FormatError, OSError) as e:
        print(f"UNREADABLE {args.file}: {e}", file=sys.stderr)
        return UNREADABLE
    if not problems:
        print(f"OK {args.file}")
        return OK
    for p in problems:
        where = p.array if p.chunk is None else f"{p.array} chunk {p.chunk}"
        print(f"CORRUPT {where}: {p.message}")
    print(f"{len(problems)} problem(s) in {args.file}", file=sys.stderr)
    return CORRUPT


if __name__ == "__main__":
    sys.exit(main())
