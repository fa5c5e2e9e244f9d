"""``chunkstore-verify``: check every part of a saved chunkstore file and say what was checked.

    chunkstore-verify buffer.h5     # or, in a clone: python tools/verify.py buffer.h5

Checks the metadata checksums (header, each array's description, codec config with
its trained dictionary, chunk table, each extra), every extra's CRC32, and every
chunk: present, CRC32, and that it decodes to its size; a saved replay buffer's state
too (sizes, pos and full in range, every frame stream consistent with the rows that use
it: what ``load`` refuses). Prints what it checked and
how long it took, then ``OK`` or one line per problem. Exit status: 0 sound,
1 corrupt (problems found), 2 the file cannot be read as a chunkstore file at all;
never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from chunkstore.hdf5 import VerifyReport, verify_report
from sb3_integration.cli._store_io import CORRUPT, OK, guarded


def describe(report: VerifyReport) -> list[str]:
    """What was checked, one line per kind of thing."""
    lines = [f"{report.path}: chunkstore format {report.format_version}"]
    if report.arrays:
        lines.append(f"  arrays: {len(report.arrays)} ({', '.join(report.arrays)}): "
                     f"{report.chunks} chunks, CRC32 and decoded")
    if report.extras:
        lines.append(f"  extras: {len(report.extras)}, CRC32")
    if report.checksums:
        named = [c for c in report.checksums if not c.startswith("extra ")]
        extras = len(report.checksums) - len(named)
        lines.append(f"  metadata checksums: {len(report.checksums)} ({'; '.join(named)}"
                     + (f"; {extras} extra descriptions)" if extras else ")"))
    elif report.format_version == 1:
        lines.append("  metadata checksums: none (format 1 files have only chunk and extra CRC32s)")
    if report.state:
        lines.append(f"  buffer state ({report.state}): in range and consistent (streams, descriptors, "
                     "last stacks)")
    return lines


def main(argv: list[str] | None = None, prog: str = "chunkstore-verify") -> int:
    """Run ``chunkstore-verify`` on ``argv`` (default: the command line); return the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Verify a saved chunkstore file: metadata checksums, extras, and every "
                    "chunk's CRC32 and decoding. Exit status: 0 OK, 1 corrupt, 2 unreadable.")
    parser.add_argument("file", help="a file written by chunkstore.hdf5.save (or a buffer's save)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only OK or the problems")
    args = parser.parse_args(argv)
    return guarded("verify", lambda: _verify(args.file, args.no_progress, args.quiet))


def _verify(path: str, no_progress: bool, quiet: bool) -> int:
    report = verify_report(path, progress=not no_progress)
    if not report.problems:
        print(f"OK {path} ({report.chunks} chunks, {len(report.checksums)} checksums, "
              f"{report.seconds:.2f} s)")
        if not quiet:
            print("\n".join(describe(report)))
        return OK
    for p in report.problems:
        where = p.array if p.chunk is None else f"{p.array} chunk {p.chunk}"
        print(f"CORRUPT {where}: {' '.join(p.message.split())}")
    if not quiet:
        print("\n".join(describe(report)))
    print(f"{len(report.problems)} problem(s) in {path} ({report.seconds:.2f} s)", file=sys.stderr)
    return CORRUPT


if __name__ == "__main__":
    sys.exit(main())
