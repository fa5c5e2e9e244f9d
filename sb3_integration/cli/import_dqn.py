"""``chunkstore-import-dqn``: a run of the DQN Replay Dataset (dopamine replay checkpoints) into one chunkstore file.

    chunkstore-import-dqn dqn_replay/Pong/1 pong_run1.h5
    chunkstore-import-dqn replay_logs/ out.h5 --suffixes 0 1 2 --update-horizon 3

(``python tools/import_dqn_replay.py`` in a clone runs the same ``main``.)

``SRC`` is a directory of ``$store$_observation_ckpt.N.gz`` ... files, or its parent holding
``replay_logs/``. Checkpoints are streamed one at a time with a progress bar; interrupted,
the same command continues at the next checkpoint (finished ones wait in ``OUT.parts/``).
Exit status: 0 written, 1 a checkpoint file is missing, damaged, truncated or crafted (one
line names it: a header declaring more than the file holds, a count beyond dopamine's types,
data past the declared shape), 2 bad arguments (an ``OUT`` that is, or links to, a file read,
or lies inside ``SRC``, among them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC


def main(argv: list[str] | None = None, prog: str = "chunkstore-import-dqn") -> int:
    """Run ``chunkstore-import-dqn`` on ``argv`` (default: the command line); return the exit status."""
    ap = argparse.ArgumentParser(
        prog=prog, description="Import a run of the DQN Replay Dataset (dopamine replay checkpoints) "
        "into one chunkstore file. Exit status: 0 written, 1 a checkpoint is missing, damaged, "
        "truncated or crafted, 2 bad arguments (an OUT that is or links to an input among them).")
    ap.add_argument("src", help="a directory of $store$_observation_ckpt.N.gz ... files, or its "
                    "parent holding replay_logs/")
    ap.add_argument("out", help="the chunkstore file to write (OUT.parts/ holds finished "
                    "checkpoints until the end)")
    ap.add_argument("--suffixes", type=int, nargs="+", default=None,
                    help="checkpoint numbers (default: all)")
    ap.add_argument("--stack-size", type=int, default=4, help="frames per observation (default: 4)")
    ap.add_argument("--update-horizon", type=int, default=1,
                    help="n of the n-step returns dopamine samples (default: 1)")
    ap.add_argument("--gamma", type=float, default=0.99, help="discount of those returns (default: 0.99)")
    ap.add_argument("--chunk-len", type=int, default=DEFAULT_CHUNK_LEN,
                    help=f"frames per chunk (default: {DEFAULT_CHUNK_LEN})")
    ap.add_argument("--codec", default=DEFAULT_CODEC, help=f"frame codec (default: {DEFAULT_CODEC})")
    ap.add_argument("--keep-parts", action="store_true",
                    help="keep OUT.parts/ (each checkpoint's file) after writing OUT")
    args = ap.parse_args(argv)
    # here, not at the top: it brings torch and SB3 (seconds), which --help does not need
    from sb3_integration.offline import CheckpointError, DQNReplayBuffer, import_dqn_replay

    t0 = time.perf_counter()
    try:
        out = import_dqn_replay(args.src, args.out, suffixes=args.suffixes, stack_size=args.stack_size,
                                update_horizon=args.update_horizon, gamma=args.gamma,
                                chunk_len=args.chunk_len, codec=args.codec, keep_parts=args.keep_parts)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; the same command continues at the next checkpoint", file=sys.stderr)
        return 130
    with DQNReplayBuffer.load(out) as buf:
        size = Path(out).stat().st_size
        print(f"{out}: {buf.n_positions:,} positions from {len(buf.checkpoints['suffix'])} checkpoints, "
              f"{buf.size():,} transitions dopamine samples, {size / 1e6:,.1f} MB "
              f"({size / max(1, buf.n_positions):.0f} B per position), "
              f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
