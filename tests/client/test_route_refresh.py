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
from cometmq.errors import BrokerError, CometMQError, NoRouteError
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol import ResponseCode as Code
from cometmq.protocol.broker_headers import SendMessageRequestHeader
from cometmq.protocol.namesrv_headers import RegisterBrokerRequestHeader
from cometmq.protocol.route import DataVersion, RegisterBrokerBody
from cometmq.remoting import RemotingClient
from waiting import wait_until

TOPIC = "Scripted"
# Longer than any test here: only a failed send can make the producer look the route up again.
NO_PERIODIC_REFRESH_S = 3600.0


class Handover:
    """A name server (``addr``), the old master of broker-s registered, the new one not yet started."""

    def __init__(self, namesrv: NameServer, old_script: list[int]) -> None:
        self.namesrv = namesrv
        self.addr = f"127.0.0.1:{namesrv.port}"
        self.old = ScriptedBroker("broker-s", old_script)
        self.new = ScriptedBroker("broker-s", [])

    async def leave(self) -> None:
        """The old master leaves the name server: its registering connection closes."""
        await self.old.namesrv_client.close()
        live = self.namesrv.routes.broker_live_table
        await wait_until(lambda: self.old.addr not in live, message="the name server to drop the old master")

    async def hand_over(self) -> None:
        """The old master leaves, and the new one registers as broker id 0 of the group."""
        await self.leave()
        await self.new.start(self.addr, TOPIC)


@asynccontextmanager
async def old_and_new_master(old_script: list[int]) -> AsyncIterator[Handover]:
    namesrv = NameServer(host="127.0.0.1", port=0)
    await namesrv.start()
    handover = Handover(namesrv, old_script)
    try:
        await handover.old.start(handover.addr, TOPIC)
        yield handover
    finally:
        await handover.new.stop()
        await handover.old.stop()
        await namesrv.stop()


def test_a_send_refused_as_service_not_available_goes_to_the_master_registered_since() -> None:
    async def scenario() -> None:
        deposed = [Code.SUCCESS] + [Code.SERVICE_NOT_AVAILABLE] * 3
        async with (
            old_and_new_master(deposed) as group,
            Producer("PID_fo", group.addr, poll_name_server_interval=NO_PERIODIC_REFRESH_S) as producer,
        ):
            assert (await producer.send(Message(TOPIC, b"before"))).status is SendStatus.SEND_OK
            await group.hand_over()
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in group.old.sends] == [
                b"before",
                b"after",
            ]  # refused once, then not asked again
            assert [r.body for r in group.new.sends] == [b"after"]

    run(scenario())


def test_a_send_to_a_master_that_is_gone_goes_to_the_master_registered_since() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([]) as group,
            Producer("PID_fo", group.addr, poll_name_server_interval=NO_PERIODIC_REFRESH_S) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await group.old.server.stop()  # its connections close; its port refuses connections
            await group.hand_over()
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in group.new.sends] == [b"after"]

    run(scenario())


def test_a_send_to_a_silent_master_is_retried_on_the_same_queue_of_the_master_registered_since() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([Code.SUCCESS, SILENT]) as group,
            Producer(
                "PID_fo", group.addr, send_timeout=1.0, poll_name_server_interval=NO_PERIODIC_REFRESH_S
            ) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await group.hand_over()  # the old one keeps its client connections, unanswered
            # The first attempt times out; its outcome unknown, the same queue is tried again, at the
            # master the route names now.
            retried = await producer.send(Message(TOPIC, b"unanswered"))
            assert retried.status is SendStatus.SEND_OK
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in group.old.sends] == [b"before", b"unanswered"]
            assert [r.body for r in group.new.sends] == [b"unanswered", b"after"]
            # One queue id and one UNIQ_KEY: a deduplicating broker would store the message once.
            old_attempt, new_attempt = (
                SendMessageRequestHeader.decode(r.ext_fields, compact=True)
                for r in (group.old.sends[1], group.new.sends[0])
            )
            assert (old_attempt.queue_id, old_attempt.properties) == (
                new_attempt.queue_id,
                new_attempt.properties,
            )

    run(scenario())


def test_a_refusal_other_than_service_not_available_does_not_look_the_route_up() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([Code.SUCCESS] + [Code.SYSTEM_ERROR] * 3) as group,
            Producer(
                "PID_fo", group.addr, retry_times=2, poll_name_server_interval=NO_PERIODIC_REFRESH_S
            ) as producer,
        ):
            await producer.send(Message(TOPIC, b"before"))
            await group.hand_over()
            with pytest.raises(BrokerError) as refused:
                await producer.send(Message(TOPIC, b"busy"))
            assert refused.value.code == Code.SYSTEM_ERROR
            assert (
                len(group.old.sends) == 4 and not group.new.sends
            )  # a broker that answers is still the master

    run(scenario())


def test_a_producer_whose_group_lost_its_master_finds_the_one_registered_since_within_a_second() -> None:
    async def scenario() -> None:
        async with (
            old_and_new_master([]) as group,
            Producer("PID_fo", group.addr, poll_name_server_interval=NO_PERIODIC_REFRESH_S) as producer,
        ):
            now = [100.0]
            producer._instance.clock = lambda: now[0]
            slave = RemotingClient()  # a slave keeps the group, and its queues, in the route
            header = RegisterBrokerRequestHeader(
                broker_name="broker-s",
                broker_addr="127.0.0.1:1",
                cluster_name="DefaultCluster",
                ha_server_addr="127.0.0.1:2",
                broker_id=1,
            )
            body = RegisterBrokerBody(DataVersion(timestamp=1, counter=1), {}).encode()
            registration = RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.encode(), body=body)
            assert (await slave.invoke(group.addr, registration)).code == Code.SUCCESS
            await producer.send(Message(TOPIC, b"before"))
            await group.old.server.stop()
            await group.leave()
            with pytest.raises(CometMQError):  # no master anywhere: the route that says so is cached
                await producer.send(Message(TOPIC, b"lost"))
            await group.new.start(group.addr, TOPIC)
            with pytest.raises(NoRouteError):  # the route names no master, and was looked up just now
                await producer.send(Message(TOPIC, b"too soon"))
            now[0] += 1.0
            result = await producer.send(Message(TOPIC, b"after"))
            assert result.status is SendStatus.SEND_OK
            assert [r.body for r in group.new.sends] == [b"after"]
            await slave.close()

    run(scenario())
