"""asyncio clients that nobody closes still close their sockets: when ``asyncio.run`` ends under them,
and when they are dropped while the loop goes on (against a real standalone server)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Awaitable, Callable

import pytest
from client_support import open_sockets

from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, PushConsumer
from processes import StandaloneServer
from waiting import wait_until


async def producer_left_open(namesrv: str) -> object:
    producer = Producer("PID_unclosed", namesrv)
    await producer.start()
    await producer.send(Message("Unclosed", b"x"))
    return producer


async def lite_pull_consumer_left_open(namesrv: str) -> object:
    consumer = LitePullConsumer("GID_unclosed_lite", namesrv, consume_from="first")
    consumer.subscribe("Unclosed")
    await consumer.start()
    await consumer.poll(timeout=1)
    return consumer


async def push_consumer_left_open(namesrv: str) -> object:
    consumer = PushConsumer("GID_unclosed_push", namesrv)
    consumer.subscribe("Unclosed")
    consumer.listen(lambda messages: None)
    await consumer.start()
    return consumer


async def admin_client_left_open(namesrv: str) -> object:
    admin = AdminClient(namesrv)
    await admin.start()
    await admin.topic_route("Unclosed")
    return admin


LEFT_OPEN: list[Callable[[str], Awaitable[object]]] = [
    producer_left_open,
    lite_pull_consumer_left_open,
    push_consumer_left_open,
    admin_client_left_open,
]


@pytest.mark.parametrize("left_open", LEFT_OPEN, ids=lambda fn: fn.__name__)
def test_a_client_never_closed_closes_its_sockets_when_asyncio_run_ends(
    standalone: StandaloneServer, left_open: Callable[[str], Awaitable[object]]
) -> None:
    # Referenced until asyncio.run has returned: only the loop's end can close its sockets, not the
    # garbage collector while the loop still runs.
    kept: list[object] = []

    async def scenario() -> None:
        async with Producer("PID_topic_maker", standalone.namesrv) as producer:
            await producer.send(Message("Unclosed", b"made"))
        kept.append(await left_open(standalone.namesrv))  # and return without close()

    before = open_sockets()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(scenario())
        closed_by_the_loops_end = open_sockets() <= before  # the client is still referenced here
        kept.clear()
        gc.collect()
    assert closed_by_the_loops_end
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def test_an_admin_client_dropped_while_the_loop_runs_closes_its_socket(
    standalone: StandaloneServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        before = open_sockets()
        admin = AdminClient(standalone.namesrv)
        await admin.start()
        await admin.cluster_info()
        assert open_sockets() > before
        del admin  # dropped, not closed; the loop goes on
        gc.collect()
        await wait_until(lambda: open_sockets() <= before, message="the dropped client's socket closed")
        gc.collect()  # the task that watched for the loop's end is gone with it, not left pending

    asyncio.run(scenario())
    assert "Task was destroyed but it is pending" not in caplog.text
