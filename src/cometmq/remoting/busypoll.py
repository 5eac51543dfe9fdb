"""Busy polling: an event loop that keeps polling its sockets for a while after I/O instead of sleeping.

Waking a process that sleeps costs a context switch on bare metal, and far more on a VM whose idle
vCPUs halt at once (a KVM guest with ``guest_halt_poll_ns`` 0): the host must run the vCPU again,
tens of µs each way on the development VM, where a synchronous send has two of them
(docs/performance.md#busy-polling). A loop that is still polling when the next request or
reply comes needs no wake-up. This is Linux's ``busy_poll`` (and a KVM guest's default haltpoll
window), done by the process itself: for ``window_us`` µs after each read or write, the loop's
selector is polled without a timeout, then it sleeps as usual. The price is a CPU kept busy while
traffic keeps coming, so it is off by default and meant for latency-bound deployments.

The process's other threads (the broker's flush thread, a blocking client's callers) still get the GIL
while the loop polls: the loop releases it around each poll of its selector. Lowering Python's switch
interval as well changed nothing measurable (docs/performance.md), so it is left alone.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["BusyPoller", "checked_window"]


def checked_window(window_us: int) -> int:
    """*window_us* if it is a window a poller takes (0 or more µs); ValueError otherwise."""
    if window_us < 0:
        raise ValueError("the busy-poll window must be 0 µs or more")
    return window_us


class BusyPoller:
    """Keeps the running loop polling for ``window_us`` µs after each :meth:`kick` (0: never).

    One poller may be kicked from several loops in turn; the loop that kicked it last polls, and a loop
    whose polling it took over goes back to sleeping as usual.
    """

    __slots__ = ("_deadline_ns", "_loop", "_window_ns")

    def __init__(self, window_us: int) -> None:
        self._window_ns = checked_window(window_us) * 1000
        self._deadline_ns = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop kept polling, if any

    @property
    def spinning(self) -> bool:
        """Whether a loop is being kept polling now."""
        return self._loop is not None

    def kick(self) -> None:
        """Some I/O happened (on the running loop): poll for a window from now."""
        if not self._window_ns:
            return
        self._deadline_ns = time.perf_counter_ns() + self._window_ns
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # not polling, or on a loop that has ended or been left
            self._loop = loop
            loop.call_soon(self._spin, loop)

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        # A callback that is ready makes the loop poll its selector with a zero timeout before it runs
        # again; rescheduling it until the deadline keeps the loop from sleeping, and nothing else.
        if loop is not self._loop:
            return  # another loop kicked the poller since: this one sleeps again
        if time.perf_counter_ns() < self._deadline_ns:
            loop.call_soon(self._spin, loop)
        else:
            self._loop = None
