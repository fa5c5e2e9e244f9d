"""``chunkstore-inspect`` in a clone: ``python tools/inspect_store.py --help``; the code is
:mod:`sb3_integration.cli.inspect_store`."""

import sys
from pathlib import Path

# the clone's own packages first, whether or not a chunkstore-rl is installed
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sb3_integration.cli.inspect_store import main

if __name__ == "__main__":
    sys.exit(main(prog="inspect_store.py"))
