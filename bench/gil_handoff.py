"""How soon another thread of the process gets the GIL while an event loop busy-polls.

    .venv/bin/python bench/gil_handoff.py [--rounds 4] [--count 250]

The loop keeps polling (a fixed 50 ms window, as a broker under steady traffic) and hands work to a
thread of its own, as the broker's event loop hands a SYNC_FLUSH send to its flush thread, then
waits for it. Measured: from the hand-off to that thread running Python code. Modes, alternating
round by round:

- ``poll``: the loop polls on while it waits (the GIL is handed over at the switch interval);
- ``hold``: ``BusyPoller.hold_until`` the work's future, as the broker does: the loop sleeps in its
  selector until the work is done;
- ``switch100us``: polling on, with ``sys.setswitchinterval(100 µs)`` instead of 5 ms.

Prints the p50/p99/max per mode. Only the ratios of one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

from cometmq.remoting.busypoll import BusyPoller

MODES = ("poll", "hold", "switch100us")


def _one_round(mode: str, count: int) -> list[float]:
    handed = threading.Event()
    delays: list[float] = []
    job: dict[str, object] = {}

    def worker() -> None:
        while True:
            handed.wait()
            handed.clear()
            if job.get("stop"):
                return
            delays.append(time.perf_counter() - float(job["at"]))  # type: ignore[arg-type]
            loop, done = job["loop"], job["done"]
            loop.call_soon_threadsafe(done.set_result, None)  # type: ignore[attr-defined]

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        poller = BusyPoller(50_000, adaptive=False)
        for _ in range(count):
            poller.wrote()
            done: asyncio.Future[None] = loop.create_future()
            job.update(loop=loop, done=done, at=time.perf_counter())
            handed.set()
            if mode == "hold":
                poller.hold_until(done)
            await done
            await asyncio.sleep(0.002)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0001 if mode == "switch100us" else interval)
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(interval)
        job["stop"] = True
        handed.set()
        thread.join()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--count", type=int, default=250, help="hand-offs per mode and round")
    args = parser.parse_args()
    delays: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            delays[mode] += _one_round(mode, args.count)
    print(f"{'mode':12} {'n':>6} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>8}")
    for mode, values in delays.items():
        values.sort()
        n = len(values)
        p50, p99, top = (values[n // 2], values[int(n * 0.99)], values[-1])
        print(f"{mode:12} {n:>6} {p50 * 1e6:>8.0f} {p99 * 1e6:>8.0f} {top * 1e6:>8.0f}")


if __name__ == "__main__":
    main()
