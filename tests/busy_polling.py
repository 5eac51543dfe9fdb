"""Seeing busy polling (cometmq.remoting.busypoll) happen, without timing anything.

A loop that sleeps calls its selector with a timeout; a loop kept polling calls it with none (0).
:class:`RecordingSelector` notes every call an asyncio loop makes, and :class:`RecordingPoller` notes
every kick of a poller and every turn of its spinner, so a test can check that the loop did not sleep
inside any window a kick (a read or a write the poller was told of) opened, and that it sleeps again
once the last window has passed. A blocking
producer's own thread polls its socket the same way (cometmq.client._direct): :func:`record_direct_reads`
notes each of its reads and the timeout it was made with (0: a poll).
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cometmq.client import _direct
from cometmq.remoting import BusyPoller, busypoll, transport

__all__ = [
    "RecordingPoller",
    "RecordingSelector",
    "SocketRead",
    "patch_in_this_thread",
    "record_direct_reads",
    "record_pollers",
]


@dataclass(frozen=True, slots=True)
class SelectCall:
    started_ns: int  # time.perf_counter_ns(), the clock BusyPoller's windows are measured on
    timeout: float | None

    @property
    def sleeps(self) -> bool:
        return self.timeout is None or self.timeout > 0


class RecordingSelector(selectors.DefaultSelector):
    """The default selector, noting each ``select`` call; for ``asyncio.SelectorEventLoop(selector)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[SelectCall] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.calls.append(SelectCall(time.perf_counter_ns(), timeout))
        return super().select(timeout)

    def new_loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.SelectorEventLoop(self)

    def calls_since(self, since_ns: int) -> Iterator[SelectCall]:
        return (call for call in self.calls if call.started_ns >= since_ns)

    def slept_since(self, since_ns: int) -> bool:
        return any(call.sleeps for call in self.calls_since(since_ns))

    def sleeps_inside(self, poller: RecordingPoller) -> list[SelectCall]:
        """The calls with a timeout made while a window of *poller*'s was open: none if it works."""
        return [call for call in self.calls if call.sleeps and poller.window_open_at(call.started_ns)]


class RecordingPoller(BusyPoller):
    """A BusyPoller that notes each read or write it is told of (a kick), the window that kick opened,
    and when its spinner ran. Fixed windows unless *adaptive*."""

    def __init__(self, limit_us: int, adaptive: bool = False) -> None:
        super().__init__(limit_us, adaptive)
        self.kicks: list[int] = []
        self.windows: list[int] = []  # the window (ns) after each kick
        self.opened: list[int] = []  # the window (ns) each kick opened: 0 for a read asked not to poll
        self.reads: list[int] = []  # the kicks that were reads
        self.polling_until: list[int] = []  # after each kick, when the polling it asked for ends
        self.holds: list[int] = []  # when hold_until was called with work still pending
        self.spins: list[int] = []

    def wrote(self) -> None:
        self._noted(super().wrote)

    def read(self, poll: bool = True) -> None:
        self._noted(lambda: super(RecordingPoller, self).read(poll))
        self.reads.append(self.kicks[-1])
        if not poll:
            self.opened[-1] = 0

    def hold_until(self, done: asyncio.Future[Any]) -> None:
        if not done.done():
            self.holds.append(time.perf_counter_ns())
        super().hold_until(done)

    def _noted(self, kick: Callable[[], None]) -> None:
        # Noted before the kick: the window it opens ends no earlier than this + its window.
        self.kicks.append(time.perf_counter_ns())
        kick()
        self.windows.append(self.window.window_ns)
        self.opened.append(self.window.window_ns)
        self.polling_until.append(self._deadline_ns)

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        super()._spin(loop)
        # Noted after the turn: the turn that ends the window is noted at or after its end.
        self.spins.append(time.perf_counter_ns())

    def window_open_at(self, at_ns: int) -> bool:
        return any(
            kick <= at_ns < kick + window for kick, window in zip(self.kicks, self.opened, strict=True)
        )

    @property
    def last_window_end_ns(self) -> int:
        return max(kick + window for kick, window in zip(self.kicks, self.opened, strict=True))

    def spun_to_the_end(self) -> bool:
        """Stopped, its spinner having run until the last window's end (the turn that ends it)."""
        return not self.spinning and bool(self.spins) and self.spins[-1] >= self.last_window_end_ns


def record_pollers(monkeypatch: pytest.MonkeyPatch) -> list[RecordingPoller]:
    """Every poller the remoting transport makes from now on (servers, clients) is a RecordingPoller
    (adaptive or not, as asked); those made on the calling thread are listed in the returned list in the
    order made. Not those of other threads: a client an earlier test left running on a thread of its own
    may connect again meanwhile, and its poller is none of this test's."""
    made: list[RecordingPoller] = []
    this_thread = threading.get_ident()

    class Recorded(RecordingPoller):
        def __init__(self, limit_us: int, adaptive: bool = True) -> None:
            super().__init__(limit_us, adaptive)
            if threading.get_ident() == this_thread:
                made.append(self)

    monkeypatch.setattr(transport, "BusyPoller", Recorded)
    return made


@dataclass(frozen=True, slots=True)
class SocketRead:
    started: float  # time.monotonic(), the clock of the direct lane's window
    timeout: float | None


def record_direct_reads(monkeypatch: pytest.MonkeyPatch) -> list[SocketRead]:
    """Every read a blocking producer's thread makes from its sockets to brokers from now on."""
    reads: list[SocketRead] = []

    class RecordingSocket(socket.socket):
        def recv_into(self, buffer: memoryview, nbytes: int = 0, flags: int = 0) -> int:  # type: ignore[override]
            reads.append(SocketRead(time.monotonic(), self.gettimeout()))
            return super().recv_into(buffer, nbytes, flags)

    connect = _direct._connect

    def recording_connect(address: str, timeout: float) -> socket.socket:
        sock = connect(address, timeout)
        return RecordingSocket(fileno=sock.detach())

    monkeypatch.setattr(_direct, "_connect", recording_connect)
    return reads


def patch_in_this_thread(monkeypatch: pytest.MonkeyPatch, name: str, fake: Callable[[], Any]) -> None:
    """Replace busypoll's *name* (``preemptions``, ``yield_cpu``, ``_clock``, ``_sched_yield``) by
    *fake* for the calling thread only. A patch of a module is process-wide: a loop an earlier test left
    polling on its own thread keeps the real function, so it neither eats the fake's answers nor is
    counted by them."""
    real = getattr(busypoll, name)
    this_thread = threading.get_ident()

    def patched() -> Any:
        return fake() if threading.get_ident() == this_thread else real()

    monkeypatch.setattr(busypoll, name, patched)
