"""BusyPoller: the loop keeps polling (spends CPU instead of sleeping) for a window after each kick,
and sleeps as before once the window has passed. What it buys (no wake-ups) is measured by
``cometmq bench latency --busy-poll-us``, never here; here is what it does to the loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import uvloop

from cometmq.remoting import BusyPoller, Connection, RemotingClient, RemotingCommand, RemotingServer


async def _cpu_seconds_while_waiting(seconds: float) -> float:
    """CPU time this thread (the loop's) spends while the loop waits *seconds* with nothing to do."""
    started = time.thread_time()
    await asyncio.sleep(seconds)
    return time.thread_time() - started


def test_a_kicked_loop_spends_its_window_polling_then_sleeps_again() -> None:
    async def main() -> tuple[float, bool, float, bool, float]:
        idle = await _cpu_seconds_while_waiting(0.15)
        poller = BusyPoller(100_000)  # 100 ms
        poller.kick()
        spinning_at_once = poller.spinning
        kicked = await _cpu_seconds_while_waiting(0.15)
        spinning_after = poller.spinning
        after_window = await _cpu_seconds_while_waiting(0.15)
        return idle, spinning_at_once, kicked, spinning_after, after_window

    idle, spinning_at_once, kicked, spinning_after, after_window = asyncio.run(main())
    assert idle < 0.02, "a loop that waits for a timer sleeps"
    assert spinning_at_once
    # 100 ms of polling; a CPU shared with other processes may give it less, never a sleeping share.
    assert kicked > 0.04, f"the loop slept through its window ({kicked:.3f} s of CPU)"
    assert not spinning_after
    assert after_window < 0.02, "the loop sleeps again once the window has passed"


def test_every_kick_moves_the_end_of_the_window() -> None:
    async def main() -> list[bool]:
        poller = BusyPoller(60_000)  # 60 ms
        seen = []
        for _ in range(4):  # a kick every 40 ms: the window never ends
            poller.kick()
            await asyncio.sleep(0.04)
            seen.append(poller.spinning)
        await asyncio.sleep(0.1)
        seen.append(poller.spinning)
        return seen

    assert asyncio.run(main()) == [True, True, True, True, False]


def test_a_window_of_zero_never_polls() -> None:
    async def main() -> tuple[bool, float]:
        poller = BusyPoller(0)
        poller.kick()
        return poller.spinning, await _cpu_seconds_while_waiting(0.1)

    spinning, cpu = asyncio.run(main())
    assert not spinning and cpu < 0.02


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="0 µs or more"):
        BusyPoller(-1)


def test_a_poller_whose_loop_ended_while_polling_polls_on_the_next_loop() -> None:
    poller = BusyPoller(50_000)

    async def kick() -> None:
        poller.kick()

    asyncio.run(kick())  # the loop closes with the poll still scheduled
    assert poller.spinning  # (stale: that loop is gone)

    async def kick_again() -> float:
        poller.kick()
        return await _cpu_seconds_while_waiting(0.08)

    assert asyncio.run(kick_again()) > 0.02
    assert not poller.spinning


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
@pytest.mark.parametrize(("server_us", "client_us"), [(100_000, 0), (0, 100_000), (0, 0)])
def test_a_server_or_client_given_a_window_keeps_the_loop_polling_after_a_request(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], server_us: int, client_us: int
) -> None:
    def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(remark="pong")

    async def main() -> float:
        server = RemotingServer(handler, "127.0.0.1", 0, busy_poll_us=server_us)
        await server.start()
        client = RemotingClient(busy_poll_us=client_us)
        try:
            reply = await client.invoke(f"127.0.0.1:{server.port}", RemotingCommand(code=9), timeout=5)
            assert reply.remark == "pong"
            return await _cpu_seconds_while_waiting(0.15)
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        cpu = runner.run(main())
    if server_us or client_us:
        assert cpu > 0.04, f"the loop slept through the window ({cpu:.3f} s of CPU)"
    else:
        assert cpu < 0.02, f"the loop kept polling without a window ({cpu:.3f} s of CPU)"
