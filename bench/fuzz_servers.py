"""A protocol fuzz run against a name server and a broker, each its own `cometmq` process.

    .venv/bin/python bench/fuzz_servers.py [--count 1000000] [--seed 1] [--start 0] [--only broker]
                                           [--dir DIR]

Starts `cometmq namesrv` and `cometmq broker` on free ports in a temp dir (or DIR, where their data
and logs then stay) and sends each of them its share of COUNT fuzz inputs (tests/fuzz/fuzzing.py:
every request code's seed and the recorded C++ client frames, mutated), two thirds to the broker.
After each input the server must still answer on the connection (or close it) and log no traceback;
after every 500, a new connection must be served and the resident memory stay under --rss-bound-mib.
Prints progress, then per server: inputs, connections closed by the server, crashes, failures, max RSS
(the peak, VmHWM) and inputs/s, then each kind of failure with its count and first seeds and input
indexes. Input I of seed S alone is replayed by `--seed S --start I --count 1 --only SERVER`. Exits 1
when a failure was found.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "fuzz")]

from fuzzing import Report, Target, fuzz, servers  # noqa: E402


def progress_printer(name: str, count: int, every: int) -> Callable[[Report], None]:
    """What prints a progress line once *every* more inputs have passed (it is called after each
    batch of 500), and after the last."""
    shown = 0

    def progress(report: Report) -> None:
        nonlocal shown
        if report.inputs - shown >= every or report.inputs == count:
            shown = report.inputs
            print(
                f"{name}: {report.inputs:,}/{count:,} inputs, {report.failure_count} failures, "
                f"max RSS {report.max_rss_kib / 1024:.0f} MiB, "
                f"{report.inputs / report.elapsed_s:,.0f} inputs/s",
                flush=True,
            )

    return progress


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs in all (1000000)")
    parser.add_argument("--seed", type=int, default=1, help="the run's seed (1)")
    parser.add_argument("--start", type=int, default=0, help="index of the first input (0)")
    parser.add_argument("--only", choices=["broker", "namesrv"], help="fuzz one server only")
    parser.add_argument("--rss-bound-mib", type=int, default=512, help="resident memory bound (512)")
    parser.add_argument(
        "--progress-every", type=int, default=10_000, metavar="N", help="a progress line per N inputs (10000)"
    )
    parser.add_argument(
        "--dir", type=Path, help="where the servers' data and logs go and stay (a temp dir by default)"
    )
    args = parser.parse_args()
    shares = {"broker": args.count - args.count // 3, "namesrv": args.count // 3}
    if args.only:
        shares = {args.only: args.count}
    reports: list[tuple[str, Report]] = []
    with contextlib.ExitStack() as stack:
        root = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        namesrv, broker = stack.enter_context(servers(root))
        targets: dict[str, Target] = {"broker": broker, "namesrv": namesrv}
        for name, count in shares.items():
            if count == 0:
                continue
            report = fuzz(
                targets[name],
                args.seed,
                count,
                start=args.start,
                rss_bound_kib=args.rss_bound_mib * 1024,
                progress=progress_printer(name, count, args.progress_every),
            )
            reports.append((name, report))
    print(f"seed {args.seed}, each server's inputs from index {args.start} on")
    columns = (
        ("inputs", 10),
        ("closed", 8),
        ("crashes", 7),
        ("failures", 8),
        ("max RSS MiB", 11),
        ("inputs/s", 9),
    )
    print(f"{'server':<8} " + " ".join(f"{title:>{width}}" for title, width in columns))
    for name, report in reports:
        print(
            f"{name:<8} {report.inputs:>10,} {report.closed_by_server:>8,} {int(report.crashed):>7} "
            f"{report.failure_count:>8} {report.max_rss_kib / 1024:>11.0f} "
            f"{report.inputs / max(report.elapsed_s, 1e-9):>9,.0f}"
        )
    for name, report in reports:
        if report.failures:
            print(report.describe(name))
    sys.exit(1 if any(report.failures for _, report in reports) else 0)


if __name__ == "__main__":
    main()
