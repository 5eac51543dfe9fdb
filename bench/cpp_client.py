"""Throughput of the official C++ client (rocketmq==0.4.4) against a fresh `cometmq standalone`.

    .venv/bin/python bench/cpp_client.py [--count 20000] [--threads 1 4] [--busy-poll-us 0]

Starts a standalone server on free ports in a temp dir, sends COUNT messages of 1 KiB with synchronous
sends (one producer per thread), then consumes them all with one push consumer, and prints messages/s.
The C++ client runs in child processes (tests/interop/_cpp_scenarios.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from processes import StandaloneServer, read_cpp_result  # noqa: E402

SCENARIOS = ROOT / "tests" / "interop" / "_cpp_scenarios.py"


def scenario(server: StandaloneServer, *args: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS), *args, "--namesrv", server.namesrv],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    result = read_cpp_result(proc.stdout, proc.returncode, proc.stderr)
    if not result.get("ok"):
        raise SystemExit(f"bench failed: {result.get('errors')}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        default=0,
        metavar="US",
        help="the broker's busyPollMicros (0, as by default)",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = StandaloneServer(Path(tmp) / "data", "--busy-poll-us", str(args.busy_poll_us))
        server.start()
        try:
            total = 0
            for threads in args.threads:
                topic = f"Bench{threads}"
                produced = scenario(
                    server,
                    "bench-produce",
                    "--topic",
                    topic,
                    "--count",
                    str(args.count),
                    "--threads",
                    str(threads),
                )
                total = args.count + int(produced["warmup_messages"])  # type: ignore[call-overload]
                rows.append((f"send_sync 1 KiB, {threads} producer thread(s)", produced["msgs_per_sec"]))
                consumed = scenario(
                    server,
                    "bench-consume",
                    "--topic",
                    topic,
                    "--group",
                    f"GID_{topic}",
                    "--expect",
                    str(total),
                    "--timeout",
                    "300",
                )
                rows.append((f"push consume 1 KiB, 1 consumer ({total} msgs)", consumed["msgs_per_sec"]))
        finally:
            server.stop()
    width = max(len(name) for name, _ in rows)
    print(f"{'workload':<{width}}  messages/s")
    for name, rate in rows:
        print(f"{name:<{width}}  {float(rate):>10,.0f}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
