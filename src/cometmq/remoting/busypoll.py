"""Busy polling: an event loop that keeps polling its sockets for a while after I/O instead of sleeping.

Waking a process that sleeps costs a context switch on bare metal, and far more on a VM whose idle
vCPUs halt at once (a KVM guest with ``guest_halt_poll_ns`` 0): the host must run the vCPU again,
tens of µs each way on the development VM, where a synchronous send has two of them
(docs/performance.md#busy-polling). A loop that is still polling when the next request or reply
comes needs no wake-up. This is Linux's ``busy_poll`` done by the process itself: for a window after
each read or write, the loop's selector is polled without a timeout, then it sleeps as usual.

The window adapts as the Linux guest's haltpoll cpuidle governor adapts a vCPU's polling time
(Documentation/virt/guest-halt-polling.rst and drivers/cpuidle/governors/haltpoll.c). Its facts:
``guest_halt_poll_ns`` is the most a vCPU polls (default 200 000 ns); each vCPU keeps its own
window (``poll_limit_ns``), which starts at 0. An idle vCPU polls for its window, then halts; a
wake-up during the poll changes nothing; after a halt, the governor adapts on ``block_ns``, the time
the vCPU was halted (the wake-up's delay after the window closed, not after the vCPU went idle):
when the window < ``block_ns`` <= ``guest_halt_poll_ns``, the window is multiplied by
``guest_halt_poll_grow`` (default 2), and set to at least ``guest_halt_poll_grow_start`` (default
50 000 ns) and at most ``guest_halt_poll_ns``; when ``block_ns`` > ``guest_halt_poll_ns``, it is
divided by ``guest_halt_poll_shrink`` (default 2; when ``guest_halt_poll_allow_shrink``, default
on); otherwise it stays. :class:`PollWindow` applies the same rules with the same factors, with a
read on a socket for the wake-up and the time from the end of the window after the last read or
write to that read for ``block_ns``; a window halved under ``guest_halt_poll_grow_start`` becomes 0
at once, so that an idle process stops polling after a few quiet gaps:

- a read within the window: the poll paid off, the window stays;
- a read after the window closed, the process having slept longer than the window but not longer
  than the limit: the window was too short, it grows;
- a read after a sleep longer than the limit: no window would have caught it, the window shrinks,
  down to 0, and a loop whose window is 0 sleeps at once after its I/O. An idle process polls at
  most one window after its last I/O and, a few quiet gaps later, not at all.

Beyond haltpoll, which polls a vCPU nobody else can use: a process shares its CPUs. A polling loop
yields its CPU on each turn, and when that yield lets another task run (the yield took over 20 µs
and the thread's involuntary context switches rose), the window ends and shrinks as after a wasted
poll (:func:`yield_cpu`, :func:`preemptions`).

The limit is the setting (``busyPollMicros``, ``busy_poll_us``); a fixed window (not adaptive)
polls the whole limit after every read or write, and a limit of 0 turns polling off.

The GIL: a polling loop releases it around each poll of its selector and each yield, but takes it
straight back, and another thread of the process that waits for it is woken too late to take it
first: it often gets the GIL only when the switch interval (``sys.getswitchinterval()``, 5 ms)
forces a hand-off, milliseconds late (bench/gil_handoff.py, docs/performance.md#busy-polling). So a
loop that hands work to another thread of its own process and waits for it (the broker's flush
thread after a SYNC_FLUSH send) stops polling until that work is done (:meth:`BusyPoller.hold_until`)
and sleeps in its selector, leaving the GIL to that thread. Other threads (an ASYNC_FLUSH flush, a
blocking client's callers) still wait for the forced hand-off while the loop polls.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "BROKER_LIMIT_US",
    "CLIENT_LIMIT_US",
    "GROW",
    "GROW_START_NS",
    "MAX_LIMIT_US",
    "SHRINK",
    "BusyPoller",
    "PollWindow",
    "checked_window",
    "preemptions",
    "yield_cpu",
]

# The haltpoll governor's defaults (see the module's docstring).
GROW = 2
SHRINK = 2
GROW_START_NS = 50_000

_getrusage = resource.getrusage
_clock = time.perf_counter_ns
_sched_yield = os.sched_yield
# A sched_yield with nothing else runnable on its CPU returns within a few µs; one that took longer
# most likely let another task run.
SLOW_YIELD_NS = 20_000
_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)

# The default limits. A client's is haltpoll's guest_halt_poll_ns: a reply the broker sends at once
# comes well within it. A broker's is longer, to span the gaps between the requests of producers
# sending a few thousand messages a second (docs/performance.md#busy-polling); slower traffic
# leaves its window closed.
CLIENT_LIMIT_US = 200
BROKER_LIMIT_US = 1000
# The longest limit taken: 0.1 s, 500 times haltpoll's default. Past it a window is no longer a wait
# for a reply or a request due soon but a CPU kept busy for nothing.
MAX_LIMIT_US = 100_000


def checked_window(window_us: int, key: str = "busy_poll_us") -> int:
    """*window_us* if it is a limit a poller takes (0 to MAX_LIMIT_US µs); a ValueError naming *key*
    otherwise."""
    if not 0 <= window_us <= MAX_LIMIT_US:
        raise ValueError(f"{key} must be within 0..{MAX_LIMIT_US} µs, not {window_us}")
    return window_us


class PollWindow:
    """How long to poll after each read or write: the haltpoll rules over a limit of *limit_us* µs
    (0: never poll), or the whole limit every time when not *adaptive*. *clock* gives ns."""

    __slots__ = ("_clock", "_polled_until_ns", "adaptive", "limit_ns", "window_ns")

    def __init__(
        self, limit_us: int, adaptive: bool = True, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.limit_ns = checked_window(limit_us) * 1000
        self.adaptive = adaptive
        self._clock = clock
        # Adaptive windows start closed, as a vCPU's does: the first short sleep opens them.
        self.window_ns = 0 if adaptive else self.limit_ns
        # When polling stopped after the last read or write, the process sleeping from then on
        # (0: no I/O yet).
        self._polled_until_ns = 0

    def wrote(self) -> int:
        """A write happened now: the time (ns, on the clock) polling should go on until, or 0 when
        the window is 0."""
        return self._poll_from(self._clock())

    def read(self, poll: bool = True) -> int:
        """A read happened now: an adaptive window adapts to how long the process slept before it
        (haltpoll's block_ns: from the end of the window after the last read or write; nothing when
        the read came within that window), then as :meth:`wrote` when *poll*, else no window (0)."""
        now = self._clock()
        if self.adaptive and self._polled_until_ns and now > self._polled_until_ns:
            self._adapt(now - self._polled_until_ns)
        if poll:
            return self._poll_from(now)
        self._polled_until_ns = now
        return 0

    def contended(self) -> None:
        """Another process wanted this CPU while it polled: polling stops now, and an adaptive window
        shrinks as after a wasted poll (a fixed one stays)."""
        self._polled_until_ns = min(self._polled_until_ns, self._clock())
        if self.adaptive and self.window_ns:
            window = self.window_ns // SHRINK
            self.window_ns = window if window >= GROW_START_NS else 0

    def gave_way(self, preempted: int) -> bool:
        """Yield this thread's CPU once, on a turn of a polling loop; True when the window is adaptive
        and another task took the CPU (the thread's :func:`preemptions` have risen past *preempted*,
        counted when polling began): polling stops then (:meth:`contended`)."""
        if yield_cpu() and self.adaptive and preemptions() != preempted:
            self.contended()
            return True
        return False

    def _poll_from(self, now: int) -> int:
        window = self.window_ns
        self._polled_until_ns = now + window
        return now + window if window else 0

    def _adapt(self, slept_ns: int) -> None:
        window, limit = self.window_ns, self.limit_ns
        if window < slept_ns <= limit:  # the window was too short to catch it
            self.window_ns = min(limit, max(GROW_START_NS, window * GROW))
        elif slept_ns > limit and window:  # slept longer than any window could poll
            window //= SHRINK
            self.window_ns = window if window >= GROW_START_NS else 0


class BusyPoller:
    """Keeps the running loop polling for its :class:`PollWindow` after each read or write.

    One poller may be told of I/O from several loops in turn; the loop that did the last I/O polls, and
    a loop whose polling it took over goes back to sleeping as usual.
    """

    __slots__ = ("_deadline_ns", "_holds", "_loop", "_preempted", "window")

    def __init__(self, limit_us: int, adaptive: bool = True) -> None:
        self.window = PollWindow(limit_us, adaptive)
        self._deadline_ns = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop kept polling, if any
        self._preempted = 0  # the thread's involuntary context switches when it last looked
        self._holds = 0  # handed-off work not done yet (hold_until): no polling while there is any

    @property
    def spinning(self) -> bool:
        """Whether a loop is being kept polling now."""
        return self._loop is not None

    @property
    def holding(self) -> bool:
        """Whether work handed to another thread (:meth:`hold_until`) keeps the loop from polling."""
        return self._holds > 0

    def wrote(self) -> None:
        """The running loop wrote: poll for a window from now."""
        self._poll_until(self.window.wrote())

    def read(self, poll: bool = True) -> None:
        """The running loop read: adapt the window, then, when *poll*, poll for it from now."""
        self._poll_until(self.window.read(poll))

    def hold_until(self, done: asyncio.Future[Any]) -> None:
        """Another thread of the process works for the running loop until *done* (the broker's flush
        thread after a flush request) and needs the GIL for it: the loop stops polling, and does not
        poll again until *done* is, so that the GIL is free whenever that thread asks for it."""
        if done.done():
            return
        self._holds += 1
        self._loop = None
        self._deadline_ns = 0
        done.add_done_callback(self._release)

    def _release(self, _: asyncio.Future[Any]) -> None:
        self._holds -= 1

    def _poll_until(self, deadline_ns: int) -> None:
        if self._holds or deadline_ns <= self._deadline_ns:
            return  # no window (or one ending before the running one): nothing more to do
        self._deadline_ns = deadline_ns
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # not polling, or on a loop that has ended or been left
            self._loop = loop
            self._preempted = preemptions()
            loop.call_soon(self._spin, loop)

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        # A callback that is ready makes the loop poll its selector with a zero timeout before it runs
        # again; rescheduling it until the deadline keeps the loop from sleeping, and nothing else.
        if loop is not self._loop:
            return  # another loop did I/O since: this one sleeps again
        if time.perf_counter_ns() < self._deadline_ns:
            # On a machine with more runnable processes than CPUs, the one this loop waits for (its
            # client, its broker) may be waiting for this CPU: it gets it first, and an adaptive
            # window ends there (see preemptions).
            if self.window.gave_way(self._preempted):
                self._loop = None
                self._deadline_ns = 0
                return
            loop.call_soon(self._spin, loop)
        else:
            self._loop = None


def yield_cpu() -> bool:
    """Yield this thread's CPU to any task waiting for it; whether that took over SLOW_YIELD_NS (then
    :func:`preemptions` tells whether another task ran: a getrusage paid only after a slow yield, not
    on every turn of a polling loop)."""
    started = _clock()
    _sched_yield()
    return _clock() - started > SLOW_YIELD_NS


def preemptions() -> int:
    """The calling thread's involuntary context switches so far (0 where Linux's RUSAGE_THREAD is
    missing). A yield that hands the CPU to another task counts as one, so a rise while polling says
    that other work wanted this CPU: polling on would only take CPU time from it, the process this
    one waits for included, and cost it the prompt wake-up a sleeping process gets: on a machine
    with more runnable processes than CPUs, polling on regardless raises the tail latency of a blocking
    send well above no polling at all (docs/performance.md#busy-polling)."""
    return _getrusage(_RUSAGE_THREAD).ru_nivcsw if _RUSAGE_THREAD is not None else 0
