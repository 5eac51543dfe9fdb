"""BusyPoller: the loop keeps polling (spends CPU instead of sleeping) for a window after each kick,
and sleeps as before once the window has passed. What it buys (no wake-ups) is measured by
``cometmq bench latency --busy-poll-us``, never here; here is what it does to the loop, seen in the
CPU time of the loop's thread, with wide margins for a CPU shared with other processes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
import uvloop

from cometmq.protocol import RemotingCommand
from cometmq.remoting import BusyPoller, Connection, RemotingClient, RemotingServer
from processes import loop_cpu_while_waiting


def test_a_kicked_loop_spends_its_window_polling_then_sleeps_again() -> None:
    async def main() -> tuple[float, bool, float, bool, float]:
        idle = await loop_cpu_while_waiting(0.15)
        poller = BusyPoller(200_000)  # 200 ms
        poller.kick()
        spinning_at_once = poller.spinning
        kicked = await loop_cpu_while_waiting(0.4)
        spinning_after = poller.spinning
        after_window = await loop_cpu_while_waiting(0.15)
        return idle, spinning_at_once, kicked, spinning_after, after_window

    idle, spinning_at_once, kicked, spinning_after, after_window = asyncio.run(main())
    assert idle < 0.02, "a loop that waits for a timer sleeps"
    assert spinning_at_once
    # 200 ms of polling; a CPU shared with other processes may give it less, never a sleeping share.
    assert kicked > 0.06, f"the loop slept through its window ({kicked:.3f} s of CPU)"
    assert not spinning_after
    assert after_window < 0.02, "the loop sleeps again once the window has passed"


def test_every_kick_moves_the_end_of_the_window() -> None:
    async def main() -> list[bool]:
        poller = BusyPoller(250_000)  # 250 ms
        seen = []
        for _ in range(4):  # a kick every 50 ms: the window never ends
            poller.kick()
            await asyncio.sleep(0.05)
            seen.append(poller.spinning)
        await asyncio.sleep(0.5)
        seen.append(poller.spinning)
        return seen

    assert asyncio.run(main()) == [True, True, True, True, False]


def test_a_window_of_zero_never_polls() -> None:
    async def main() -> tuple[bool, float]:
        poller = BusyPoller(0)
        poller.kick()
        return poller.spinning, await loop_cpu_while_waiting(0.1)

    spinning, cpu = asyncio.run(main())
    assert not spinning and cpu < 0.02


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="0 µs or more"):
        BusyPoller(-1)


def test_a_poller_polls_on_whichever_loop_kicked_it_last() -> None:
    poller = BusyPoller(100_000)

    async def kick() -> None:
        poller.kick()

    asyncio.run(kick())  # this loop closes with its poll still scheduled

    async def kick_again() -> tuple[float, bool]:
        poller.kick()
        return await loop_cpu_while_waiting(0.25), poller.spinning

    cpu, spinning_after = asyncio.run(kick_again())
    assert cpu > 0.03 and not spinning_after

    # Two loops in two threads kick it in turn. Neither may schedule anything on the other (asyncio's
    # debug mode raises if a callback is scheduled from another thread than its loop's), and the
    # first stops polling once the second has taken the poller over.
    errors: list[BaseException] = []
    poller = BusyPoller(300_000)

    def other_thread() -> None:
        async def main() -> None:
            asyncio.get_running_loop().set_debug(True)
            poller.kick()
            await asyncio.sleep(0.5)

        try:
            asyncio.run(main())
        except BaseException as exc:
            errors.append(exc)

    async def first() -> float:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.set_exception_handler(lambda _, context: errors.append(context.get("exception") or Exception()))
        poller.kick()
        other = threading.Thread(target=other_thread)
        other.start()
        await asyncio.sleep(0.05)
        cpu = await loop_cpu_while_waiting(0.3)  # the other loop polls now, not this one
        await asyncio.to_thread(other.join)
        return cpu

    assert asyncio.run(first()) < 0.05
    assert errors == []


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
@pytest.mark.parametrize(("server_us", "client_us"), [(200_000, 0), (0, 200_000), (0, 0)])
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
            return await loop_cpu_while_waiting(0.25)
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        cpu = runner.run(main())
    if server_us or client_us:
        assert cpu > 0.06, f"the loop slept through the window ({cpu:.3f} s of CPU)"
    else:
        assert cpu < 0.02, f"the loop kept polling without a window ({cpu:.3f} s of CPU)"
