"""BusyPoller: the loop keeps polling (its selector is called without a timeout) for a window after each
kick, and sleeps as before once the window has passed. What it buys (no wake-ups) is measured by
``cometmq bench latency --busy-poll-us``, never here; here is what it does to the loop, seen in the
calls the loop makes to its selector (tests/busy_polling.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
import uvloop

from busy_polling import RecordingPoller, RecordingSelector, record_pollers
from cometmq.protocol import RemotingCommand
from cometmq.remoting import BusyPoller, Connection, RemotingClient, RemotingServer
from waiting import wait_until


def test_a_kicked_loop_spends_its_window_polling_then_sleeps_again() -> None:
    selector = RecordingSelector()
    poller = RecordingPoller(200_000)  # 200 ms

    async def main() -> None:
        start = time.perf_counter_ns()
        await asyncio.sleep(0.01)
        assert selector.slept_since(start), "a loop that waits for a timer sleeps"
        poller.kick()
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
    poller = RecordingPoller(1_000_000)  # 1 s

    async def main() -> None:
        for _ in range(4):  # each kick a tenth of the window after the one before
            poller.kick()
            assert poller.spinning
            next_kick = poller.kicks[-1] + poller.window_ns // 10
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
        poller.kick()
        assert not poller.spinning
        await asyncio.sleep(0.01)
        assert next(selector.calls_since(kicked)).sleeps, "the next call after the kick sleeps"

    with asyncio.Runner(loop_factory=selector.new_loop) as runner:
        runner.run(main())


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="0 µs or more"):
        BusyPoller(-1)


def test_a_poller_kicked_on_a_loop_that_has_ended_polls_on_the_next_one() -> None:
    poller = RecordingPoller(100_000)

    async def kick() -> None:
        poller.kick()

    asyncio.run(kick())  # this loop closes with its spinner still scheduled
    selector = RecordingSelector()

    async def kick_again() -> None:
        poller.kick()
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
    # hour: nothing but the takeover can end the first loop's polling within the test.
    errors: list[BaseException] = []
    poller = RecordingPoller(3_600_000_000)
    first_done = threading.Event()

    def other_thread() -> None:
        async def main() -> None:
            asyncio.get_running_loop().set_debug(True)
            while not first_done.is_set():
                poller.kick()
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
        poller.kick()
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
@pytest.mark.parametrize(("server_us", "client_us"), [(200_000, 0), (0, 200_000), (0, 0)])
def test_a_server_or_client_given_a_window_keeps_the_loop_polling_after_a_request(
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
        server = RemotingServer(handler, "127.0.0.1", 0, busy_poll_us=server_us)
        await server.start()
        client = RemotingClient(busy_poll_us=client_us)
        try:
            asked = time.perf_counter_ns()
            reply = await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand(code=9), timeout=5)
            assert reply.remark == "pong"
            for poller in pollers:
                assert poller.spinning, "the reply left the window open"
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
    assert poller.window_ns == max(server_us, client_us) * 1000
    assert len(poller.kicks) >= 2, "kicked by the request and by its reply"
    if loop_name == "asyncio":  # uvloop polls inside libuv, out of sight
        assert selector.sleeps_inside(poller) == [], "the loop slept inside the window"
        assert selector.slept_since(poller.last_window_end_ns), "the loop sleeps again after it"
