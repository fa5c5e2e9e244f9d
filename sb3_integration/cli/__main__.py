"""``python -m sb3_integration.cli inspect|verify|export|import-dqn ARGS``: the console tools by name."""

from __future__ import annotations

import importlib
import sys

from sb3_integration.cli import COMMANDS


def main(argv: list[str] | None = None) -> int:
    """Run the tool named by ``argv[0]`` (``inspect`` or ``chunkstore-inspect``) on the rest."""
    argv = sys.argv[1:] if argv is None else argv
    short = {name.removeprefix("chunkstore-"): name for name in COMMANDS}
    usage = f"usage: python -m sb3_integration.cli {{{','.join(short)}}} [ARGS ...]"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or short.get(argv[0], argv[0]) not in COMMANDS:
        print(usage + (f"\nunknown tool {argv[0]!r}" if argv else ""), file=sys.stderr)
        return 2
    command = short.get(argv[0], argv[0])
    module = importlib.import_module(f"sb3_integration.cli.{COMMANDS[command]}")
    return module.main(argv[1:], prog=f"python -m sb3_integration.cli {argv[0]}")


if __name__ == "__main__":
    sys.exit(main())
