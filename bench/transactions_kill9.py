"""A long run of the transactions' kill -9 test: a stream of transactions (a third committed, a third
rolled back, a third left open and answered only when the broker checks back) while a `cometmq
standalone` is killed with SIGKILL at random moments and restarted; then every half message must be
settled, every committed message in its queue exactly once and no rolled-back one there.

    .venv/bin/python bench/transactions_kill9.py [--count 2000] [--kills 20] [--seed 1] [--dir PATH]

The suite runs the same stream small (tests/broker/transactions/test_transactions_kill9.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "broker" / "transactions")]

from test_transactions_kill9 import run_stream  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="transactions to run (default 2000)")
    parser.add_argument("--kills", type=int, default=20, help="kill -9s of the broker (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill moments (default 1)")
    parser.add_argument("--dir", type=Path, default=None, help="where the data goes (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        started = time.monotonic()
        run_stream(Path(tmp) / "data", Path(tmp) / "broker.conf", args.count, args.kills, args.seed)
        print(
            f"{args.count} transactions, {args.kills} kill -9s: every committed message delivered once, "
            f"no rolled-back one ({time.monotonic() - started:.1f} s)"
        )


if __name__ == "__main__":
    main()
