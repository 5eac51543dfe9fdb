"""Busy polling. PollWindow: the haltpoll governor's rules for the window, on a fake clock. BusyPoller:
the loop keeps polling (its selector is called without a timeout) for a window after each read or
write it is told of (a kick), and sleeps as before once the window has passed. What it buys (no
wake-ups) is measured by ``cometmq bench latency`` and bench/polling.py, never here; here is what it
does to the loop, seen in the calls the loop makes to its selector (tests/busy_polling.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
import uvloop

from busy_polling import RecordingPoller, RecordingSelector, patch_in_this_thread, record_pollers
from cometmq.protocol import RemotingCommand
from cometmq.remoting import BusyPoller, Connection, PollWindow, RemotingClient, RemotingServer, busypoll
from cometmq.remoting.busypoll import GROW_START_NS
from waiting import wait_until


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance_us(self, us: float) -> None:
        self.ns += int(us * 1000)


def window_on_a_fake_clock(limit_us: int, adaptive: bool = True) -> tuple[PollWindow, FakeClock]:
    clock = FakeClock()
    return PollWindow(limit_us, adaptive, clock), clock


def read_after(window: PollWindow, clock: FakeClock, gap_us: float) -> int:
    """A write, then a read *gap_us* later: the window (ns) after the read."""
    window.wrote()
    clock.advance_us(gap_us)
    window.read()
    return window.window_ns


def read_after_sleeping(window: PollWindow, clock: FakeClock, slept_us: float) -> int:
    """A write, then a read *slept_us* after the window it opened closed (haltpoll's block_ns): the
    window (ns) after the read."""
    return read_after(window, clock, window.window_ns / 1000 + slept_us)


def test_on_a_fake_clock_an_adaptive_window_starts_closed_and_a_first_read_leaves_it_so() -> None:
    window, _ = window_on_a_fake_clock(1000)
    assert window.window_ns == 0
    assert window.read() == 0, "no window: no time to poll until"
    assert window.wrote() == 0


def test_on_a_fake_clock_a_read_just_after_the_window_grows_it_from_grow_start_doubling_to_the_limit() -> (
    None
):
    window, clock = window_on_a_fake_clock(1000)
    grown = [read_after_sleeping(window, clock, 900) for _ in range(6)]  # each a sleep within the limit
    assert grown == [50_000, 100_000, 200_000, 400_000, 800_000, 1_000_000]


def test_on_a_fake_clock_a_read_within_the_window_leaves_it_as_it_is() -> None:
    window, clock = window_on_a_fake_clock(1000)
    read_after(window, clock, 30)
    assert window.window_ns == GROW_START_NS
    assert [read_after(window, clock, 40) for _ in range(5)] == [GROW_START_NS] * 5
    assert window.wrote() == clock.ns + GROW_START_NS, "polling goes on a window from the write"


def test_on_a_fake_clock_a_read_later_than_the_limit_halves_the_window_and_under_grow_start_closes_it() -> (
    None
):
    window, clock = window_on_a_fake_clock(1000)
    for _ in range(5):
        read_after_sleeping(window, clock, 999)
    assert window.window_ns == 800_000
    shrunk = [read_after_sleeping(window, clock, 1001) for _ in range(6)]
    assert shrunk == [400_000, 200_000, 100_000, 50_000, 0, 0]


def test_on_a_fake_clock_a_closed_window_stays_closed_while_reads_come_later_than_the_limit() -> None:
    window, clock = window_on_a_fake_clock(1000)
    read_after(window, clock, 500)
    read_after(window, clock, 5_000)
    for gap_us in (2_000, 60_000_000, 1_001):  # an idle process: every read long after the last I/O
        assert read_after(window, clock, gap_us) == 0
        assert window.wrote() == 0, "a closed window polls after no write"
    assert read_after(window, clock, 999) == GROW_START_NS, "a read just within the limit opens it again"


def test_on_a_fake_clock_the_gap_runs_from_the_last_read_or_write() -> None:
    window, clock = window_on_a_fake_clock(1000)
    window.read()
    clock.advance_us(5_000)
    window.wrote()  # a reply written long after the read before
    clock.advance_us(100)
    window.read()
    assert window.window_ns == GROW_START_NS, "100 µs after the write: a grow, not a shrink"
    clock.advance_us(5_000)
    window.read()
    assert window.window_ns == 0


def test_on_a_fake_clock_the_window_adapts_to_the_sleep_after_it_as_haltpoll_to_block_ns() -> None:
    window, clock = window_on_a_fake_clock(1000)
    for _ in range(4):
        read_after_sleeping(window, clock, 900)
    assert window.window_ns == 400_000
    assert read_after(window, clock, 450) == 400_000, "polled 400 µs, slept 50: not longer than the window"
    assert read_after(window, clock, 1_200) == 800_000, (
        "slept 800 µs: longer than the window, within the limit"
    )
    assert read_after(window, clock, 1_500) == 800_000, "slept 700 µs, not longer than the window"
    assert read_after(window, clock, 1_900) == 400_000, "slept 1100 µs, longer than the limit"
    assert read_after(window, clock, 1_300) == 800_000, "slept 900 µs: a grow, 1300 µs after the write"


def test_on_a_fake_clock_a_limit_under_grow_start_grows_straight_to_the_limit() -> None:
    window, clock = window_on_a_fake_clock(20)
    assert read_after(window, clock, 15) == 20_000
    assert read_after_sleeping(window, clock, 25) == 0, (
        "a sleep over the limit: halved under grow_start, closed"
    )


def test_on_a_fake_clock_a_fixed_window_is_the_limit_whatever_the_gaps() -> None:
    window, clock = window_on_a_fake_clock(300, adaptive=False)
    assert window.window_ns == 300_000
    assert [read_after(window, clock, gap) for gap in (10, 310, 5_000, 60_000_000)] == [300_000] * 4
    assert window.wrote() == clock.ns + 300_000


@pytest.mark.parametrize("adaptive", [True, False])
def test_on_a_fake_clock_a_limit_of_zero_never_opens_a_window(adaptive: bool) -> None:
    window, clock = window_on_a_fake_clock(0, adaptive)
    assert [read_after(window, clock, gap) for gap in (0, 1, 100, 10_000)] == [0] * 4
    assert window.wrote() == 0


def test_a_kicked_loop_spends_its_window_polling_then_sleeps_again() -> None:
    selector = RecordingSelector()
    poller = RecordingPoller(20_000)  # 20 ms

    async def main() -> None:
        start = time.perf_counter_ns()
        await asyncio.sleep(0.01)
        assert selector.slept_since(start), "a loop that waits for a timer sleeps"
        poller.wrote()
        assert poller.spinning
        await asyncio.sleep(0.01)
        await wait_until(poller.spun_to_the_end, message="the end of the window")
        await wait_until(lambda: selector.slept_since(poller.last_window_end_ns), message="a sleep after it")

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())
    assert not next(selector.calls_since(poller.kicks[0])).sleeps, "the first call after the kick polls"
    assert selector.sleeps_inside(poller) == [], "the loop never slept inside the window"


def test_every_kick_moves_the_end_of_the_window() -> None:
    selector = RecordingSelector()
    poller = RecordingPoller(50_000)  # 50 ms

    async def main() -> None:
        for _ in range(4):  # each kick a tenth of the window after the one before
            poller.wrote()
            assert poller.spinning
            next_kick = poller.kicks[-1] + poller.windows[-1] // 10
            await wait_until(lambda at=next_kick: time.perf_counter_ns() >= at, message="the next kick")
        await wait_until(poller.spun_to_the_end, message="the end of the last window")
        await wait_until(lambda: selector.slept_since(poller.last_window_end_ns), message="a sleep after it")

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())
    # Polled from the first kick until a whole window after the last, past the first kick's window.
    first_kick, end = poller.kicks[0], poller.last_window_end_ns
    assert not [call for call in selector.calls if first_kick <= call.started_ns < end and call.sleeps]


def test_a_window_of_zero_never_polls() -> None:
    selector = RecordingSelector()

    async def main() -> None:
        poller = BusyPoller(0)
        kicked = time.perf_counter_ns()
        poller.wrote()
        assert not poller.spinning
        await asyncio.sleep(0.01)
        assert next(selector.calls_since(kicked)).sleeps, "the next call after the kick sleeps"

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())


@pytest.mark.parametrize("limit_us", [-1, 100_001, 3_600_000_000])
def test_a_limit_outside_0_to_the_cap_is_refused_naming_the_key(limit_us: int) -> None:
    with pytest.raises(ValueError, match=rf"busy_poll_us must be within 0\.\.100000 µs, not {limit_us}"):
        BusyPoller(limit_us)
    with pytest.raises(ValueError, match="busy_poll_us must be within"):
        PollWindow(limit_us)
    assert BusyPoller(busypoll.MAX_LIMIT_US).window.limit_ns == 100_000_000


def test_a_poller_kicked_on_a_loop_that_has_ended_polls_on_the_next_one() -> None:
    poller = RecordingPoller(100_000)

    async def kick() -> None:
        poller.wrote()

    asyncio.run(kick())  # this loop closes with its spinner still scheduled
    selector = RecordingSelector()

    async def kick_again() -> None:
        poller.wrote()
        await asyncio.sleep(0.01)
        await wait_until(poller.spun_to_the_end, message="the end of the window")

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(kick_again())
    assert not next(selector.calls_since(poller.kicks[-1])).sleeps
    assert selector.sleeps_inside(poller) == []


def test_a_loop_whose_poller_another_loop_kicked_sleeps_again() -> None:
    # Two loops in two threads kick one poller in turn. Neither may schedule anything on the other
    # (asyncio's debug mode raises if a callback is scheduled from another thread than its loop's),
    # and the first goes back to sleeping once the second has taken the poller over. A window of an
    # hour, past the cap a setting may take (it polls only until the other loop's first kick): nothing
    # but the takeover can end the first loop's polling within the test.
    errors: list[BaseException] = []
    poller = RecordingPoller(0)
    poller.window.limit_ns = poller.window.window_ns = 3_600_000_000_000
    first_done = threading.Event()

    def other_thread() -> None:
        async def main() -> None:
            asyncio.get_running_loop().set_debug(True)
            while not first_done.is_set():
                poller.wrote()
                await asyncio.sleep(0.01)

        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    selector = RecordingSelector()

    async def first() -> None:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.set_exception_handler(lambda _, context: errors.append(context.get("exception") or Exception()))
        poller.wrote()
        other = threading.Thread(target=other_thread)
        other.start()
        try:
            await wait_until(lambda: len(poller.kicks) > 1, message="the other loop's kick")
            taken_over = poller.kicks[1]
            await wait_until(lambda: selector.slept_since(taken_over), message="this loop sleeping again")
        finally:
            first_done.set()
            await asyncio.to_thread(other.join)

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(first())
    assert errors == []


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize(("server_us", "client_us"), [(20_000, 0), (0, 20_000), (0, 0)])
def test_a_server_or_client_given_a_fixed_window_keeps_the_loop_polling_after_a_request(
    monkeypatch: pytest.MonkeyPatch, loop_name: str, server_us: int, client_us: int
) -> None:
    pollers = record_pollers(monkeypatch)
    selector = RecordingSelector()
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = (
        selector.new_loop if loop_name == "asyncio" else uvloop.new_event_loop
    )

    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(remark="pong")

    async def main() -> int:
        server = RemotingServer(handler, "127.0.0.1", 0, busy_poll_us=server_us, busy_poll_adaptive=False)
        await server.start()
        client = RemotingClient(busy_poll_us=client_us, busy_poll_adaptive=False)
        try:
            asked = time.perf_counter_ns()
            reply = await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand(code=9), timeout=5)
            assert reply.remark == "pong"
            for poller in pollers:
                await wait_until(poller.spun_to_the_end, message="the end of the window")
            await asyncio.sleep(0.01)
            return asked
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        asked = runner.run(main())
    if not (server_us or client_us):
        assert pollers == [], "no window, no poller"
        assert loop_name == "uvloop" or selector.slept_since(asked)
        return
    (poller,) = pollers
    assert set(poller.windows) == {max(server_us, client_us) * 1000}
    assert len(poller.kicks) >= 2, "kicked by the request and by its reply"
    if loop_name == "asyncio":  # uvloop polls inside libuv, out of sight
        assert selector.sleeps_inside(poller) == [], "the loop slept inside the window"
        assert selector.slept_since(poller.last_window_end_ns), "the loop sleeps again after it"


def test_on_a_fake_clock_a_read_that_polls_on_adapts_the_window_and_opens_none() -> None:
    window, clock = window_on_a_fake_clock(1000)
    window.wrote()
    clock.advance_us(300)
    assert window.read(poll=False) == 0, "no window after it"
    assert window.window_ns == GROW_START_NS, "a sleep of 300 µs: it grew"
    clock.advance_us(2_000)
    assert window.wrote() == clock.ns + GROW_START_NS, "the next write opens it"


@pytest.mark.parametrize("adaptive", [True, False])
def test_a_clients_read_that_leaves_no_request_unanswered_opens_no_window(
    monkeypatch: pytest.MonkeyPatch, adaptive: bool
) -> None:
    pollers = record_pollers(monkeypatch)

    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(remark="pong")

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)  # no poller of its own
        await server.start()
        client = RemotingClient(busy_poll_us=20_000, busy_poll_adaptive=adaptive)
        (poller,) = pollers
        poller.window.window_ns = poller.window.limit_ns  # as traffic would have opened it
        try:
            for _ in range(3):
                reply = await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand(code=9), timeout=5)
                assert reply.remark == "pong"
            await wait_until(lambda: not poller.spinning, message="the end of the last request's window")
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())
    (poller,) = pollers
    assert len(poller.reads) >= 3, "each reply was read"
    for at, kick in enumerate(poller.kicks):
        if kick in poller.reads:  # the reply: polling goes on until the request's window ends, no longer
            assert at > 0 and poller.polling_until[at] <= poller.polling_until[at - 1]


def test_on_a_fake_clock_contention_shrinks_an_adaptive_window_and_leaves_a_fixed_one() -> None:
    window, clock = window_on_a_fake_clock(1000)
    for _ in range(5):
        read_after(window, clock, 900)
    assert window.window_ns == 800_000
    shrunk = []
    for _ in range(5):
        window.contended()
        shrunk.append(window.window_ns)
    assert shrunk == [400_000, 200_000, 100_000, 50_000, 0]
    fixed, _ = window_on_a_fake_clock(300, adaptive=False)
    fixed.contended()
    assert fixed.window_ns == 300_000


@pytest.mark.parametrize("adaptive", [True, False])
def test_an_adaptive_loop_that_another_task_preempts_stops_polling(
    monkeypatch: pytest.MonkeyPatch, adaptive: bool
) -> None:
    switches = iter(range(1_000_000))  # every look finds one more involuntary context switch
    patch_in_this_thread(monkeypatch, "preemptions", lambda: next(switches))
    patch_in_this_thread(monkeypatch, "yield_cpu", lambda: True)  # after every yield, slow as when preempted
    selector = RecordingSelector()
    poller = RecordingPoller(100_000 if adaptive else 20_000, adaptive)  # 100 ms, 20 ms

    async def main() -> None:
        if adaptive:
            poller.window.window_ns = poller.window.limit_ns  # as traffic would have opened it
        poller.wrote()
        assert poller.spinning
        if adaptive:
            await wait_until(lambda: not poller.spinning, message="the end of the preempted window")
            assert poller.window.window_ns == 50_000_000, "shrunk as after a wasted poll"
            assert poller.spins[-1] < poller.last_window_end_ns, "ended before its time"
        else:
            # Every turn saw a preemption, and the window still ran to its end.
            await wait_until(poller.spun_to_the_end, message="the end of the window")
            assert len(poller.spins) > 1

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())


def test_on_a_fake_clock_a_yield_is_slow_past_20_us(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    took_us = [5.0, 20.0, 21.0, 3_000.0]
    patch_in_this_thread(monkeypatch, "_clock", clock)
    patch_in_this_thread(monkeypatch, "_sched_yield", lambda: clock.advance_us(took_us.pop(0)))
    assert [busypoll.yield_cpu() for _ in range(4)] == [False, False, True, True]


def test_a_polling_loop_looks_for_preemptions_only_after_a_slow_yield(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looks: list[int] = []
    switches = iter(range(1_000_000))  # every look would find one more involuntary context switch
    slow = iter([False] * 50 + [True] * 1_000_000)  # the 51st turn's yield is slow
    patch_in_this_thread(monkeypatch, "preemptions", lambda: looks.append(1) or next(switches))
    patch_in_this_thread(monkeypatch, "yield_cpu", lambda: next(slow))
    poller = RecordingPoller(100_000, adaptive=True)

    async def main() -> None:
        poller.window.window_ns = poller.window.limit_ns  # as traffic would have opened it
        poller.wrote()
        await wait_until(lambda: not poller.spinning, message="the end of the preempted window")

    asyncio.run(main())
    assert len(poller.spins) == 51, "fast yields went on polling, the slow one ended the window"
    assert len(looks) == 2, "the window's start and the slow yield"
    assert poller.window.window_ns == 50_000_000


def test_a_loop_waiting_for_work_it_handed_to_another_thread_does_not_poll_until_it_is_done() -> None:
    poller = BusyPoller(50_000, adaptive=False)

    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        poller.wrote()
        assert poller.spinning
        poller.hold_until(done)
        assert not poller.spinning and poller.holding, "polling ends at once"
        poller.read()
        poller.wrote()
        assert not poller.spinning, "reads and writes meanwhile open no window"
        done.set_result(None)
        await asyncio.sleep(0)  # the future's callbacks run
        assert not poller.holding
        poller.wrote()
        assert poller.spinning, "the next write polls again"
        poller.hold_until(done)
        assert poller.spinning and not poller.holding, "work done already holds nothing"

    asyncio.run(main())
