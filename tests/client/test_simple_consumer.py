"""cometmq.client.SimpleConsumer against a standalone server: receive, ack, change the invisible
duration, redelivery with the attempt counted, the DLQ after retryMaxTimes, FIFO order, filters, and
the blocking facade."""

from __future__ import annotations

import asyncio

import pytest
from client_support import run

from cometmq.client import AdminClient, Message, Producer, ReceivedMessage, SimpleConsumer, blocking
from cometmq.errors import BrokerError, CometMQError
from cometmq.protocol import ResponseCode
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from processes import StandaloneServer
from waiting import wait_until


async def _topic(server: StandaloneServer, topic: str, queues: int = 2) -> None:
    async with AdminClient(server.namesrv) as admin:
        await admin.create_topic(topic, queues=queues)


async def _send(
    server: StandaloneServer, topic: str, bodies: list[bytes], keys: list[str] | None = None
) -> None:
    async with Producer("PID_simple", server.namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, keys=keys or []))


def _consumer(
    server: StandaloneServer, topic: str, group: str, expression: str = "*", *, fifo: bool = False
) -> SimpleConsumer:
    """A consumer of *group* subscribed to *topic* with *expression*."""
    return SimpleConsumer(group, server.namesrv, subscriptions={topic: expression}, fifo=fifo)


async def _receive_all(
    consumer: SimpleConsumer, count: int, invisible: float = 30.0
) -> list[ReceivedMessage]:
    got: list[ReceivedMessage] = []
    while len(got) < count:
        got += await consumer.receive(32, invisible, await_duration=20)
    return got


def test_received_messages_are_acked_and_never_come_back(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleAck")
        await _send(server, "SimpleAck", [b"a", b"b", b"c"])
        async with _consumer(server, "SimpleAck", "GID_simple_ack") as consumer:
            messages = await _receive_all(consumer, 3)
            assert sorted(m.body for m in messages) == [b"a", b"b", b"c"]
            for message in messages:
                assert message.delivery_attempt == 1
                assert message.receipt_handle
                await consumer.ack(message)
            assert await consumer.receive(32, await_duration=0) == []
            with pytest.raises(BrokerError) as raised:
                await consumer.ack(messages[0])
            assert raised.value.code == ResponseCode.NO_MESSAGE

    run(scenario())


def test_a_receive_waits_for_a_message_to_arrive(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleWait")
        async with _consumer(server, "SimpleWait", "GID_simple_wait") as consumer:
            waiting = asyncio.ensure_future(consumer.receive(4, await_duration=60))
            await _send(server, "SimpleWait", [b"late"])
            assert [m.body for m in await waiting] == [b"late"]

    run(scenario())


def test_an_unacked_message_is_delivered_again_then_dead_lettered(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleRetry", 1)
        async with AdminClient(server.namesrv) as admin:
            await admin.create_group(SubscriptionGroupConfig("GID_simple_retry", retry_max_times=2))
        await _send(server, "SimpleRetry", [b"flaky"], keys=["k1"])
        async with _consumer(server, "SimpleRetry", "GID_simple_retry") as consumer:
            attempts = []
            ids = set()
            for _ in range(3):
                (message,) = await _receive_all(consumer, 1, invisible=0.3)
                attempts.append(message.delivery_attempt)
                ids.add(message.msg_id)
                assert message.topic == "SimpleRetry" and message.body == b"flaky"
            assert attempts == [1, 2, 3] and len(ids) == 1
        async with SimpleConsumer("GID_dlq_reader", server.namesrv, consume_from="first") as reader:
            reader.subscribe("%DLQ%GID_simple_retry")
            await wait_until(
                lambda: reader.instance.fetch_route("%DLQ%GID_simple_retry"), message="the DLQ topic's route"
            )
            (dead,) = await _receive_all(reader, 1)
            assert dead.body == b"flaky" and dead.keys == ["k1"]
            assert dead.properties["DLQ_ORIGIN_TOPIC"] == "SimpleRetry"

    run(scenario())


def test_changing_the_invisible_duration_renews_the_handle(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleChange", 1)
        await _send(server, "SimpleChange", [b"long job"])
        async with _consumer(server, "SimpleChange", "GID_simple_change") as consumer:
            (message,) = await _receive_all(consumer, 1, invisible=30)
            old = message.receipt_handle
            await consumer.change_invisible_duration(message, 120)
            assert message.receipt_handle != old
            await consumer.ack(message)
            assert await consumer.receive(1, await_duration=0) == []

    run(scenario())


def test_a_fifo_consumer_gets_a_queue_one_batch_at_a_time_in_order(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleFifo", 1)
        await _send(server, "SimpleFifo", [b"1", b"2", b"3"])
        async with _consumer(server, "SimpleFifo", "GID_simple_fifo", fifo=True) as consumer:
            first = await consumer.receive(2, 30, await_duration=20)
            assert [m.body for m in first] == [b"1", b"2"]
            assert await consumer.receive(2, 30, await_duration=0) == []  # blocked until acked
            for message in first:
                await consumer.ack(message)
            rest = await consumer.receive(2, 30, await_duration=20)
            assert [m.body for m in rest] == [b"3"]

    run(scenario())


def test_a_tag_filter_receives_only_matching_messages(server: StandaloneServer) -> None:
    async def scenario() -> None:
        await _topic(server, "SimpleTags", 1)
        async with Producer("PID_simple_tags", server.namesrv) as producer:
            for tag in ("keep", "drop", "keep"):
                await producer.send(Message("SimpleTags", tag.encode(), tags=tag))
        async with _consumer(server, "SimpleTags", "GID_simple_tags", "keep") as consumer:
            messages = await _receive_all(consumer, 2)
            assert [m.tags for m in messages] == ["keep", "keep"]

    run(scenario())


def test_receive_without_a_subscription_is_refused(server: StandaloneServer) -> None:
    async def scenario() -> None:
        async with SimpleConsumer("GID_simple_none", server.namesrv) as consumer:
            with pytest.raises(CometMQError, match="subscribe"):
                await consumer.receive()

    run(scenario())


def test_the_blocking_simple_consumer(server: StandaloneServer) -> None:
    run(_topic(server, "SimpleBlocking", 1))
    run(_send(server, "SimpleBlocking", [b"sync"]))
    with blocking.SimpleConsumer("GID_simple_blocking", server.namesrv) as consumer:
        consumer.subscribe("SimpleBlocking")
        (message,) = consumer.receive(1, 30, await_duration=20)
        assert message.body == b"sync"
        consumer.ack(message)
