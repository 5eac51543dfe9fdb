"""What the metrics cost batched produce and consume: a server with its metrics endpoint on (and
scraped every second) beside one with it off.

    .venv/bin/python bench/metrics.py [--count 200000] [--batch 100] [--inflight 8] [--size 1024] [--rounds 3]

In one run: two `cometmq standalone` servers (ports picked by the OS, data in temp dirs), one started
with `--metrics-port 0`, one with `--no-metrics`; a thread scrapes the first's /metrics once a second
for the whole run, as Prometheus would. Then, --rounds times and alternating which server goes first,
`cometmq bench produce` (batches of --batch, --inflight in flight) and `cometmq bench consume` (the
topic read from its start) against each. Prints each workload's median messages/s over the rounds
and on / off, the share of throughput kept with metrics on; the server process's CPU time per
message (its scrapes included) and off / on, the share of throughput its CPU would allow; and how
many scrapes were answered.

The machine is noisy: compare the ratios of one run, not absolute figures across runs. On a machine
shared with other work the CPU ratio is the steadier of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

COMMAND = [sys.executable, "-m", "cometmq"]
TOPIC = "BenchMetrics"
SCRAPE_INTERVAL_S = 1.0
_READY = re.compile(r"namesrv (\S+), broker .*?(?:, metrics (\S+))?$")


def _cometmq(*args: str) -> str:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"cometmq {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def _start_standalone(data_dir: Path, *flags: str) -> tuple[subprocess.Popen[str], str, str | None]:
    """A standalone server; its NameServer address and metrics URL (None: metrics off)."""
    data_dir.mkdir(parents=True)
    log = (data_dir.parent / "standalone.log").open("w")
    # Without the dashboard and the proxy: not what is measured, and their fixed default ports may be taken.
    args = [
        "standalone",
        "--data-dir",
        str(data_dir),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--no-dashboard",
        "--proxy-port",
        "0",
        *flags,
    ]
    server = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=log, text=True)
    assert server.stdout is not None
    for line in server.stdout:
        found = _READY.search(line.strip())
        if line.startswith("CometMQ standalone ready:") and found is not None:
            return server, found.group(1), found.group(2)
    raise SystemExit(f"the standalone server exited with {server.wait()}")


class _Scraper(threading.Thread):
    """GET *url* once a second until stopped; counts the answers."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.scrapes = 0
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(SCRAPE_INTERVAL_S):
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                self.failures += 1


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process *pid* so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(workload: str, namesrv: str, server_pid: int, args: argparse.Namespace) -> tuple[float, float]:
    """Messages/s of one run of *workload*, and the server's CPU µs per message meanwhile."""
    flags = ["--count", str(args.count), "--size", str(args.size)]
    if workload == "produce":
        flags += ["--batch", str(args.batch), "--inflight", str(args.inflight)]
    before = _cpu_seconds(server_pid)
    report = json.loads(_cometmq("bench", workload, "-n", namesrv, "--topic", TOPIC, *flags, "--json"))
    cpu = _cpu_seconds(server_pid) - before
    return float(report["rows"][0]["msg_per_s"]), cpu / args.count * 1e6


Figures = dict[str, dict[str, list[tuple[float, float]]]]


def measure(args: argparse.Namespace) -> tuple[Figures, _Scraper]:
    """Each round's (msg/s, server CPU µs/msg) of each workload ("produce", "consume") on each server
    ("on", "off")."""
    with tempfile.TemporaryDirectory(prefix="cometmq-bench-metrics-") as tmp:
        on, on_namesrv, url = _start_standalone(Path(tmp) / "on" / "data", "--metrics-port", "0")
        off, off_namesrv, _ = _start_standalone(Path(tmp) / "off" / "data", "--no-metrics")
        if url is None:
            raise SystemExit("the server started with --metrics-port 0 names no metrics endpoint")
        servers = {"on": (on_namesrv, on.pid), "off": (off_namesrv, off.pid)}
        scraper = _Scraper(url)
        scraper.start()
        rates: Figures = {workload: {"on": [], "off": []} for workload in ("produce", "consume")}
        try:
            for round_number in range(args.rounds):
                # Off first, then on first: neither gains from running second.
                modes = ["off", "on"] if round_number % 2 == 0 else ["on", "off"]
                for workload in ("produce", "consume"):
                    for mode in modes:
                        rates[workload][mode].append(_run(workload, *servers[mode], args))
        finally:
            scraper.stopping.set()
            scraper.join()
            for server in (on, off):
                server.terminate()
                server.wait()
    return rates, scraper


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000, help="messages per workload (200000)")
    parser.add_argument("--batch", type=int, default=100, help="messages per batch (100)")
    parser.add_argument("--inflight", type=int, default=8, help="batches in flight (8)")
    parser.add_argument("--size", type=int, default=1024, help="body size (1024)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of both, alternating which runs first; medians (3)"
    )
    args = parser.parse_args()
    rates, scraper = measure(args)
    print(f"batches of {args.batch}, {args.inflight} in flight, {args.size} B bodies, {args.count} messages:")
    for workload, by_mode in rates.items():
        for mode in ("off", "on"):
            runs = by_mode[mode]
            rate = statistics.median(r for r, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(
                f"  {workload} metrics {mode}: {' ' if mode == 'on' else ''}{rate:,.0f} msg/s, server CPU "
                f"{cpu:.2f} µs/msg   (rounds: {[round(r) for r, _ in runs]})"
            )
        off_rate, on_rate = (statistics.median(r for r, _ in by_mode[mode]) for mode in ("off", "on"))
        off_cpu, on_cpu = (statistics.median(c for _, c in by_mode[mode]) for mode in ("off", "on"))
        print(f"{workload} on / off: {on_rate / off_rate:.2f}")
        print(f"{workload} server CPU off / on: {off_cpu / on_cpu:.2f}")
    print(f"scrapes answered: {scraper.scrapes}, failed: {scraper.failures}")


if __name__ == "__main__":
    main()
