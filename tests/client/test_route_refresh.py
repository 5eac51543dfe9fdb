"""A producer whose broker group changed master finds the new one at its next failed attempt, not at
the next periodic route refresh: the failover case (a master deposed, dead or paused, another one
registered with the name server in its place)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from client_support import SILENT, ScriptedBroker, run

from cometmq.client.message import Message, SendStatus
from cometmq.client.producer import Producer
from cometmq.errors import BrokerError, RemotingTimeoutError
from cometmq.namesrv import NameServer
from cometmq.protocol import ResponseCode as Code

TOPIC = "Scripted"
# Longer than any test here: only a failed send can make the producer look the route up again.
NO_PERIODIC_REFRESH_S = 3600.0


@asynccontextmanager
async def old_and_new_master(
    old_script: list[int],
) -> AsyncIterator[tuple[str, ScriptedBroker, ScriptedBroker]]:
    """A name server; the old master of broker-s registered; the new one not yet started."""
    namesrv = NameServer(host="127.0.0.1", port=0)
    await namesrv.start()
    addr = f"127.0.0.1:{namesrv.port}"
    old, new = ScriptedBroker("broker-s", old_script), ScriptedBroker("broker-s", [])
    try:
        await old.start(addr, TOPIC)
        yield addr, old, new
    finally:
        await new.stop()
        await old.stop()
        await namesrv.stop()


async def hand_over(namesrv: str, old: ScriptedBroker, new: ScriptedBroker) -> None:
    """The old master leaves the name server (its registering connection closes) and the new one
    registers as broker id 0 of the same group."""
    await old.namesrv_client.close()
    await new.start(namesrv, TOPIC)


def test_a_send_refused_as_service_not_available_goes_to_the_master_registered_since() -> None:
    async def scenario() -> None:
        deposed = [Code.SUCCESS] + [Code.SERVICE_NOT_AVAILABLE] * 3
        async with (
            old_and_new_master(deposed) as (namesrv, old, new),
            Producer("PID_fo", namesrv, poll_name_server_interval=NO_PERIODIC_REFRESH_S) as producer,
        ):
            assert (await producer.send(Message(TOPIC, b"before"))).status is SendStatus.SEND_OK
            await hand_over(namesrv, old, new)
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in old.sends] == [b"before", b"after"]  # refused once, then not asked again
            assert [r.body for r in new.sends] == [b"after"]

    run(scenario())


def test_a_send_to_a_master_that_is_gone_goes_to_the_master_registered_since() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([]) as (namesrv, old, new),
            Producer("PID_fo", namesrv, poll_name_server_interval=NO_PERIODIC_REFRESH_S) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await old.server.stop()  # its connections close; its port refuses connections
            await hand_over(namesrv, old, new)
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in new.sends] == [b"after"]

    run(scenario())


def test_after_a_send_to_a_silent_master_timed_out_the_next_send_goes_to_the_master_registered_since() -> (
    None
):
    async def scenario() -> None:
        async with (
            old_and_new_master([Code.SUCCESS, SILENT]) as (namesrv, old, new),
            Producer(
                "PID_fo", namesrv, send_timeout=1.0, poll_name_server_interval=NO_PERIODIC_REFRESH_S
            ) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await hand_over(namesrv, old, new)  # the old one keeps its client connections, unanswered
            with pytest.raises(RemotingTimeoutError):
                await producer.send(Message(TOPIC, b"unanswered"))
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in old.sends] == [b"before", b"unanswered"]
            assert [r.body for r in new.sends] == [b"after"]

    run(scenario())


def test_a_refusal_other_than_service_not_available_does_not_look_the_route_up() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([Code.SUCCESS] + [Code.SYSTEM_ERROR] * 3) as (namesrv, old, new),
            Producer(
                "PID_fo", namesrv, retry_times=2, poll_name_server_interval=NO_PERIODIC_REFRESH_S
            ) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await hand_over(namesrv, old, new)
            with pytest.raises(BrokerError) as refused:
                await producer.send(Message(TOPIC, b"busy"))
            assert refused.value.code == Code.SYSTEM_ERROR
            assert len(old.sends) == 4 and not new.sends  # a broker that answers is still the master

    run(scenario())
